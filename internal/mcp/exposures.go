package mcp

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
)

// LiveSandbox is a live sandbox of an MCP session and the ports its
// client exposed, as the host's own API and UI list them.
type LiveSandbox struct {
	ID      string
	Session string
	// Policy is the policy's name as the client gave it ("default").
	Policy  string
	Created time.Time
	// Open is the connections through its exposed ports open now; Bytes
	// what they carried, both ways, over its life.
	Open, Bytes int64
	// Exposures are the ports expose_port exposed, by port.
	Exposures []Exposure
}

// Exposure is one port expose_port exposed: where, to whom, by whom and
// when.
type Exposure struct {
	Port int
	// URL is where a client reaches it; Headers what the client sends
	// there to name the sandbox and the port (none when the URL's host
	// names them).
	URL     string
	Headers map[string]string
	// Access is public, or token: the sandbox's traffic token in
	// TrafficHeader (the token itself is never listed).
	Access policy.PortAccess
	// By is the API key (its id) whose session exposed it, or the user
	// of `airlock mcp`; At when.
	By string
	At time.Time
	// Open is the connections open to the port now.
	Open int64
}

// Errors of Revoke.
var (
	// ErrNoSandbox: the tenant has no live MCP sandbox of that id.
	ErrNoSandbox = errors.New("no such sandbox")
	// ErrNotExposed: the sandbox's port is not exposed.
	ErrNotExposed = errors.New("the port is not exposed")
)

// Sandboxes lists tenant's live sandboxes of every session, by id, with
// their exposed ports.
func (s *Server) Sandboxes(tenant string) []LiveSandbox {
	var out []LiveSandbox
	for _, se := range s.liveSessions() {
		for _, b := range se.list(tenant) {
			out = append(out, b.live(se.id))
		}
	}
	slices.SortFunc(out, func(a, b LiveSandbox) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// Sandbox returns tenant's live sandbox id, false when the tenant has no
// live MCP sandbox of that id.
func (s *Server) Sandbox(tenant, id string) (LiveSandbox, bool) {
	se, b := s.find(tenant, id)
	if b == nil {
		return LiveSandbox{}, false
	}
	return b.live(se.id), true
}

// Events returns the log of what tenant's sandbox id reported through
// its event channel; false when the tenant has no live MCP sandbox of that
// id.
func (s *Server) Events(tenant, id string) (*report.Log, bool) {
	_, b := s.find(tenant, id)
	if b == nil || b.events == nil {
		return nil, false
	}
	return b.events, true
}

// Revoke takes port of tenant's sandbox id off the network: a later
// request to its URL is refused as one to a port never exposed, and its
// open connections (WebSockets too) are ended. by (an API key's id) is
// who revoked it, for the audit record. expose_port may expose the port
// again. It returns the exposure that was; ErrNoSandbox or ErrNotExposed
// when there is none.
func (s *Server) Revoke(tenant, id string, port int, by string) (Exposure, error) {
	se, b := s.find(tenant, id)
	if b == nil {
		return Exposure{}, ErrNoSandbox
	}
	bp := &b.ports
	bp.mu.Lock()
	e := bp.byPort[port]
	if e == nil {
		bp.mu.Unlock()
		return Exposure{}, ErrNotExposed
	}
	delete(bp.byPort, port)
	conns := slices.Collect(maps.Values(e.conns))
	e.conns, e.revoked = nil, true
	bp.mu.Unlock()
	out := e.describe(bp.ctr.OpenByPort()[port])
	if e.srv != nil {
		_ = e.srv.Close() // its listener, and the connections open on it
		<-e.done
	}
	for _, cancel := range conns {
		cancel()
	}
	s.audit(Record{
		Session: se.id, Tenant: b.tenant, KeyID: by, Sandbox: b.id, Tool: "port.revoke", Outcome: "ok",
		Detail: fmt.Sprintf("port %d (%s) at %s, %d connections ended", port, e.access, e.url, len(conns)),
	})
	return out, nil
}

// liveSessions returns the server's sessions now.
func (s *Server) liveSessions() []*session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Collect(maps.Values(s.sessions))
}

// find returns tenant's sandbox id and its session, nil when there is
// none.
func (s *Server) find(tenant, id string) (*session, *liveBox) {
	if id == "" {
		return nil, nil // get's "" is a session's first sandbox
	}
	for _, se := range s.liveSessions() {
		if b, ok := se.get(tenant, id); ok {
			return se, b
		}
	}
	return nil, nil
}

// live describes b, a sandbox of session.
func (b *liveBox) live(session string) LiveSandbox {
	open := b.ports.ctr.OpenByPort()
	out := LiveSandbox{
		ID: b.id, Session: session, Policy: b.PolicyName, Created: b.created.UTC(),
		Open: b.ports.ctr.Open(), Bytes: b.ports.ctr.Bytes(), Exposures: []Exposure{},
	}
	b.ports.mu.Lock()
	for _, port := range slices.Sorted(maps.Keys(b.ports.byPort)) {
		out.Exposures = append(out.Exposures, b.ports.byPort[port].describe(open[port]))
	}
	b.ports.mu.Unlock()
	return out
}

// describe is e as Exposure, with open connections.
func (e *exposedPort) describe(open int64) Exposure {
	return Exposure{Port: e.port, URL: e.url, Headers: maps.Clone(e.headers), Access: e.access, By: e.by, At: e.at.UTC(), Open: open}
}

// track registers a request's cancel with its exposure, which Revoke
// calls; it returns what unregisters it, and false (having registered
// nothing) when the exposure has been revoked meanwhile.
func (p *boxPorts) track(e *exposedPort, cancel context.CancelFunc) (func(), bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.revoked {
		return nil, false
	}
	if e.conns == nil {
		e.conns = map[uint64]context.CancelFunc{}
	}
	p.seq++
	k := p.seq
	e.conns[k] = cancel
	return func() {
		p.mu.Lock()
		delete(e.conns, k)
		p.mu.Unlock()
	}, true
}
