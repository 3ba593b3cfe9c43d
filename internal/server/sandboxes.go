package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/param"
	"github.com/airlockrun/airlock/internal/report"
)

// Sandboxes tells the tenants' live sandboxes of the host's E2B API and
// MCP sessions and their exposed ports (the host's e2b.Server and
// mcp.Server through an adapter).
type Sandboxes interface {
	// Sandboxes lists tenant's live sandboxes, by id.
	Sandboxes(tenant string) []api.Sandbox
	// Sandbox returns tenant's live sandbox id, false when the tenant
	// has none of that id.
	Sandbox(tenant, id string) (api.Sandbox, bool)
	// Revoke ends the exposure of port of tenant's sandbox id (an MCP
	// client's expose_port), with its open connections; by is the
	// revoking API key's id. It returns the exposure that was, or
	// ErrNoSandbox, ErrNotExposed or ErrPolicyPorts.
	Revoke(tenant, id string, port int, by string) (api.SandboxExposure, error)
	// Events returns the log of what tenant's sandbox id reported
	// through its event channel: a live sandbox's, or the stored events
	// of one that ended (an ended log); false when the tenant has no
	// such sandbox, or its events are not kept.
	Events(ctx context.Context, tenant, id string) (*report.Log, bool)
}

// Errors of Sandboxes.Revoke.
var (
	// ErrNoSandbox: the tenant has no live sandbox of that id.
	ErrNoSandbox = errors.New("no such sandbox")
	// ErrNotExposed: the port is not exposed.
	ErrNotExposed = errors.New("the port is not exposed")
	// ErrPolicyPorts: the sandbox's ports are its policy's (an E2B
	// sandbox's ports.expose), not exposures to revoke.
	ErrPolicyPorts = errors.New("the sandbox's ports are its policy's")
)

var errNoSandbox = publicf(api.CodeNotFound, "no such sandbox")

