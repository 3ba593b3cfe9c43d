package server

import (
	"net/http"

	"github.com/airlockrun/airlock/internal/api"
)

// Sandboxes tells the tenants' live sandboxes of the host's E2B API and
// their exposed ports (the host's e2b.Server through an adapter).
type Sandboxes interface {
	// Sandboxes lists tenant's live sandboxes, by id.
	Sandboxes(tenant string) []api.Sandbox
	// Sandbox returns tenant's live sandbox id, false when the tenant
	// has none of that id.
	Sandbox(tenant, id string) (api.Sandbox, bool)
}

var errNoSandbox = publicf(api.CodeNotFound, "no such sandbox")

func (s *Server) listSandboxes(w http.ResponseWriter, _ *http.Request, c *call) error {
	out := api.SandboxList{Sandboxes: []api.Sandbox{}}
	if s.o.Sandboxes != nil {
		out.Sandboxes = append(out.Sandboxes, s.o.Sandboxes.Sandboxes(c.p.Tenant)...)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c *call) error {
	if s.o.Sandboxes == nil {
		return errNoSandbox
	}
	sb, ok := s.o.Sandboxes.Sandbox(c.p.Tenant, r.PathValue("id"))
	if !ok {
		return errNoSandbox
	}
	writeJSON(w, http.StatusOK, sb)
	return nil
}
