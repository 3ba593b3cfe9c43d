package server

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

// RunOf is a run as the API shows it: its list form, without the
// outcome, metadata and policy that GET of one run adds.
func RunOf(r store.Run) api.Run {
	v := api.Run{
		ID: r.ID, Tenant: r.Tenant, Status: r.Status, Model: r.Model, Task: r.Task, Created: r.Created.UTC(), Updated: r.Updated.UTC(),
		ParentRunID: r.ParentRunID, ParentSeq: r.ParentSeq, Events: r.LastSeq, PolicyHash: r.PolicyHash,
	}
	if !r.LastHash.IsZero() {
		v.LastHash = r.LastHash.String()
	}
	if !r.Finished.IsZero() {
		f := r.Finished.UTC()
		v.Finished = &f
	}
	return v
}

// hiddenArtifact reports whether an artifact is the host's bookkeeping
// rather than a result: workspace snapshots. Artifact listings leave them
// out.
func hiddenArtifact(name string) bool {
	return strings.HasPrefix(name, "snapshots/")
}

func (s *Server) createRun(w http.ResponseWriter, r *http.Request, c *call) error {
	var q api.CreateRunRequest
	if err := s.decode(w, r, &q, false); err != nil {
		return err
	}
	if err := validateCreate(&q); err != nil {
		return err
	}
	ctx := r.Context()
	var pol RunPolicy
	var err error
	if q.Template != "" {
		pol, err = s.templateRun(ctx, c.view, q.Template)
	} else {
		pol, err = s.resolvePolicy(ctx, c.view, q.Policy, q.PolicyDocument)
	}
	if err != nil {
		return err
	}
	var tar string
	if ws := q.Workspace; ws != nil && ws.Git == "" {
		if tar, err = s.openUpload(ctx, c.view, ws.Upload); err != nil {
			return err
		}
	}
	req, err := NewRun(c.p.Tenant, q, pol, tar, "api.yaml")
	if err != nil {
		return err
	}
	run, err := s.o.Engine.Create(ctx, req)
	if err != nil {
		return err
	}
	s.metrics.created.Add(1)
	c.log.Info("run created", "run_id", run.ID)
	v := RunOf(run)
	v.Metadata = q.Metadata
	w.Header().Set("Location", "/v1/runs/"+run.ID)
	writeJSON(w, http.StatusCreated, v)
	return nil
}

// NewRun is the engine's request for the run q asks for, of tenant, held
// to pol: the one conversion of a run request, for the API's create and for
// the host's own command line (which adds what only it may ask). The
// request's verify, artifacts and max_steps are written into the policy,
// as airlock run's flags are, and the run then records the hash of both;
// tar is the digest of the uploaded workspace q names, if any; script
// names the script of a scripted model ("script:NAME"). A template
// (pol.Template) writes its image and limits into the policy as the
// request's fields do, and gives the run its environment.
func NewRun(tenant string, q api.CreateRunRequest, pol RunPolicy, tar, script string) (engine.Request, error) {
	req := engine.Request{Tenant: tenant, Task: q.Task, Policy: pol.Doc, PolicySource: pol.Source, PolicyVersion: pol.Version, Metadata: q.Metadata}
	doc, byTemplate := pol.Parsed, false
	if t := pol.Template; t != nil {
		var err error
		if doc, byTemplate, err = t.write(doc); err != nil {
			return req, err
		}
	}
	doc, changed, err := withRequestFields(doc, &q)
	if err != nil {
		return req, err
	}
	if changed || byTemplate {
		// The run is held to (and records) the policy with them, and the
		// hash of the one they changed, as airlock run's flags.
		req.Flags, req.BasePolicy, req.Policy = true, pol.Doc, doc.Canonical()
	}
	cfg := engine.PolicyConfig(doc)
	cfg.Model = q.Model
	if q.Script != "" {
		cfg.Model, req.Script = "script:"+script, []byte(q.Script)
	}
	switch ws := q.Workspace; {
	case ws == nil:
	case ws.Git != "":
		cfg.Sandboxes[0].Git = &engine.GitSource{URL: ws.Git, Ref: ws.Ref}
	default:
		cfg.Sandboxes[0].Tar = tar
	}
	if t := pol.Template; t != nil {
		tr := t.Run
		cfg.Env, cfg.Template = t.Env, &tr
	}
	req.Config = cfg
	return req, nil
}

