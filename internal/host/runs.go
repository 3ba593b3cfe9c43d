package host

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/tools"
)

// The runs of this host's store, as its command line sees them: in the
// API's types, so that a command prints the same whether it reads this
// host or a server.

// Runs returns up to limit runs (store.PageLimit), the newest first:
// statuses, when not empty, keeps only runs in one of them, and metadata
// only runs whose metadata has each of its pairs.
func (h *Host) Runs(ctx context.Context, statuses []event.Status, metadata map[string]string, limit int) ([]api.Run, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	runs, err := rs.store.ListRuns(ctx, store.RunFilter{Limit: limit, Desc: true, Statuses: statuses, Metadata: metadata})
	out := make([]api.Run, len(runs))
	for i, r := range runs {
		out[i] = server.RunOf(r)
	}
	return out, err
}

// FindRun finds the run arg names, a full id or a unique part of one (none
// is an InputError), as the list shows it.
func (h *Host) FindRun(ctx context.Context, arg string) (api.Run, error) {
	r, err := h.ResolveRun(ctx, arg)
	if err != nil {
		return api.Run{}, err
	}
	return server.RunOf(r), nil
}

// Outcome returns run id as GET of one run does, with its outcome,
// metadata and policy, and its artifacts.
func (h *Host) Outcome(ctx context.Context, id string) (api.Run, []api.Artifact, error) {
	rs, err := h.run()
	if err != nil {
		return api.Run{}, nil, err
	}
	r, err := rs.store.GetRun(ctx, id)
	if err != nil {
		return api.Run{}, nil, err
	}
	o, err := rs.eng.Outcome(ctx, r.ID)
	if err != nil {
		return api.Run{}, nil, err
	}
	v, arts := outcomeOf(r, o)
	if err := server.FirstEvents(ctx, rs.store, r.ID, &v); err != nil {
		return api.Run{}, nil, err
	}
	return v, arts, nil
}

// outcomeOf is r with its outcome o, and o's artifacts, as the API shows
// them.
func outcomeOf(r store.Run, o engine.Outcome) (api.Run, []api.Artifact) {
	v := server.RunOf(r)
	server.WithOutcome(&v, o)
	arts := make([]api.Artifact, len(o.Artifacts))
	for i, a := range o.Artifacts {
		arts[i] = server.ArtifactOf(a)
	}
	return v, arts
}

// Events returns a page of run id's events from seq from on; an empty page
// is the end of the log.
func (h *Host) Events(ctx context.Context, id string, from int64) ([]event.Event, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	return rs.store.Events(ctx, id, from, store.MaxPage)
}

// Verification is what Verify found: how many events it checked and the
// last one's hash, how many of their payloads were deleted (a data
// policy's tombstones) and the latest deletion, or why the chain does not
// verify (Broken).
type Verification struct {
	Events    int64
	Last      string
	Deleted   int
	DeletedAt time.Time
	Broken    error
}

// Verify checks run id's hash chain; err is a failure to check it at all.
func (h *Host) Verify(ctx context.Context, id string) (Verification, error) {
	rs, err := h.run()
	if err != nil {
		return Verification{}, err
	}
	r, err := rs.store.GetRun(ctx, id)
	if err != nil {
		return Verification{}, err
	}
	c, broken := store.VerifyRunChain(ctx, rs.store, r.ID)
	n, at := c.Deleted()
	return Verification{Events: c.Seq(), Last: r.LastHash.String(), Deleted: n, DeletedAt: at, Broken: broken}, nil
}

