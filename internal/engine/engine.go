// Package engine is the run engine: the agent loop on the trusted host. It
// holds the conversation and the model, sends the sandboxes narrow tool
// calls, and records everything that happens in the run's durable,
// hash-chained event log before treating it as done, so that a run survives
// the loss of its sandboxes and of the host process: Drive rebuilds a run's
// state from its log alone and goes on.
//
// The loop of one step: the model proposes tool calls (model.request, then
// model.response, recorded before anything acts on them) -> the policy hook
// decides each (policy.decision) -> each call runs in its place, calls of
// one step concurrently (tool.started is durable before the call runs,
// tool.finished records its result) -> every sandbox the step may have
// changed is snapshotted into the blob store (snapshot.taken) -> budgets are
// checked. A step is complete when every call has its result and every
// changed sandbox its snapshot; recovery redoes the sandbox calls of an
// incomplete step in a sandbox restored from the last snapshot, and never
// asks the model again for a turn it recorded.
//
// Importers: host wiring (internal/host), the API (internal/server and its
// test server internal/server/servertest).
package engine

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret/scan"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
	"github.com/airlockrun/airlock/internal/tools"
)

// Store is what an Engine needs of the run store: runs, their logs,
// leases and artifacts, the tenants' credits and policies; not tenants or
// API keys. store.Store satisfies it.
type Store interface {
	store.Runs
	store.Log
	store.Leases
	store.Artifacts
	store.Ledger
	store.Policies
}

// Options are what an Engine needs from its host.
type Options struct {
	Store   Store
	Blobs   *blob.Store
	Backend sandbox.Backend
	// Checkpoints keeps the workspaces' checkpoints (package checkpoint);
	// nil keeps them in Blobs, their chunks in a directory beside its
	// blobs (Blobs.Dir()/chunks).
	Checkpoints *checkpoint.Store
	// NewProvider builds a real model provider from a spec and base URL
	// (the keys are the host's business). Scripted and replayed runs do
	// not use it; nil refuses real models.
	NewProvider func(ProviderSpec) (model.Provider, error)
	// WrapProvider, when not nil, wraps every run's provider (metering,
	// rate limits, tracing; tests slow a model down with it).
	WrapProvider func(model.Provider) model.Provider
	// Network, when not nil, gives a sandbox its network before it is
	// created (an egress proxy under the run's policy). Of its
	// attachment's hooks, Ask is the run's network approvals (network.go),
	// and Audit and Log append to the run's log under the drive's lease;
	// an egress decision that cannot be recorded stops the drive (see
	// driver.audit).
	Network sandbox.Network
	// Images resolves the image a run's sandboxes are made of (Config.Image);
	// nil refuses a run that names one.
	Images Images
	// Tools are host tools added to every run's registry beside the
	// sandbox tools and finish (the bridge's tools, approvals...). A tool
	// whose External method returns true changes the world outside the
	// run's sandboxes: recovery never repeats it blindly. New refuses a
	// tool the registry refuses (a duplicate name, no answer).
	Tools []tools.Tool
	// Policy decides each tool call; nil allows every call.
	Policy PolicyHook
	// Redact scrubs the host's secret values (the host's redactor) from
	// what a run's MCP servers return, before the model or the log sees
	// it; nil leaves it to the run's secret scanner.
	Redact func(string) string
	// LockDir holds one lock file per driven run, so two processes never
	// drive one run; empty means no locking (tests of one process).
	LockDir string
	// OnEvents is called with every batch of events the engine appends
	// (one durable write), in order.
	OnEvents func([]event.Event)
	// OnProgress is called about once a second while a tool call runs.
	OnProgress func(Progress)
	// Tenant of the runs Create makes when the request names none.
	Tenant string
	// Poll is how often a driven run's status is checked for a cancel or
	// pause from elsewhere, and its log for decisions on approvals; zero
	// means 250ms.
	Poll time.Duration
	// ApprovalTimeout is how long an approval may wait (15 minutes when
	// zero); ApprovalOnTimeout what then happens: "deny" (the default) or
	// "allow".
	ApprovalTimeout   time.Duration
	ApprovalOnTimeout string
	// NetworkHold is how long the egress proxy holds a request the
	// network policy asks about while a person decides
	// (DefaultNetworkHold when zero; never beyond the approval timeout).
	NetworkHold time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// Prices is the host's price table. A run's model calls are priced by
	// it (the cost is in each model.response), and counted by package
	// credit's rule: a tenant with entries in the store's credit ledger is
	// debited for them and stopped when its balance is spent; a model
	// without a price is refused, before it is called, for a metered
	// tenant and for a run with a credit budget (fail closed).
	Prices price.Table
	// Meter counts the credits; nil is a meter of the store and Prices
	// of the engine's own. A host shares one with its gateway and E2B
	// API, so that what each holds and owes counts in the others'
	// balance checks.
	Meter *credit.Meter
	// Owner names this engine in run leases ("host:pid:nonce" when empty);
	// LeaseTTL is how long a lease lives without a heartbeat (10s when
	// zero). A drive renews its lease every LeaseTTL/3.
	Owner    string
	LeaseTTL time.Duration
}

