package e2b

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
)

// A fork is E2B's copy of a live sandbox: one checkpoint of its workspace
// (the same one a snapshot takes; the sandbox runs on) booted into count
// new sandboxes, each with the source's template, environment, metadata
// and internet setting, and a new id and token. Like every checkpoint it
// holds files, not processes or memory. The forks share the checkpoint's
// chunks, so their workspaces start copy-on-write from it.

// maxForks bounds a fork's count, as E2B's API does.
const maxForks = 100

// forkRequest is SandboxForkRequest.
type forkRequest struct {
	Timeout *int64 `json:"timeout"`
	Count   *int   `json:"count"`
}

// forkResult is SandboxForkResult: exactly one of its fields is set.
type forkResult struct {
	Sandbox *sandboxJSON `json:"sandbox,omitempty"`
	Error   *apiError    `json:"error,omitempty"`
}

func (s *Server) handleFork(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req forkRequest
	if err := readBody(r, &req); err != nil {
		return err
	}
	n := 1
	if req.Count != nil {
		n = *req.Count
	}
	if n < 1 || n > maxForks {
		return &publicError{status: 400, msg: fmt.Sprintf("count: 1 to %d", maxForks)}
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	if s.o.Checkpoints == nil {
		return errNoCheckpoints
	}
	b.life.Lock()
	digest, err := s.workspaceNow(ctx, b)
	b.life.Unlock()
	if err != nil {
		return err
	}
	internet, public := b.internet, !b.private
	from := createRequest{
		Timeout: req.Timeout, Metadata: maps.Clone(b.metadata), EnvVars: maps.Clone(b.envs), AllowInternetAccess: &internet,
		Network: &networkRequest{AllowPublicTraffic: &public},
	}
	if b.maskHost != "" {
		from.Network.MaskRequestHost = &b.maskHost
	}
	if r := b.rules.Load(); r != nil {
		from.Network.AllowOut, from.Network.DenyOut = r.allowOut, r.denyOut
	}
	out := make([]forkResult, 0, n)
	for range n {
		f, err := s.start(ctx, b.tenant, c.p.KeyID, from, b.template, digest, "sandbox "+b.id)
		if err != nil {
			out = append(out, forkResult{Error: s.forkError(err)})
			continue
		}
		sj := s.sandboxJSON(f)
		out = append(out, forkResult{Sandbox: &sj})
		s.audit.record(Record{
			Tenant: b.tenant, KeyID: c.p.KeyID, Sandbox: f.id, Op: "sandbox.fork", Outcome: "ok",
			Detail: clipDetail(fmt.Sprintf("fork of %s (checkpoint %s)", b.id, digest)),
		})
	}
	writeJSON(w, http.StatusCreated, out)
	return nil
}

// forkError is one fork's failure as the API tells it: a public error's
// status and text, anything else logged and told as an internal error.
func (s *Server) forkError(err error) *apiError {
	if pe, ok := errors.AsType[*publicError](err); ok {
		return &apiError{Code: pe.status, Message: pe.msg}
	}
	s.log.Error("e2b: a fork did not start", "err", err)
	return &apiError{Code: http.StatusInternalServerError, Message: "internal error"}
}