// Stop cancels (by by) or pauses run id, then waits (up to a minute) for a
// process driving it here to let go. Cancelling an E2B sandbox's record
// kills the sandbox (killSandbox).
func (h *Host) Stop(ctx context.Context, id string, pause bool, by, reason string) error {
	rs, err := h.run()
	if err != nil {
		return err
	}
	if !pause {
		r, err := rs.store.GetRun(ctx, id)
		if err != nil {
			return err
		}
		if r.Kind == store.KindSandbox {
			return h.killSandbox(ctx, rs, r, by, reason)
		}
	}
	if pause {
		err = rs.eng.Pause(ctx, id, reason)
	} else {
		err = rs.eng.Cancel(ctx, id, by, reason)
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for rs.eng.Driven(id) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// Unfinished lists the runs no process here drives that are not over:
// what `airlock runs resume` with no argument resumes.
func (h *Host) Unfinished(ctx context.Context) ([]string, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	runs, err := store.Unfinished(ctx, rs.store)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range runs {
		if !rs.eng.Driven(r.ID) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

// Drive drives run id in this process (resume: a stopped one) until it
// ends or ctx does, and returns how it ended. ctx's cause
// engine.ErrCancelled cancels the run; any other end of ctx leaves it to
// be resumed.
func (h *Host) Drive(ctx context.Context, id string, resume bool) (api.Run, []api.Artifact, error) {
	rs, err := h.run()
	if err != nil {
		return api.Run{}, nil, err
	}
	var o engine.Outcome
	if resume {
		o, err = rs.eng.Resume(ctx, id)
	} else {
		o, err = rs.eng.Drive(ctx, id)
	}
	if err != nil {
		return api.Run{}, nil, err
	}
	r, err := rs.store.GetRun(context.WithoutCancel(ctx), id)
	if err != nil {
		return api.Run{}, nil, err
	}
	v, arts := outcomeOf(r, o)
	return v, arts, nil
}

// ErrCancelled is the engine's: as the cause of Drive's context, it
// cancels the run.
var ErrCancelled = engine.ErrCancelled

// CopyArtifact writes the content of artifact a to w.
func (h *Host) CopyArtifact(ctx context.Context, a api.Artifact, w io.Writer) error {
	rs, err := h.run()
	if err != nil {
		return err
	}
	r, err := rs.blobs.Open(ctx, a.Digest)
	if err != nil {
		return err
	}
	defer r.Close()
	_, err = io.Copy(w, r)
	return err
}

// Difference is one way a replay's outcome differs from its run's.
type Difference = engine.Difference

// Replay re-drives run id from its recorded model turns in a fresh
// sandbox, in this process, and compares the two: it returns the replay's
// id and the differences.
func (h *Host) Replay(ctx context.Context, id string) (string, []Difference, error) {
	rs, err := h.run()
	if err != nil {
		return "", nil, err
	}
	rep, err := rs.eng.Replay(ctx, id)
	if err != nil {
		return "", nil, err
	}
	if _, err := rs.eng.Drive(ctx, rep.ID); err != nil {
		return rep.ID, nil, err
	}
	diffs, err := rs.eng.Compare(context.WithoutCancel(ctx), id, rep.ID)
	return rep.ID, diffs, err
}

// Approvals lists the pending approvals of tenant's runs (every tenant's
// when tenant is empty), oldest run first.
func (h *Host) Approvals(ctx context.Context, tenant string) ([]api.Approval, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	as, err := rs.eng.Approvals(ctx, tenant)
	out := make([]api.Approval, len(as))
	for i, a := range as {
		out[i] = api.Approval(a)
	}
	return out, err
}

// ErrNoApproval reports an approval id that names no pending approval.
var ErrNoApproval = engine.ErrNoApproval

// Decide approves or denies approval id, of tenant's runs (any tenant's
// when empty), as by, who must be one the run's policy lets decide
// (names: their user name, uid or key id); text is the comment or the
// reason the model is told.
func (h *Host) Decide(ctx context.Context, id, tenant, by string, names []string, approve bool, text string) error {
	rs, err := h.run()
	if err != nil {
		return err
	}
	if runID, ok := engine.ApprovalRunID(id); ok {
		if r, err := rs.store.GetRun(ctx, runID); err == nil {
			doc, err := h.RunPolicy(r)
			if err != nil {
				return err
			}
			if !doc.Approvals.MayDecide(names...) {
				return &NotApproverError{Run: r.ID, Approvers: doc.Approvals.Approvers}
			}
		}
	}
	return rs.eng.Decide(ctx, id, tenant, by, approve, text)
}

// NotApproverError refuses a decision by one the run's policy does not
// name among its approvers.
type NotApproverError struct {
	Run       string
	Approvers []string
}

func (e *NotApproverError) Error() string {
	return "its policy names " + strings.Join(e.Approvers, ", ")
}

// RunRequest is a run the command line asks for: the API's request, with
// what only this host's own command line may ask besides.
type RunRequest struct {
	api.CreateRunRequest
	// ScriptName names the script file (the run's model is
	// "script:NAME").
	ScriptName string
	// BaseURL is the model provider's API base URL; ContextTokens the
	// model's context window.
	BaseURL       string
	ContextTokens int
	// Sandboxes are the run's sandboxes beside the first, each with a host
	// directory or none.
	Sandboxes []NamedSandbox
	// Env is added to every command's environment in the run's sandboxes.
	Env []string
	// Template, when set, is the stored template the run's sandboxes
	// start from (engine.Config.Template); the request's image, Env and
	// policy are already the template's.
	Template *engine.RunTemplate
	// PolicySource names where PolicyDocument came from; PolicyName, when
	// not empty, the stored policy it is recorded as a version of, by
	// PolicyBy; PolicyVersion the stored version it is ("NAME@vN").
	PolicySource, PolicyName, PolicyBy, PolicyVersion string
	// Flags says the command line's flags changed the policy given,
	// BasePolicy (nil for the built-in default), into PolicyDocument: the
	// run records the hash of both.
	Flags      bool
	BasePolicy []byte
	// UploadDir is the host directory a server's run works on, uploaded
	// (against a server); this host's runs name their directory in their
	// policy (sandbox.workspace.source).
	UploadDir string
	// Tenant owns the run (the local tenant when empty).
	Tenant string
}

// NamedSandbox is one more sandbox of a run.
type NamedSandbox struct {
	Name string
	// Dir is the host directory it works on ("" an empty workspace).
	Dir string
}

// CreateRun records the run q asks for, queued, and returns its id. Its
// model must be one this host can call (CheckModel), unless it is
// scripted; a bad request is an InputError.
func (h *Host) CreateRun(ctx context.Context, q RunRequest) (string, error) {
	rs, err := h.run()
	if err != nil {
		return "", err
	}
	req, err := h.engineRequest(q)
	if err != nil {
		return "", err
	}
	if len(req.Script) == 0 {
		if err := h.CheckModel(req.Config.Model, req.Config.BaseURL); err != nil {
			return "", err
		}
	}
	r, err := rs.eng.Create(ctx, req)
	if err != nil {
		return "", err
	}
	return r.ID, nil
}

// engineRequest is the engine's request for q: the API's conversion
// (server.NewRun), and then what only this host's command line may ask.
func (h *Host) engineRequest(q RunRequest) (engine.Request, error) {
	pol := server.RunPolicy{Parsed: policy.Default(), Source: q.PolicySource, Version: q.PolicyVersion}
	if q.PolicyDocument != "" {
		d, err := policy.Parse([]byte(q.PolicyDocument))
		if err != nil {
			return engine.Request{}, &InputError{Err: fmt.Errorf("the run's policy: %w", err)}
		}
		pol.Doc, pol.Parsed = []byte(q.PolicyDocument), d
	}
	if q.Script != "" {
		if err := CheckScript([]byte(q.Script)); err != nil {
			return engine.Request{}, &InputError{Err: fmt.Errorf("--script %s: %w", q.ScriptName, err)}
		}
	}
	if ws := q.Workspace; ws != nil && ws.Git != "" {
		if err := CheckGit(ws.Git, ws.Ref); err != nil {
			return engine.Request{}, &InputError{Err: fmt.Errorf("--git: %w", err)}
		}
	}
	tenant := q.Tenant
	if tenant == "" {
		tenant = event.LocalTenant
	}
	req, err := server.NewRun(tenant, q.CreateRunRequest, pol, "", filepath.Base(q.ScriptName))
	if err != nil {
		return req, &InputError{Err: err}
	}
	req.PolicyName, req.PolicyBy = q.PolicyName, q.PolicyBy
	if q.Flags {
		req.Flags, req.BasePolicy = true, q.BasePolicy
	}
	cfg := &req.Config
	cfg.BaseURL, cfg.ContextTokens, cfg.Env, cfg.Template = q.BaseURL, q.ContextTokens, q.Env, q.Template
	for _, s := range q.Sandboxes {
		cfg.Sandboxes = append(cfg.Sandboxes, engine.SandboxConfig{Name: s.Name, Workspace: s.Dir})
	}
	return req, nil
}

// ForkRequest is a fork the command line asks for.
type ForkRequest struct {
	// AtStep is the step after which the new run starts (0: from the
	// start).
	AtStep int
	// Model and BaseURL, Script (and ScriptName), MaxSteps replace the
	// parent's when set.
	Model, BaseURL     string
	Script, ScriptName string
	MaxSteps           int
	// PolicyDocument replaces the parent's policy when set; see
	// RunRequest for the other policy fields. PolicyRef names a stored
	// version of the parent's tenant instead.
	PolicyDocument, PolicySource, PolicyName, PolicyBy, PolicyRef string
}

// Fork starts a new run (queued) from parent (a run id, or a unique part
// of one) as it was after q.AtStep and returns its id. The parent's tenant
// owns the child, and so the policy it names or records.
func (h *Host) Fork(ctx context.Context, parentArg string, q ForkRequest) (string, error) {
	rs, err := h.run()
	if err != nil {
		return "", err
	}
	o := engine.ForkOptions{Model: q.Model, BaseURL: q.BaseURL, MaxSteps: q.MaxSteps, PolicySource: q.PolicySource}
	if q.PolicyDocument != "" {
		o.Policy = []byte(q.PolicyDocument)
	}
	if q.Script != "" {
		o.Script, o.Model = []byte(q.Script), "script:"+filepath.Base(q.ScriptName)
	}
	if o.Model != "" && len(o.Script) == 0 {
		if err := h.CheckModel(o.Model, o.BaseURL); err != nil {
			return "", err
		}
	}
	parent, err := h.ResolveRun(ctx, parentArg)
	if err != nil {
		return "", err
	}
	switch {
	case q.PolicyRef != "":
		v, err := h.Policy(ctx, parent.Tenant, q.PolicyRef)
		if err != nil {
			return "", err
		}
		if _, err := policy.Parse([]byte(v.Document)); err != nil {
			return "", &InputError{Err: fmt.Errorf("--policy %s: stored version v%d does not load: %w", q.PolicyRef, v.Version, err)}
		}
		o.Policy, o.PolicySource = []byte(v.Document), fmt.Sprintf("policy %s v%d", v.Name, v.Version)
		o.PolicyVersion = fmt.Sprintf("%s@v%d", v.Name, v.Version)
	case q.PolicyName != "":
		v, err := h.PutPolicy(ctx, parent.Tenant, q.PolicyName, q.PolicySource, q.PolicyBy, []byte(q.PolicyDocument))
		if err != nil {
			return "", err
		}
		o.PolicyVersion = fmt.Sprintf("%s@v%d", v.Name, v.Version)
	}
	child, err := rs.eng.Fork(ctx, parent.ID, q.AtStep, o)
	if err != nil {
		return "", err
	}
	return child.ID, nil
}

// ApprovalRunID returns the run an approval id (RUN.CALL) belongs to.
func ApprovalRunID(id string) (string, bool) { return engine.ApprovalRunID(id) }

// CheckScript checks a model script (a YAML list of turns) as a run would
// read it.
func CheckScript(b []byte) error {
	_, err := model.ParseScript(b)
	return err
}

// CheckGit checks a git workspace source: an http or https URL, and a ref.
func CheckGit(url, ref string) error {
	return (engine.GitSource{URL: url, Ref: ref}).Validate()
}

// CheckEnv checks the KEY=VALUE variables given to a run's sandboxes: none
// may be one the sandbox's proxy, trust store or gateway sets.
func CheckEnv(env []string) error {
	return sandbox.CheckEnv(env, GatewayEnv...)
}

// Tools are the names of the tools a run's model is given, sorted.
func Tools() []string {
	var names []string
	for _, s := range tools.Default(tools.Limits{}).Specs() {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	return names
}

// Doctor reports which isolation layers this machine enforces for
// sandboxes made with the executor at path, and whether a sandbox's root
// can be an image's layers.
func Doctor(executor string) []linux.Check {
	checks := linux.Doctor(executor)
	err := probeLayers(executor)
	detail := "image roots: a stack of layers with a whiteout and an opaque directory as lowerdirs of an unprivileged (userxattr) overlay"
	if err != nil {
		detail = "image roots (airlock image, --image) do not work here: " + err.Error()
	}
	return append(checks, linux.Check{Layer: "overlay-layers", OK: err == nil, Detail: detail})
}