// Images is the host's image store as runs use it.
type Images interface {
	// Resolve returns the image ref names (a tag, or a digest pin) by
	// digest, as a run records it, or an error when the store has no such
	// image and cannot get it by digest later.
	Resolve(ctx context.Context, ref string) (string, error)
	// Apply makes spec's root the image's (ref as Resolve returned it):
	// its layers and its config where spec says nothing. It may fetch an
	// image this host lacks by its digest.
	Apply(ctx context.Context, ref string, spec *sandbox.Spec) error
}

// ProviderSpec is the model provider a run asks for.
type ProviderSpec struct {
	// Model is "PROVIDER:MODEL"; BaseURL overrides the provider's.
	Model, BaseURL string
	// Attempts bounds the tries of one call, the first included; zero
	// means the provider's default.
	Attempts int
}

// PolicyHook decides whether a proposed tool call may run: allow, deny,
// or ask a person (the run then waits in awaiting_approval).
type PolicyHook func(ctx context.Context, q PolicyQuery) event.PolicyDecision

// PolicyQuery is what a policy decision may look at.
type PolicyQuery struct {
	// Run is the run as stored (tenant, task, its policy document).
	Run  store.Run
	Step int
	// Usage and Elapsed are the run's so far.
	Usage   event.Usage
	Elapsed time.Duration
	// Call is the proposed call, resolved: the policy judges its Input
	// (the arguments without the sandbox selector), the Sandbox it acts
	// in, and whether its tool is External (changes the world outside
	// the run).
	Call tools.Call
}

// Progress reports a running tool call, or a model call (CallID "model").
type Progress struct {
	RunID   string
	Step    int
	CallID  string
	Tool    string
	Elapsed time.Duration
}

// Engine drives runs. It is safe for concurrent use; each run is driven by
// one goroutine at a time.
type Engine struct {
	o Options
	// meter counts the tenants' credits (Store's ledger, Prices).
	meter *credit.Meter
	// tools are the tools every run has, without a run's limits: what a
	// run's fold asks of a tool (Mutating) does not depend on them.
	tools *tools.Registry
	// active holds the runs this process drives.
	active sync.Map
	// draining is closed by Drain: drives stop at their next step
	// boundary.
	draining  chan struct{}
	drainOnce sync.Once
	// scripts holds the digests of scripts that parsed (see checkScript),
	// policies the policy hash of each policy document by its digest (see
	// policyHash); both guarded by scriptsMu.
	scriptsMu sync.Mutex
	scripts   map[[sha256.Size]byte]struct{}
	policies  map[[sha256.Size]byte]string
}

// scriptsKept bounds Engine.scripts and Engine.policies: past it, the
// set starts again.
const scriptsKept = 256

// policyHash returns the policy hash of a run's policy document
// (policy.HashOf), once per distinct document: a parse costs far more than
// the rest of a run's creation, and a host creates runs under a few
// policies. A document that does not parse is parsed, and refused, each
// time.
func (e *Engine) policyHash(doc []byte) (string, error) {
	sum := sha256.Sum256(doc)
	e.scriptsMu.Lock()
	h, ok := e.policies[sum]
	e.scriptsMu.Unlock()
	if ok {
		return h, nil
	}
	h, err := policy.HashOf(doc)
	if err != nil {
		return "", err
	}
	e.scriptsMu.Lock()
	defer e.scriptsMu.Unlock()
	if len(e.policies) >= scriptsKept {
		clear(e.policies)
	}
	e.policies[sum] = h
	return h, nil
}

// checkScript parses a scripted run's script, once per distinct script:
// one that parsed is remembered by its digest, so a hundred runs of one
// test script created at once parse it once (a parse costs about a tenth
// of a run's creation). A script that fails is parsed, and refused, each
// time.
func (e *Engine) checkScript(b []byte) error {
	sum := sha256.Sum256(b)
	e.scriptsMu.Lock()
	_, ok := e.scripts[sum]
	e.scriptsMu.Unlock()
	if ok {
		return nil
	}
	if _, err := model.ParseScript(b); err != nil {
		return err
	}
	e.scriptsMu.Lock()
	defer e.scriptsMu.Unlock()
	if len(e.scripts) >= scriptsKept {
		clear(e.scripts)
	}
	e.scripts[sum] = struct{}{}
	return nil
}

