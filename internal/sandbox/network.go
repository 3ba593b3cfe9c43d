package sandbox

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/airlockrun/airlock/internal/event"
)

// Network attaches the host's bridge (an egress proxy, the LLM gateway) to
// a sandbox about to be created. The run engine and the E2B API call it
// before Backend.Create; the host wiring implements it.
type Network interface {
	// Attach prepares the network of the sandbox a.Spec describes: it may
	// set the Spec's ID, Network, ProxySocket and TrustedCAs, and from then
	// on reports through a's hooks. The returned release undoes what
	// Attach set up; the caller calls it once the sandbox is gone (or was
	// never created).
	Attach(ctx context.Context, a Attachment) (release func(), err error)
}

// Attachment is one sandbox's request for a network: who it is for, the
// policy that governs it, the Spec to edit, and the hooks through which
// the bridge reports what it does. The hooks are called from the bridge's
// goroutines, concurrently, for as long as the sandbox lives.
type Attachment struct {
	RunID   string
	Tenant  string
	Sandbox string
	// Policy is the resolved policy document the network follows.
	Policy []byte
	Spec   *Spec
	// Audit records one decision of the egress proxy, after the request.
	Audit func(event.EgressDecision)
	// Ask decides a request to host:port that the network policy answers
	// with ask. It blocks until a decision, the hold's end, or ctx's end.
	Ask func(ctx context.Context, host string, port int) (bool, error)
	// Log appends the events of a host channel (the LLM gateway's
	// llm.call and budget.exhausted) to the record the sandbox belongs to
	// and returns the seq of the first.
	Log func(ctx context.Context, ps ...event.Payload) (seq int64, err error)
	// Narrow, when set, refuses connections the policy allows: the egress
	// proxy asks it about every address it would connect to, with the
	// host the policy judged, at each connection (egress.Config.Narrow).
	// The E2B API's per-sandbox network rules. May be nil.
	Narrow func(host string, a netip.Addr) bool
}

// ListenProxySocket listens on the unix socket at path that a Spec's
// ProxySocket names. A socket's bound name is what the kernel shows of
// every connection to it in /proc/net/unix, the sandbox's included (the
// accepted end lives in the connecting side's network namespace): it is
// bound through a descriptor of its directory, /proc/self/fd/N/NAME, so
// that no host path shows inside. The listener does not remove the socket
// when closed (the name it knows is that descriptor's): the caller removes
// path.
func ListenProxySocket(path string) (*net.UnixListener, error) {
	dir, err := os.Open(filepath.Dir(path))
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	name := fmt.Sprintf("/proc/self/fd/%d/%s", dir.Fd(), filepath.Base(path))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false)
	return ln, nil
}
