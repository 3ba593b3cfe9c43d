// Package auth is who may call the host's API: tenants' API keys, their
// scopes, and the principal a verified key stands for.
package auth

import "slices"

// The scopes an API key may hold. ScopeAdmin holds every other.
const (
	ScopeRunsWrite    = "runs:write"
	ScopeRunsRead     = "runs:read"
	ScopeApprovals    = "approvals"
	ScopeSecretsWrite = "secrets:write"
	ScopeSandboxes    = "sandboxes"
	ScopeAdmin        = "admin"
)

// Scopes lists every scope, in the order documentation shows them.
var Scopes = []string{ScopeRunsWrite, ScopeRunsRead, ScopeApprovals, ScopeSecretsWrite, ScopeSandboxes, ScopeAdmin}

// Principal is the caller a verified API key stands for: one tenant, and
// what the key may do there.
type Principal struct {
	Tenant string
	// KeyID is the key's public id ("key_…"), for audit records.
	KeyID  string
	Scopes []string
}

// Can reports whether p holds scope (admin holds all).
func (p Principal) Can(scope string) bool {
	return slices.Contains(p.Scopes, scope) || slices.Contains(p.Scopes, ScopeAdmin)
}