// withRequestFields writes a create request's verify, artifacts and
// max_steps into doc, which it may change: they are shorthand for its
// fields, as airlock run's flags are (max_steps only lowers the budget).
// It returns the document the run is held to and whether they changed
// it; a changed document is checked as a whole, like one a client sends.
func withRequestFields(doc *policy.Document, q *api.CreateRunRequest) (*policy.Document, bool, error) {
	steps := int64(lower(int(doc.Budgets.MaxSteps), q.MaxSteps))
	if steps == doc.Budgets.MaxSteps && q.Verify == nil && len(q.Artifacts) == 0 {
		// Nothing to write: most requests carry none of the fields, and
		// two canonical forms to compare cost more than the rest of a
		// run's creation.
		return doc, false, nil
	}
	before := doc.Canonical()
	doc.Budgets.MaxSteps = steps
	if v := q.Verify; v != nil {
		doc.Verify.Commands = append(doc.Verify.Commands, v.Commands...)
		doc.Verify.Changed = append(doc.Verify.Changed, v.Changed...)
		doc.Verify.OnlyChanged = append(doc.Verify.OnlyChanged, v.OnlyChanged...)
	}
	doc.Artifacts = append(doc.Artifacts, q.Artifacts...)
	after := doc.Canonical()
	if bytes.Equal(after, before) {
		return doc, false, nil
	}
	changed, err := policy.Parse(after)
	if err != nil {
		// Lines of the canonical form would mean nothing to the client.
		var msgs []string
		for _, e := range policy.Problems(err) {
			e.Line = 0
			msgs = append(msgs, strings.TrimPrefix(e.Error(), "policy: "))
		}
		if len(msgs) > 0 {
			err = errors.New(strings.Join(msgs, "; "))
		}
		return nil, false, badRequest("the policy with the request's verify, artifacts and max_steps: %s", clientText(err))
	}
	return changed, true, nil
}

// Events reads a run's log: a store, or a tenant's view of one.
type Events interface {
	Events(ctx context.Context, runID string, from int64, limit int) ([]event.Event, error)
}

// FirstEvents fills v with what a run's first events record: its metadata
// and image (run.created) and where its policy came from
// (policy.resolved); a run without them leaves v as it is.
func FirstEvents(ctx context.Context, view Events, runID string, v *api.Run) error {
	evs, err := view.Events(ctx, runID, 1, 2)
	if err != nil {
		return err
	}
	for _, e := range evs {
		switch e.Type {
		case event.TypeRunCreated:
			var created event.RunCreated
			if err := json.Unmarshal(e.Payload, &created); err != nil {
				return fmt.Errorf("run %s: run.created: %w", runID, err)
			}
			v.Metadata = created.Metadata
			var cfg struct {
				Image string `json:"image"`
			}
			if len(created.Config) > 0 {
				if err := json.Unmarshal(created.Config, &cfg); err != nil {
					return fmt.Errorf("run %s: run.created: config: %w", runID, err)
				}
			}
			v.Image = cfg.Image
		case event.TypePolicyResolved:
			var p event.PolicyResolved
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				return fmt.Errorf("run %s: policy.resolved: %w", runID, err)
			}
			v.Policy = &api.RunPolicy{Source: p.Source, Version: p.Version, BaseHash: p.BaseHash}
		}
	}
	return nil
}

// Paging bounds.
const (
	defaultPage = 50
	maxPage     = 500
)

// encodeCursor and decodeCursor make the opaque cursor of a run listing:
// the last run id of a page.
func encodeCursor(runID string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("r:" + runID))
}

func decodeCursor(c string) (string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	id, ok := strings.CutPrefix(string(b), "r:")
	if err != nil || !ok || event.ValidRunID(id) != nil {
		return "", badRequest("cursor: not a cursor this API returned")
	}
	return id, nil
}