// New returns an engine.
func New(o Options) (*Engine, error) {
	scan.Preload() // the first run's task is scanned
	if o.Store == nil || o.Blobs == nil || o.Backend == nil {
		return nil, errors.New("engine: Store, Blobs and Backend are required")
	}
	if o.Checkpoints == nil {
		dir, err := chunk.NewDir(filepath.Join(o.Blobs.Dir(), "chunks"))
		if err != nil {
			return nil, fmt.Errorf("engine: checkpoints: %w", err)
		}
		chunks, err := chunk.NewStore(dir)
		if err != nil {
			return nil, fmt.Errorf("engine: checkpoints: %w", err)
		}
		if o.Checkpoints, err = checkpoint.New(o.Blobs, chunks); err != nil {
			return nil, fmt.Errorf("engine: checkpoints: %w", err)
		}
	}
	if o.Poll <= 0 {
		o.Poll = 250 * time.Millisecond
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Tenant == "" {
		o.Tenant = event.LocalTenant
	}
	if o.Owner == "" {
		// host:pid, and a nonce: two engines of one process are two owners.
		var b [4]byte
		_, _ = rand.Read(b[:])
		o.Owner = hostID() + ":" + hex.EncodeToString(b[:])
	}
	if o.LeaseTTL <= 0 {
		o.LeaseTTL = 10 * time.Second
	}
	if o.ApprovalTimeout <= 0 {
		o.ApprovalTimeout = 15 * time.Minute
	}
	switch o.ApprovalOnTimeout {
	case "":
		o.ApprovalOnTimeout = "deny"
	case "deny", "allow":
	default:
		return nil, fmt.Errorf("engine: ApprovalOnTimeout %q: want deny or allow", o.ApprovalOnTimeout)
	}
	meter := o.Meter
	if meter == nil {
		meter = credit.New(o.Store, o.Prices)
	}
	reg := tools.Default(tools.Limits{})
	for _, t := range o.Tools {
		if err := reg.Register(t); err != nil {
			return nil, fmt.Errorf("engine: Tools: %w", err)
		}
	}
	return &Engine{o: o, meter: meter, tools: reg, draining: make(chan struct{}), scripts: map[[sha256.Size]byte]struct{}{}, policies: map[[sha256.Size]byte]string{}}, nil
}

// Request asks for a new run.
type Request struct {
	Tenant string
	Task   string
	Config Config
	// Policy is the policy document the run is held to (YAML; empty for
	// the built-in default), and PolicySource names where it came from.
	// The run records its policy hash (policy.HashOf); a document that
	// does not parse is refused.
	Policy       []byte
	PolicySource string
	// PolicyVersion names the stored version the policy given is,
	// "NAME@vN", when the caller read it from the store.
	PolicyVersion string
	// PolicyName, when not empty (and the policy given is not), names the
	// tenant's stored policy the document given is a version of: Create
	// records it with Store.PutPolicy (a new version unless it is the
	// name's latest already) before it records the run, and records the
	// version it is. PolicyBy says who asked, for the version's history.
	PolicyName string
	PolicyBy   string
	// Flags says the run's own settings (command-line flags, a request's
	// fields) changed the policy given: BasePolicy is the document given
	// (empty for the built-in default), Policy the document as they
	// changed it. PolicySource, PolicyVersion and PolicyName then name
	// BasePolicy, and the run records the policy hash of both.
	Flags      bool
	BasePolicy []byte
	// Script is the script file's content for a "script:" model.
	Script []byte
	// Metadata is the client's own labels of the run, recorded in its
	// run.created event (event.CheckMetadata bounds them).
	Metadata map[string]string
}

// Errors callers branch on.
var (
	// ErrCancelled, as the cause of Drive's context, cancels the run: the
	// in-flight command is killed, the run is marked cancelled.
	ErrCancelled = errors.New("engine: run cancelled")
	// ErrBusy: another process drives the run.
	ErrBusy = errors.New("engine: run is driven by another process")
	// ErrFinal: the run is over.
	ErrFinal = errors.New("engine: run already ended")
	// ErrInvalid: the request is malformed (an empty task, a bad config or
	// script, a fork point that does not exist); nothing was recorded.
	ErrInvalid = errors.New("engine: invalid request")
	// ErrDrained: the drive stopped at a step boundary because the engine
	// drains (Drain); the run is left as it was, resumable at once by any
	// worker.
	ErrDrained = errors.New("engine: drive handed back: the host is draining")
)

// Create records a new run (status queued) and returns it. Drive runs it.
func (e *Engine) Create(ctx context.Context, req Request) (store.Run, error) {
	return e.create(ctx, req, event.RunCreated{})
}

func (e *Engine) create(ctx context.Context, req Request, link event.RunCreated) (store.Run, error) {
	if req.Tenant == "" {
		req.Tenant = e.o.Tenant
	}
	if strings.TrimSpace(req.Task) == "" {
		return store.Run{}, fmt.Errorf("%w: the task is empty", ErrInvalid)
	}
	if err := event.CheckMetadata(req.Metadata); err != nil {
		return store.Run{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	cfg := req.Config
	if kind, _, _ := strings.Cut(cfg.Model, ":"); kind == "script" && cfg.Script == "" {
		if len(req.Script) == 0 {
			return store.Run{}, fmt.Errorf("%w: a scripted run needs its script", ErrInvalid)
		}
		if err := e.checkScript(req.Script); err != nil {
			return store.Run{}, fmt.Errorf("%w: script: %w", ErrInvalid, err)
		}
		d, _, err := e.o.Blobs.Put(ctx, strings.NewReader(string(req.Script)))
		if err != nil {
			return store.Run{}, fmt.Errorf("engine: keep the script: %w", err)
		}
		cfg.Script = d
	}
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return store.Run{}, fmt.Errorf("%w: config: %w", ErrInvalid, err)
	}
	if cfg.Image != "" {
		if e.o.Images == nil {
			return store.Run{}, fmt.Errorf("%w: image %s: this host has no image store", ErrInvalid, cfg.Image)
		}
		ref, err := e.o.Images.Resolve(ctx, cfg.Image)
		if err != nil {
			return store.Run{}, fmt.Errorf("%w: %w", ErrInvalid, err)
		}
		cfg.Image = ref
	}
	for _, sc := range cfg.Sandboxes {
		if sc.Tar == "" {
			continue
		}
		if ok, err := e.o.Blobs.Has(ctx, sc.Tar); err != nil || !ok {
			return store.Run{}, fmt.Errorf("%w: sandbox %s: no workspace tar %s in the blob store", ErrInvalid, sc.Name, sc.Tar)
		}
	}
	task, found, err := cfg.Secrets.checkTask(req.Task)
	if err != nil {
		return store.Run{}, err
	}
	req.Task = task
	rawCfg, err := json.Marshal(cfg)
	if err != nil {
		return store.Run{}, err
	}
	policyHash, err := e.policyHash(req.Policy)
	if err != nil {
		return store.Run{}, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	given, givenHash, baseHash := req.Policy, policyHash, ""
	if req.Flags {
		if baseHash, err = e.policyHash(req.BasePolicy); err != nil {
			return store.Run{}, fmt.Errorf("%w: the policy the flags change: %w", ErrInvalid, err)
		}
		given, givenHash = req.BasePolicy, baseHash
	}
	version := req.PolicyVersion
	if len(given) > 0 && req.PolicyName != "" {
		v, _, err := e.o.Store.PutPolicy(ctx, store.PolicyVersion{
			Tenant: req.Tenant, Name: req.PolicyName, PolicyHash: givenHash,
			Document: given, Source: req.PolicySource, By: req.PolicyBy,
		})
		if errors.Is(err, store.ErrInvalid) {
			return store.Run{}, fmt.Errorf("%w: policy %q: %w", ErrInvalid, req.PolicyName, err)
		}
		if err != nil {
			return store.Run{}, fmt.Errorf("engine: record policy %s: %w", req.PolicyName, err)
		}
		version = fmt.Sprintf("%s@v%d", v.Name, v.Version)
	}
	id := event.NewRunID(e.o.Now())
	created := link
	created.Tenant, created.Task, created.Model, created.PolicyHash, created.Config = req.Tenant, req.Task, cfg.Model, policyHash, rawCfg
	created.Metadata, created.Secrets = req.Metadata, found
	src := req.PolicySource
	if src == "" && len(given) == 0 {
		src = "default (deny all egress)"
	}
	evs, err := drafts(created, event.PolicyResolved{PolicyHash: policyHash, Source: src, Version: version, BaseHash: baseHash})
	if err != nil {
		return store.Run{}, err
	}
	// The run and its first events in one write: a run is never seen
	// without them.
	r, stored, err := e.o.Store.CreateRunWith(ctx, store.Run{
		ID: id, Tenant: req.Tenant, Task: req.Task, Model: cfg.Model,
		Policy: req.Policy, PolicyHash: policyHash, Status: event.StatusQueued,
		ParentRunID: link.ParentRunID, ParentSeq: link.ParentSeq,
	}, evs)
	if err != nil {
		return store.Run{}, fmt.Errorf("engine: create run: %w", err)
	}
	e.emit(stored)
	// The run as created: a worker may take it up at once, and what it
	// does next is not this call's answer.
	last := stored[len(stored)-1]
	r.LastSeq, r.LastHash, r.Updated = last.Seq, last.Hash, last.Time
	return r, nil
}

func (e *Engine) emit(evs []event.Event) {
	if e.o.OnEvents != nil && len(evs) > 0 {
		e.o.OnEvents(evs)
	}
}

// EachEvent adapts a function of one event to Options.OnEvents.
func EachEvent(fn func(event.Event)) func([]event.Event) {
	return func(evs []event.Event) {
		for _, ev := range evs {
			fn(ev)
		}
	}
}

func drafts(ps ...event.Payload) ([]event.Event, error) {
	out := make([]event.Event, 0, len(ps))
	for _, p := range ps {
		ev, err := event.New(p)
		if err != nil {
			return nil, err
		}
		out = append(out, ev)
	}
	return out, nil
}

// Outcome is how a drive of a run ended.
type Outcome struct {
	RunID   string
	Status  event.Status
	Reason  string
	Summary string
	Steps   int
	Usage   event.Usage
	// Verification is the completion checks' result, when they ran.
	Verification *event.VerificationResult
	// Artifacts are the run's stored artifacts (the patch and files).
	Artifacts []store.Artifact
	// Checkpoints is what the run's own checkpoints hold and cost (a
	// fork's inherited ones are its parent's).
	Checkpoints api.Checkpoints
	// Deleted is how many of the run's payloads (its own, or its
	// parents' up to the fork) retention replaced by tombstones, the
	// latest on DeletedAt; then only Status and Artifacts are known.
	Deleted   int
	DeletedAt time.Time
}

// PayloadsDeletedError is the error of rebuilding a run some of whose
// events (or its parents' up to its fork) retention replaced by
// tombstones: its conversation and workspace are gone, so it cannot be
// resumed, forked or decided on.
type PayloadsDeletedError struct {
	Run string
	N   int
	At  time.Time
}

func (e *PayloadsDeletedError) Error() string {
	return fmt.Sprintf("engine: run %s: %d payloads deleted by retention on %s: what it said and did is gone, so it cannot be resumed or forked",
		e.Run, e.N, e.At.UTC().Format(time.DateOnly))
}

// checkPayloads returns a PayloadsDeletedError when any of run's events
// evs is a tombstone.
func checkPayloads(run string, evs []event.Event) error {
	var gone *PayloadsDeletedError
	for _, ev := range evs {
		if t, ok := event.ParseTombstone(ev.Payload); ok {
			if gone == nil {
				gone = &PayloadsDeletedError{Run: run}
			}
			gone.N++
			if t.DeletedAt.After(gone.At) {
				gone.At = t.DeletedAt
			}
		}
	}
	if gone != nil {
		return gone
	}
	return nil
}

// Cancel marks run id cancelled. A process driving it notices within the
// poll interval, kills the in-flight command and destroys the sandboxes.
func (e *Engine) Cancel(ctx context.Context, id, by, reason string) error {
	return e.stopFrom(ctx, id, event.StatusCancelled, event.RunCancelled{By: by, Reason: reason})
}

// Pause pauses run id: a process driving it stops and destroys the
// sandboxes; the workspace is kept as the snapshot of the last complete
// step, and Resume boots fresh sandboxes from it.
func (e *Engine) Pause(ctx context.Context, id, reason string) error {
	return e.stopFrom(ctx, id, event.StatusPaused, event.RunPaused{Reason: reason})
}

// stopFrom moves a run to status to with payload p, retrying while a
// driver appends concurrently.
func (e *Engine) stopFrom(ctx context.Context, id string, to event.Status, p event.Payload) error {
	return e.appendFresh(ctx, id, func(r store.Run) (event.Status, event.Payload, error) {
		if r.Status.Final() {
			return "", nil, fmt.Errorf("%w: run %s is %s", ErrFinal, id, r.Status)
		}
		if err := event.CheckTransition(r.Status, to); err != nil {
			return "", nil, fmt.Errorf("engine: run %s is %s: %w", id, r.Status, err)
		}
		if rp, ok := p.(event.RunPaused); ok {
			st, _, err := e.load(ctx, r)
			if err != nil {
				return "", nil, err
			}
			rp.Snapshots = nil
			for _, s := range st.cfg.Sandboxes {
				if d := st.snapshots[s.Name]; d != "" {
					rp.Snapshots = append(rp.Snapshots, d)
				}
			}
			return to, rp, nil
		}
		return to, p, nil
	})
}

// appendFresh appends to run id's log, as another process than its driver
// (a cancel, a pause, a decision, a fork's link): build looks at the run as
// it is now and returns the payload and the status it moves to ("" for
// none). While the driver appends first, it is asked again on the new
// state (up to 50 times).
func (e *Engine) appendFresh(ctx context.Context, id string, build func(store.Run) (event.Status, event.Payload, error)) error {
	get := func(ctx context.Context, id string) (store.Run, error) {
		r, err := e.o.Store.GetRun(ctx, id)
		if err == nil {
			err = agentRun(r)
		}
		return r, err
	}
	return e.appendRetry(ctx, "run", id, get, func(r store.Run) (event.Status, []event.Payload, error) {
		to, p, err := build(r)
		return to, []event.Payload{p}, err
	})
}

// appendRetry appends what build returns to record id (a run's, or an MCP
// record's: what names it in errors), built on the record as get reads it
// now, and moves the record to the status build returns ("" for none).
// While another writer appends first, build is asked again on the new
// state (up to 50 times).
func (e *Engine) appendRetry(ctx context.Context, what, id string, get func(context.Context, string) (store.Run, error), build func(store.Run) (event.Status, []event.Payload, error)) error {
	for attempt := 0; ; attempt++ {
		r, err := get(ctx, id)
		if err != nil {
			return err
		}
		to, ps, err := build(r)
		if err != nil {
			return err
		}
		evs, err := drafts(ps...)
		if err != nil {
			return err
		}
		var stored []event.Event
		if to != "" {
			_, stored, err = e.o.Store.AppendStatus(ctx, id, r.LastSeq+1, r.Status, to, evs)
		} else {
			stored, err = e.o.Store.Append(ctx, id, r.LastSeq+1, evs)
		}
		if errors.Is(err, store.ErrConflict) && attempt < 50 {
			continue
		}
		if err != nil {
			return fmt.Errorf("engine: %s %s: %w", what, id, err)
		}
		e.emit(stored)
		return nil
	}
}

// QueueResume asks for paused run id to be resumed by whichever worker
// takes it first, in this process or any other on the store: it moves the
// run from paused to queued, a request as durable as the store that
// outlives the process that took it. Drive (or Resume) on the run then
// resumes it where it was paused (run.resumed, reason "resume"). A run
// that is not paused gives an error wrapping event.ErrTransition (or
// ErrFinal when it has ended).
func (e *Engine) QueueResume(ctx context.Context, id string) (store.Run, error) {
	for attempt := 0; ; attempt++ {
		r, err := e.o.Store.GetRun(ctx, id)
		if err != nil {
			return store.Run{}, err
		}
		if r.Status.Final() {
			return store.Run{}, fmt.Errorf("%w: run %s is %s", ErrFinal, id, r.Status)
		}
		if err := agentRun(r); err != nil {
			return store.Run{}, err
		}
		if r.Status != event.StatusPaused {
			return store.Run{}, fmt.Errorf("engine: resume run %s: it is %s, not paused: %w", id, r.Status, event.ErrTransition)
		}
		r, err = e.o.Store.UpdateRunStatus(ctx, id, event.StatusPaused, event.StatusQueued)
		if errors.Is(err, store.ErrConflict) && attempt < 50 {
			continue // changed meanwhile: look again
		}
		if err != nil {
			return store.Run{}, fmt.Errorf("engine: resume run %s: %w", id, err)
		}
		return r, nil
	}
}

// Drain asks every drive of this engine, running or to come, to stop at
// its next step boundary: a step in flight (the model's turn, the tool
// calls it asked for, their snapshot) finishes and is recorded, a run
// waiting for approvals stops waiting, and the drive returns ErrDrained
// with the run left as it was, its sandboxes destroyed and its lease
// released, so that any worker resumes it at once. Cancelling a drive's
// context still cuts it short. Drain cannot be undone; calling it again
// does nothing.
func (e *Engine) Drain() {
	e.drainOnce.Do(func() { close(e.draining) })
}

// Resume makes a paused run runnable again and drives it; for a run left
// unfinished by a crashed host process it is Drive.
func (e *Engine) Resume(ctx context.Context, id string) (Outcome, error) {
	return e.drive(ctx, id, true)
}

// Drive drives run id until it ends, is paused or cancelled, or ctx ends.
// A queued run starts; a run left running by a host process that died is
// recovered from its log; a queued run that was driven before (a resume
// QueueResume asked for) is resumed. If ctx is cancelled with cause
// ErrCancelled the run is cancelled; any other end of ctx leaves it
// resumable (its sandboxes are destroyed, its status stays running). Once
// the engine drains (Drain), the drive stops at its next step boundary and
// returns ErrDrained.
func (e *Engine) Drive(ctx context.Context, id string) (Outcome, error) {
	return e.drive(ctx, id, false)
}

func (e *Engine) drive(ctx context.Context, id string, resume bool) (Outcome, error) {
	select {
	case <-e.draining:
		return Outcome{RunID: id}, ErrDrained
	default:
	}
	if _, loaded := e.active.LoadOrStore(id, true); loaded {
		return Outcome{}, fmt.Errorf("%w (this process)", ErrBusy)
	}
	defer e.active.Delete(id)
	unlock, err := e.lock(id)
	if err != nil {
		return Outcome{}, err
	}
	defer unlock()
	r, err := e.o.Store.GetRun(ctx, id)
	if err == nil {
		err = agentRun(r) // before the lease: a sandbox record is never leased by a worker
	}
	if err != nil {
		return Outcome{}, err
	}
	ended := func(r store.Run) (Outcome, error) {
		o, err := e.outcome(ctx, r, nil)
		if err == nil && resume {
			err = fmt.Errorf("%w: run %s is %s", ErrFinal, id, r.Status)
		}
		return o, err
	}
	if r.Status.Final() {
		return ended(r)
	}
	lease, err := e.lease(ctx, id)
	if errors.Is(err, ErrFinal) {
		// Another process finished it since it was read.
		if r, err = e.o.Store.GetRun(ctx, id); err != nil {
			return Outcome{}, err
		}
		return ended(r)
	}
	if err != nil {
		return Outcome{}, err
	}
	ctx, stopLease := e.holdLease(ctx, lease)
	defer stopLease()
	if r, err = e.o.Store.GetRun(ctx, id); err != nil {
		return Outcome{}, err
	}
	st, _, err := e.load(ctx, r)
	if err != nil {
		return Outcome{}, err
	}
	d := newDriver(e, r, st)
	d.fence, d.fenced = store.FenceFrom(ctx)
	host := hostID()
	var first event.Payload
	switch {
	case r.Status == event.StatusQueued && st.segStarted:
		// Driven before, paused, and queued again by QueueResume.
		first = event.RunResumed{Reason: "resume", FromSeq: r.LastSeq, Host: host}
	case r.Status == event.StatusQueued:
		first = event.RunStarted{Host: host}
	case r.Status == event.StatusPaused && resume:
		first = event.RunResumed{Reason: "resume", FromSeq: r.LastSeq, Host: host}
	case r.Status == event.StatusPaused:
		return Outcome{RunID: id, Status: r.Status}, fmt.Errorf("engine: run %s is paused: resume it", id)
	default: // running or awaiting approval, with no live driver: recovery
		first = event.RunResumed{Reason: "recovery", FromSeq: r.LastSeq, Host: host}
	}
	d.status = r.Status
	switch r.Status {
	case event.StatusRunning, event.StatusAwaitingApproval:
		// A run waiting for a decision keeps waiting, durably.
		if err := d.append(ctx, first); err != nil {
			return Outcome{}, err
		}
	default:
		if err := d.appendStatus(ctx, r.Status, event.StatusRunning, first); err != nil {
			return Outcome{}, err
		}
	}
	return d.drive(ctx)
}

// load rebuilds a run's state from its log (and, for a fork, its parents'
// logs up to the fork point). It also returns the events of the run itself.
func (e *Engine) load(ctx context.Context, r store.Run) (*state, []event.Event, error) {
	if err := agentRun(r); err != nil {
		return nil, nil, err
	}
	st := newState(r.ID, e.tools)
	if r.ParentRunID != "" {
		if err := e.history(ctx, st, r.ParentRunID, r.ParentSeq, 0); err != nil {
			return nil, nil, err
		}
	}
	evs, err := e.events(ctx, r.ID, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := checkPayloads(r.ID, evs); err != nil {
		return nil, nil, err
	}
	for _, ev := range evs {
		if err := st.apply(ev, own); err != nil {
			return nil, nil, fmt.Errorf("engine: rebuild run %s: %w", r.ID, err)
		}
	}
	if st.cfg.Model == "" {
		return nil, nil, fmt.Errorf("engine: run %s: its log has no run.created", r.ID)
	}
	return st, evs, nil
}

// history applies the conversation of run id up to seq upto as history.
func (e *Engine) history(ctx context.Context, st *state, id string, upto int64, depth int) error {
	if depth > 64 {
		return errors.New("engine: fork chain deeper than 64")
	}
	r, err := e.o.Store.GetRun(ctx, id)
	if err != nil {
		return fmt.Errorf("engine: parent run %s: %w", id, err)
	}
	if r.ParentRunID != "" {
		if err := e.history(ctx, st, r.ParentRunID, r.ParentSeq, depth+1); err != nil {
			return err
		}
	}
	evs, err := e.events(ctx, id, upto)
	if err != nil {
		return err
	}
	if err := checkPayloads(id, evs); err != nil {
		return err
	}
	for _, ev := range evs {
		if err := st.apply(ev, inherited); err != nil {
			return fmt.Errorf("engine: parent run %s: %w", id, err)
		}
	}
	return nil
}

// events reads run id's log, up to seq upto when upto > 0.
func (e *Engine) events(ctx context.Context, id string, upto int64) ([]event.Event, error) {
	var out []event.Event
	from := int64(1)
	for {
		page, err := e.o.Store.Events(ctx, id, from, store.MaxPage)
		if err != nil {
			return nil, err
		}
		for _, ev := range page {
			if upto > 0 && ev.Seq > upto {
				return out, nil
			}
			out = append(out, ev)
		}
		if len(page) < store.MaxPage {
			return out, nil
		}
		from = page[len(page)-1].Seq + 1
	}
}

// Events returns run id's whole log.
func (e *Engine) Events(ctx context.Context, id string) ([]event.Event, error) {
	return e.events(ctx, id, 0)
}

// Outcome reports how run id stands, from its log.
func (e *Engine) Outcome(ctx context.Context, id string) (Outcome, error) {
	r, err := e.o.Store.GetRun(ctx, id)
	if err != nil {
		return Outcome{}, err
	}
	return e.outcome(ctx, r, nil)
}

func (e *Engine) outcome(ctx context.Context, r store.Run, st *state) (Outcome, error) {
	var o Outcome
	if st == nil {
		var err error
		var gone *PayloadsDeletedError
		switch st, _, err = e.load(ctx, r); {
		case errors.As(err, &gone):
			// What the log said is gone: the run is what the store
			// row says, and that its payloads went.
			o = Outcome{RunID: r.ID, Status: r.Status, Deleted: gone.N, DeletedAt: gone.At}
		case err != nil:
			return Outcome{}, err
		}
	}
	if st != nil {
		o = Outcome{RunID: r.ID, Status: r.Status, Steps: st.steps, Usage: st.usage, Verification: st.verified, Summary: st.finishSummary(), Reason: st.reason, Checkpoints: st.checkpointUsage()}
	}
	arts, err := e.o.Store.ListArtifacts(ctx, r.ID)
	if err != nil {
		return o, err
	}
	for _, a := range arts {
		if !strings.HasPrefix(a.Name, snapshotPrefix) {
			o.Artifacts = append(o.Artifacts, a)
		}
	}
	return o, nil
}

// lock takes the run's lock file, so one process drives a run at a time.
func (e *Engine) lock(id string) (func(), error) {
	if e.o.LockDir == "" {
		return func() {}, nil
	}
	if err := event.ValidRunID(id); err != nil {
		return nil, fmt.Errorf("engine: %w", err)
	}
	if err := os.MkdirAll(e.o.LockDir, 0o700); err != nil {
		return nil, err
	}
	p := filepath.Join(e.o.LockDir, id+".lock")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 64))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w (%s)", ErrBusy, strings.TrimSpace(string(b)))
		}
		return nil, err
	}
	_ = f.Truncate(0)
	_, _ = f.WriteAt([]byte("pid "+strconv.Itoa(os.Getpid())+"\n"), 0)
	// The file stays: removing it would let a process that opened it
	// before the removal lock an orphaned inode beside a new file's owner.
	return func() { f.Close() }, nil
}

