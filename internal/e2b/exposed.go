package e2b

import (
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/policy"
)

// Exposure is a live sandbox and the preview URLs its policy exposes,
// as the host's own API and UI list them.
type Exposure struct {
	ID       string
	RunID    string // the sandbox's record
	Template string
	State    string // running or paused
	Started  time.Time
	EndAt    time.Time
	// Open is the connections through the sandbox's preview URLs open
	// now; Bytes what they carried, both ways, over its life.
	Open, Bytes int64
	Ports       []ExposedPorts
}

// ExposedPorts is one rule of a sandbox's ports.expose: the ports it
// names, who may reach them, where, and the connections open to them.
type ExposedPorts struct {
	Ports policy.PortRange
	// Access is the rule's, or token for every rule of a sandbox created
	// with allowPublicTraffic: false.
	Access policy.PortAccess
	// URL is where a client reaches the ports: https://PORT-ID.DOMAIN
	// with e2b.domain set (PORT is "{port}" for a range), else the data
	// plane's address, to which a client names the sandbox and the port
	// in the E2b-Sandbox-Id and E2b-Sandbox-Port headers.
	URL string
	// Open counts the connections open now to the ports this rule
	// decides (a port is the first rule's that names it).
	Open int64
}

// Exposures lists tenant's live (running or paused) sandboxes, by id,
// with the ports their policies expose.
func (s *Server) Exposures(tenant string) []Exposure {
	s.mu.Lock()
	var mine []*box
	for _, b := range s.boxes {
		if b.tenant == tenant {
			mine = append(mine, b)
		}
	}
	s.mu.Unlock()
	slices.SortFunc(mine, func(a, b *box) int { return strings.Compare(a.id, b.id) })
	out := make([]Exposure, 0, len(mine))
	for _, b := range mine {
		out = append(out, s.exposure(b))
	}
	return out
}

// Exposure returns tenant's sandbox id, false when the tenant has no
// live sandbox of that id.
func (s *Server) Exposure(tenant, id string) (Exposure, bool) {
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	if b == nil || b.tenant != tenant {
		return Exposure{}, false
	}
	return s.exposure(b), true
}

func (s *Server) exposure(b *box) Exposure {
	b.mu.Lock()
	state, end := b.state, b.endAt
	b.mu.Unlock()
	e := Exposure{
		ID: b.id, RunID: b.rec.runID, Template: b.template.name, State: state, Started: b.started.UTC(), EndAt: end.UTC(),
		Open: b.ports.Open(), Bytes: b.ports.Bytes(),
	}
	open := b.ports.OpenByPort()
	rules := b.template.doc.Ports.Expose
	for i, r := range rules {
		p := ExposedPorts{Ports: r.Ports, Access: r.Access, URL: s.previewURL(b.id, r.Ports)}
		if p.Access == "" || b.private {
			p.Access = policy.AccessToken
		}
		for port, n := range open {
			if r.Ports.Contains(port) && !slices.ContainsFunc(rules[:i], func(x policy.PortRule) bool { return x.Ports.Contains(port) }) {
				p.Open += n
			}
		}
		e.Ports = append(e.Ports, p)
	}
	return e
}

// previewURL is where ports of sandbox id are reached (ExposedPorts.URL).
func (s *Server) previewURL(id string, ports policy.PortRange) string {
	if s.cfg.Domain == "" {
		return "http://" + s.cfg.SandboxAddr
	}
	port := "{port}"
	if ports.First == ports.Last {
		port = strconv.Itoa(ports.First)
	}
	return "https://" + port + "-" + id + "." + s.cfg.Domain
}

// PreviewURL is where port of sandbox id is reached on the data plane,
// for a sandbox another service serves there (Options.Ports): with
// e2b.domain set, https://PORT-ID.DOMAIN, which names both; else the
// data plane's address and the headers that name them.
func (s *Server) PreviewURL(id string, port int) (url string, headers map[string]string) {
	if s.cfg.Domain == "" {
		return "http://" + s.cfg.SandboxAddr, map[string]string{"E2b-Sandbox-Id": id, "E2b-Sandbox-Port": strconv.Itoa(port)}
	}
	return s.previewURL(id, policy.PortRange{First: port, Last: port}), nil
}

// holds reports whether id is one of the Server's sandboxes, running or
// paused.
func (s *Server) holds(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.boxes[id] != nil
}
