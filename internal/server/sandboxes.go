package server

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/airlockrun/airlock/internal/api"
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