// Driven reports whether some process holds run id's lock.
func (e *Engine) Driven(id string) bool {
	if _, ok := e.active.Load(id); ok {
		return true
	}
	unlock, err := e.lock(id)
	if err != nil {
		return errors.Is(err, ErrBusy)
	}
	unlock()
	// Free here; held by a live process of another host, or of this host
	// with another lock directory (another airlock home)?
	r, err := e.o.Store.GetRun(context.Background(), id)
	if err != nil || r.LeaseOwner == "" || !r.LeaseExpires.After(e.o.Now()) {
		return false
	}
	if !sameHost(r.LeaseOwner) {
		return true
	}
	return liveOwner(r.LeaseOwner)
}

// lease takes the run's lease in the store, which fences every append of
// this drive: a process that stalls past its lease and wakes up after
// another took the run over cannot write into it. A lease still held by a
// process of this host whose lock is free (this process holds it now) and
// whose pid is gone belongs to a dead process: it is waited out. A live
// process of this host (one with another lock directory) holds it like
// any other host's: ErrBusy at once.
func (e *Engine) lease(ctx context.Context, id string) (store.Lease, error) {
	var seen time.Time
	for {
		l, err := e.o.Store.AcquireLease(ctx, id, e.o.Owner, e.o.LeaseTTL)
		var held *store.LeasedError
		switch {
		case err == nil:
			return l, nil
		case errors.As(err, &held) && !seen.IsZero() && held.Expires.After(seen):
			// Renewed while waited out: its holder lives (a process of
			// this host with another lock directory).
			return store.Lease{}, fmt.Errorf("%w: %w", ErrBusy, err)
		case errors.As(err, &held) && e.o.LockDir != "" && sameHost(held.Owner) && !liveOwner(held.Owner):
			seen = held.Expires
			wait := time.Until(held.Expires) + 50*time.Millisecond
			select {
			case <-ctx.Done():
				return store.Lease{}, ctx.Err()
			case <-time.After(min(max(wait, 50*time.Millisecond), e.o.LeaseTTL)):
			}
		case errors.Is(err, store.ErrLeased):
			return store.Lease{}, fmt.Errorf("%w: %w", ErrBusy, err)
		case errors.Is(err, store.ErrFinal):
			return store.Lease{}, fmt.Errorf("%w: %w", ErrFinal, err)
		default:
			return store.Lease{}, err
		}
	}
}