func (s *Server) listSandboxes(w http.ResponseWriter, _ *http.Request, c *call) error {
	out := api.SandboxList{Sandboxes: []api.Sandbox{}}
	if s.o.Sandboxes != nil {
		out.Sandboxes = append(out.Sandboxes, s.o.Sandboxes.Sandboxes(c.p.Tenant)...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// sandboxOf is the caller's tenant's live sandbox the path's id names.
func (s *Server) sandboxOf(r *http.Request, c *call) (api.Sandbox, error) {
	if s.o.Sandboxes == nil {
		return api.Sandbox{}, errNoSandbox
	}
	sb, ok := s.o.Sandboxes.Sandbox(c.p.Tenant, r.PathValue("id"))
	if !ok {
		return api.Sandbox{}, errNoSandbox
	}
	return sb, nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	sb, err := s.sandboxOf(r, c)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}

func (s *Server) listExposures(w http.ResponseWriter, r *http.Request, c *call) error {
	sb, err := s.sandboxOf(r, c)
	if err != nil {
		return err
	}
	out := api.ExposureList{Exposures: sb.Exposures}
	if out.Exposures == nil {
		out.Exposures = []api.SandboxExposure{}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) revokeExposure(w http.ResponseWriter, r *http.Request, c *call) error {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		return badRequest("port %q is not a TCP port (1-65535)", r.PathValue("port"))
	}
	if s.o.Sandboxes == nil {
		return errNoSandbox
	}
	e, err := s.o.Sandboxes.Revoke(c.p.Tenant, id, port, c.p.KeyID)
	switch {
	case errors.Is(err, ErrNoSandbox):
		return errNoSandbox
	case errors.Is(err, ErrNotExposed):
		return publicf(api.CodeNotFound, "port %d of sandbox %s is not exposed", port, id)
	case errors.Is(err, ErrPolicyPorts):
		return publicf(api.CodeConflict, "sandbox %s is an E2B sandbox: its ports are exposed by its template's policy (ports.expose) for its life, not by expose_port; there is no exposure to revoke", id)
	case err != nil:
		return err
	}
	c.log.Info("exposure revoked", "sandbox_id", id, "port", port)
	writeJSON(w, http.StatusOK, e)
	return nil
}

// sandboxEventsPage bounds a page of GET /v1/sandboxes/{id}/events.
var sandboxEventsPage = param.Int{Name: "limit", Min: 1, Max: report.DefaultLogSize, Default: report.DefaultLogSize}

// sandboxEvents answers the events a sandbox outside runs (an MCP
// session's or an E2B sandbox's; live, or ended with its events stored)
// reported: a JSON list, or, to a client that accepts
// text/event-stream, a live stream of them.
func (s *Server) sandboxEvents(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.o.Sandboxes == nil {
		return errNoSandbox
	}
	log, ok := s.o.Sandboxes.Events(r.Context(), c.p.Tenant, r.PathValue("id"))
	if !ok {
		return errNoSandbox
	}
	if strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		return s.streamSandboxEvents(w, r, c, log)
	}
	q := r.URL.Query()
	after, err := parseParam(afterParam, q.Get("after"))
	if err != nil {
		return err
	}
	n, err := parseParam(sandboxEventsPage, q.Get("limit"))
	if err != nil {
		return err
	}
	snap := log.After(uint64(after), int(n))
	out := api.SandboxEventList{Events: apiEvents(snap.Events), Next: snap.Next, Evicted: snap.Evicted, Dropped: snap.Dropped, Ended: snap.Ended}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func apiEvents(es []report.Entry) []api.SandboxEvent {
	out := make([]api.SandboxEvent, 0, len(es))
	for _, e := range es {
		out = append(out, api.SandboxEvent{Seq: e.Seq, Time: e.Time, Event: e.Event})
	}
	return out
}

// streamSandboxEvents sends a sandbox's events as server-sent events: each
// has its Seq as its id, "sandbox.event" as its name and its JSON
// (api.SandboxEvent) as data, after Last-Event-ID or ?after=; the stream
// ends with an "end" event once the sandbox is gone and everything was
// sent.
func (s *Server) streamSandboxEvents(w http.ResponseWriter, r *http.Request, c *call, log *report.Log) error {
	after, err := streamAfter(r)
	if err != nil {
		return err
	}
	if !s.takeStream(c.p.KeyID) {
		return &apiError{code: api.CodeRateLimited, msg: fmt.Sprintf("this key has %d event streams open already", s.cfg.MaxStreams), retryAfter: 5}
	}
	defer s.dropStream(c.p.KeyID)
	s.metrics.streams.Add(1)
	defer s.metrics.streams.Add(-1)
	revoked, session, release := s.watch.hold(c.p, c.session)
	defer release()
	es := &eventStream{s: s, c: c}
	if err := es.open(w); err != nil {
		return err
	}
	defer es.bw.release()
	fmt.Fprintf(es.bw, "retry: %d\n\n", 2000)
	keepalive := time.NewTicker(s.cfg.Keepalive)
	defer keepalive.Stop()
	seen := uint64(after)
	for {
		snap := log.After(seen, streamPage)
		for _, e := range apiEvents(snap.Events) {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			fmt.Fprintf(es.bw, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, event.TypeSandboxEvent, b)
			seen = e.Seq
		}
		if len(snap.Events) == streamPage {
			if err := es.flush(); err != nil {
				return nil // the client went away
			}
			continue
		}
		if snap.Ended {
			b, _ := json.Marshal(snap.Dropped)
			fmt.Fprintf(es.bw, "event: end\ndata: %s\n\n", b)
			_ = es.flush()
			return nil
		}
		if err := es.flush(); err != nil {
			return nil
		}
		select {
		case <-r.Context().Done():
			return nil
		case <-s.closing:
			return nil
		case <-revoked:
			c.log.Info("sandbox event stream ended: its key was revoked")
			return nil
		case <-session:
			c.log.Info("sandbox event stream ended: its ui session ended")
			return nil
		case <-snap.Changed:
		case <-keepalive.C:
			fmt.Fprint(es.bw, ": keepalive\n\n")
		}
	}
}
