// Package bridge is the vocabulary shared by the host endpoints a sandbox
// may reach (the egress proxy, and the LLM gateway and host tools it
// serves): who a request comes from. The identity is set by host wiring
// from the listener a request arrived on, never from anything the sandbox
// sent.
//
// It is a leaf (standard library only), so that the gateway can name the
// caller without linking the proxy.
//
// Importers: internal/egress, internal/gateway, the host's wiring
// (internal/host) and bench/egressbench.
package bridge

import "context"

// Identity names the sandbox a bridge request comes from.
type Identity struct {
	Tenant, Run, Sandbox string
}

// identityKey is the context key of a request's Identity.
type identityKey struct{}

// WithIdentity returns ctx carrying id. Only the proxy that accepted the
// request calls it.
func WithIdentity(ctx context.Context, id Identity) context.Context {
	return context.WithValue(ctx, identityKey{}, id)
}

// IdentityFrom returns the Identity of the sandbox that sent the request
// whose context ctx is. ok is false for a context no proxy marked.
func IdentityFrom(ctx context.Context) (Identity, bool) {
	id, ok := ctx.Value(identityKey{}).(Identity)
	return id, ok
}