// holdLease renews the lease every third of its time to live and returns
// a context that carries its fence and ends, with a stolenError as cause,
// when the lease is lost. stop releases it.
func (e *Engine) holdLease(parent context.Context, l store.Lease) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(store.WithFence(parent, l.Token))
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(e.o.LeaseTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			if _, err := e.o.Store.RenewLease(context.WithoutCancel(ctx), l.RunID, l.Owner, l.Token, e.o.LeaseTTL); err != nil {
				if errors.Is(err, store.ErrLeaseLost) || errors.Is(err, store.ErrFinal) {
					cancel(&stolenError{status: "taken over (lease lost)"})
					return
				}
			}
		}
	}()
	return ctx, func() {
		close(done)
		cancel(nil)
		_ = e.o.Store.ReleaseLease(context.WithoutCancel(parent), l.RunID, l.Owner, l.Token)
	}
}

// ownerAlive reports whether the process a lease owner of this host
// ("host:pid:nonce") names is alive; known is false when the owner names
// no pid. This process counts as alive: another engine of it may hold the
// lease. A pid reused since its owner died reads as alive, which only
// delays a takeover until the lease expires.
func ownerAlive(owner string) (alive, known bool) {
	h, _ := os.Hostname()
	rest, ok := strings.CutPrefix(owner, h+":")
	if !ok {
		return false, false
	}
	p, _, _ := strings.Cut(rest, ":")
	pid, err := strconv.Atoi(p)
	if err != nil || pid <= 0 {
		return false, false
	}
	if pid == os.Getpid() {
		return true, true
	}
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return false, true
	}
	// A zombie (killed, not yet reaped by its parent) is dead too.
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return !errors.Is(err, os.ErrNotExist), true
	}
	// "pid (comm) state ...": comm may hold anything, ")" included.
	st := string(b)
	if i := strings.LastIndexByte(st, ')'); i >= 0 && i+2 < len(st) {
		return st[i+2] != 'Z' && st[i+2] != 'X', true
	}
	return true, true
}

// liveOwner reports whether a lease owner of this host is known to be a
// live process.
func liveOwner(owner string) bool {
	alive, known := ownerAlive(owner)
	return alive && known
}

// sameHost reports whether a lease owner ("host:pid") is of this host.
func sameHost(owner string) bool {
	h, _ := os.Hostname()
	return strings.HasPrefix(owner, h+":")
}

func hostID() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(os.Getpid())
}