// parseStatuses reads ?status=S (repeated, or comma-separated).
func parseStatuses(vals []string) ([]event.Status, error) {
	var out []event.Status
	for _, v := range vals {
		for _, p := range strings.Split(v, ",") {
			st := event.Status(strings.TrimSpace(p))
			if !st.Valid() {
				return nil, badRequest("status %q: not a run status", clipText(p, 40))
			}
			out = append(out, st)
		}
	}
	return out, nil
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	n, err := parseParam(runsPageParam, q.Get("limit"))
	if err != nil {
		return err
	}
	limit := int(n)
	f := store.RunFilter{Limit: limit, Desc: q.Get("order") != "asc"}
	if o := q.Get("order"); o != "" && o != "asc" && o != "desc" {
		return badRequest("order %q: want asc or desc", clipText(o, 20))
	}
	if f.Statuses, err = parseStatuses(q["status"]); err != nil {
		return err
	}
	if f.Metadata, err = parseMetadataFilter(q); err != nil {
		return err
	}
	if cur := q.Get("cursor"); cur != "" {
		if f.After, err = decodeCursor(cur); err != nil {
			return err
		}
	}
	runs, err := c.view.ListRuns(r.Context(), f)
	if err != nil {
		return err
	}
	out := api.RunList{Runs: make([]api.Run, 0, len(runs))}
	for _, x := range runs {
		out.Runs = append(out.Runs, RunOf(x))
	}
	if len(runs) == limit {
		out.NextCursor = encodeCursor(runs[len(runs)-1].ID)
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// ownRun returns the run of the path's {id} if it is the caller's tenant's;
// any other id, malformed ones too, is not found.
func ownRun(r *http.Request, c *call) (store.Run, error) {
	run, err := c.view.GetRun(r.Context(), r.PathValue("id"))
	if errors.Is(err, store.ErrNotFound) {
		return store.Run{}, errNoRun
	}
	return run, err
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, c *call) error {
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	v := RunOf(run)
	o, err := s.o.Engine.Outcome(r.Context(), run.ID)
	if err != nil {
		return err
	}
	WithOutcome(&v, o)
	if err := FirstEvents(r.Context(), c.view, run.ID, &v); err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, v)
	return nil
}

const maxReason = 1024

// validateAction checks the body of cancel and pause.
func validateAction(q api.ActionRequest) error {
	if len(q.Reason) > maxReason || !printableText(q.Reason) {
		return badRequest("reason: want printable text of at most %d bytes", maxReason)
	}
	return nil
}

// act runs a control action on the caller's run and answers the run as
// it is after it.
func (s *Server) act(w http.ResponseWriter, r *http.Request, c *call, do func(ctx context.Context, id string, q api.ActionRequest) error) error {
	var q api.ActionRequest
	if err := s.decode(w, r, &q, true); err != nil {
		return err
	}
	if err := validateAction(q); err != nil {
		return err
	}
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	if err := do(r.Context(), run.ID, q); err != nil {
		return err
	}
	if run, err = c.view.GetRun(r.Context(), run.ID); err != nil {
		return err
	}
	writeJSON(w, http.StatusAccepted, RunOf(run))
	return nil
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.act(w, r, c, func(ctx context.Context, id string, q api.ActionRequest) error {
		return s.o.Engine.Cancel(ctx, id, c.p.KeyID, q.Reason)
	})
}

func (s *Server) pauseRun(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.act(w, r, c, func(ctx context.Context, id string, q api.ActionRequest) error {
		return s.o.Engine.Pause(ctx, id, q.Reason)
	})
}

// resumeRun asks for a paused run to be resumed through Options.Resume
// (airlock serve queues it in the store, where any server's workers take
// it, also after this process is gone); it answers 202 with the run as it
// is then (queued until a worker takes it).
func (s *Server) resumeRun(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.act(w, r, c, func(ctx context.Context, id string, _ api.ActionRequest) error {
		run, err := c.view.GetRun(ctx, id)
		if err != nil {
			return err
		}
		switch {
		case run.Status.Final():
			return publicf(api.CodeConflict, "the run has ended")
		case run.Status != event.StatusPaused:
			return publicf(api.CodeConflict, "the run is %s, not paused", run.Status)
		case s.o.Resume == nil:
			return publicf(api.CodeUnavailable, "this server drives no runs; resume it where workers run")
		}
		return s.o.Resume(ctx, id)
	})
}

func (s *Server) forkRun(w http.ResponseWriter, r *http.Request, c *call) error {
	var q api.ForkRequest
	if err := s.decode(w, r, &q, false); err != nil {
		return err
	}
	if err := validateFork(&q); err != nil {
		return err
	}
	parent, err := ownRun(r, c)
	if err != nil {
		return err
	}
	ctx := r.Context()
	o := engine.ForkOptions{Model: q.Model, MaxSteps: q.MaxSteps}
	if q.Script != "" {
		o.Model, o.Script = "script:api.yaml", []byte(q.Script)
	}
	if q.Policy != "" || q.PolicyDocument != "" {
		pol, err := s.resolvePolicy(ctx, c.view, q.Policy, q.PolicyDocument)
		if err != nil {
			return err
		}
		o.Policy, o.PolicySource, o.PolicyVersion = pol.Doc, pol.Source, pol.Version
	} else if len(parent.Policy) > 0 {
		// The parent's policy was checked when it was created, perhaps
		// under other rules, or by the host's CLI: check it again.
		if _, err := s.checkPolicy(parent.Policy); err != nil {
			return err
		}
	}
	if err := s.checkParentConfig(ctx, c.view, parent.ID); err != nil {
		return err
	}
	child, err := s.o.Engine.Fork(ctx, parent.ID, *q.AtStep, o)
	if err != nil {
		return err
	}
	s.metrics.created.Add(1)
	c.log.Info("run forked", "run_id", child.ID, "parent_run_id", parent.ID)
	w.Header().Set("Location", "/v1/runs/"+child.ID)
	writeJSON(w, http.StatusCreated, RunOf(child))
	return nil
}

// checkParentConfig refuses to fork a run whose recorded configuration
// names host directories (a run the host's CLI made with --workspace, say):
// the child would get them too.
func (s *Server) checkParentConfig(ctx context.Context, view *store.TenantStore, id string) error {
	if s.cfg.TrustTenantPolicies {
		return nil
	}
	evs, err := view.Events(ctx, id, 1, 1)
	if err != nil {
		return err
	}
	if len(evs) == 0 || evs[0].Type != event.TypeRunCreated {
		return publicf(api.CodeConflict, "the run has no recorded configuration to fork")
	}
	if t, ok := event.ParseTombstone(evs[0].Payload); ok {
		return publicf(api.CodeConflict, "the run's payloads were deleted by retention on %s: it cannot be resumed or forked", t.DeletedAt.UTC().Format(time.DateOnly))
	}
	var created event.RunCreated
	var cfg engine.Config
	if err := json.Unmarshal(evs[0].Payload, &created); err != nil {
		return err
	}
	if err := json.Unmarshal(created.Config, &cfg); err != nil {
		return err
	}
	host := cfg.RootFS != "" || len(cfg.Mounts) > 0
	for _, sc := range cfg.Sandboxes {
		host = host || sc.Workspace != ""
	}
	if host {
		return publicf(api.CodeForbidden, "the run works on host directories, which this server does not let tenants use")
	}
	return nil
}

// parseMetadataFilter reads the ?metadata[KEY]=VALUE parameters of a
// listing (OpenAPI's deepObject style): runs whose metadata has every one.
func parseMetadataFilter(q url.Values) (map[string]string, error) {
	var md map[string]string
	for k, vs := range q {
		name, ok := strings.CutPrefix(k, "metadata")
		if !ok {
			continue
		}
		key, open := strings.CutPrefix(name, "[")
		key, closed := strings.CutSuffix(key, "]")
		if !open || !closed {
			return nil, badRequest("parameter %q: want metadata[KEY]=VALUE", clipText(k, 80))
		}
		if len(vs) != 1 {
			return nil, badRequest("metadata[%s] is given %d times: once at most", clipText(key, 64), len(vs))
		}
		if md == nil {
			md = map[string]string{}
		}
		md[key] = vs[0]
	}
	if err := event.CheckMetadata(md); err != nil {
		return nil, badRequest("metadata filter: %s", strings.TrimPrefix(err.Error(), "event: "))
	}
	return md, nil
}

// WithOutcome sets what run v's outcome o says: its steps, usage, end,
// checks and checkpoints.
func WithOutcome(v *api.Run, o engine.Outcome) {
	if o.Deleted > 0 {
		v.PayloadsDeleted = &api.PayloadsDeleted{Count: o.Deleted, At: o.DeletedAt.UTC()}
		return
	}
	v.Steps, v.Usage, v.Reason, v.Summary, v.Verification = &o.Steps, &o.Usage, o.Reason, o.Summary, o.Verification
	if o.Checkpoints.Count > 0 {
		c := o.Checkpoints
		v.Checkpoints = &c
	}
}
