package e2b

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/interp"
	"github.com/airlockrun/airlock/internal/portproxy"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	envtemplate "github.com/airlockrun/airlock/internal/template"
)

// Sandbox states, as E2B names them.
const (
	stateRunning = "running"
	statePaused  = "paused"
	stateKilled  = "killed"
)

// box is one E2B sandbox: an airlock sandbox while running, a checkpoint
// of its workspace while paused, and always a record in the store.
type box struct {
	id       string
	tenant   string
	keyID    string
	template template
	spec     sandbox.Spec // to boot from, without network
	metadata map[string]string
	envs     map[string]string
	token    string
	// traffic is the sandbox's traffic access token, which a port whose
	// access is token needs (header e2b-traffic-access-token); private
	// makes every port's access token (create's
	// network.allowPublicTraffic: false).
	traffic string
	private bool
	// maskHost is create's network.maskRequestHost: the Host header of
	// requests relayed to the sandbox's ports, ${PORT} replaced by the
	// port (empty: the host the client asked for).
	maskHost string
	ports    portproxy.Counters
	started  time.Time
	internet bool
	rec      *record // its record's log
	// events keeps what the sandbox reported through its event channel,
	// across its boots (events.go); ended when the sandbox ends.
	events *report.Log
	// autoPause pauses the sandbox when its timeout passes, instead of
	// ending it (lifecycle onTimeout: pause); autoResume resumes it,
	// paused so, when a data-plane request comes for it. lifetime is the
	// timeout it was created with, an automatic resume's.
	autoPause, autoResume bool
	lifetime              time.Duration
	// autoPauseFiles makes the automatic pause filesystem-only (create's
	// autoPauseMemory: false; lifecycle onTimeout keepMemory: false).
	autoPauseFiles bool
	// rules are the sandbox's own network rules (nil: none), which its
	// egress proxy reads at each connection; updateNetwork swaps them.
	rules atomic.Pointer[netRules]

	// life serializes what changes the sandbox and its record: pause,
	// resume, its end, and meter ticks. Taken before mu.
	life sync.Mutex
	// status is guarded by life: the record's status.
	status event.Status
	// lease is guarded by life: the fencing token of this Server's lease
	// on the record while the sandbox runs.
	lease int64
	// meter is guarded by life: where the running boot's metering stands.
	meter meterState
	// ckpt is guarded by life: the digest of the last checkpoint of the
	// workspace ("" before the first), which the next is a change to;
	// ckptBytes is its tree's bytes of file content.
	ckpt      string
	ckptBytes int64

	mu sync.Mutex
	// state, endAt, live, paused and snapshot are guarded by mu.
	state  string
	endAt  time.Time
	live   *live  // nil unless running
	paused string // the paused workspace's checkpoint
	// snapshot is the paused workspace's tar file, instead of paused,
	// for a sandbox paused before checkpoints (or by a server without
	// them).
	snapshot string
	// frozen is the boot a pause that kept memory holds frozen (nil
	// otherwise), frozenAt when it froze it; pauseKind is what the pause
	// kept while paused (pauseKindMemory or pauseKindFilesystem), and
	// pauseNote why a pause that asked for memory kept only files (or
	// lost its memory since). resumeKind and resumeNote say the same of
	// the last resume.
	frozen                 *live
	frozenAt               time.Time
	pauseKind, pauseNote   string
	resumeKind, resumeNote string
}

// live is one boot of a box: the sandbox and what runs in it.
type live struct {
	sb      sandbox.Sandbox
	release func()
	procs   *procTable
	// baseline is guarded by the box's life: the sandbox's name of the
	// tree of the box's last checkpoint ("" when it has none).
	baseline string
	// ending is closed (once, by destroy) before the sandbox is
	// destroyed: a process that ends after it ended with the sandbox.
	ending   chan struct{}
	endingMu sync.Once
	// prepared says the sandbox came from a template's warm pool: its
	// start command ran and its readiness check passed already.
	prepared bool
	// events reads the boot's event channel into the box's log.
	events eventWatch
}

// newToken returns a fresh access token: 32 random bytes, hex.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// minScrubbed is the shortest environment value scrubbed from audit
// details: shorter ones ("1", "true") would blank out ordinary text and
// tell little.
const minScrubbed = 4

// scrub replaces the sandbox's environment values and its tokens in
// s with [redacted].
func (b *box) scrub(s string) string {
	if s == "" {
		return s
	}
	for _, t := range []string{b.token, b.traffic} {
		if t != "" && strings.Contains(s, t) {
			s = strings.ReplaceAll(s, t, "[redacted]")
		}
	}
	for _, v := range b.envs {
		if len(v) >= minScrubbed && strings.Contains(s, v) {
			s = strings.ReplaceAll(s, v, "[redacted]")
		}
	}
	return s
}

// tokenOK compares a presented token with the box's in constant time.
func (b *box) tokenOK(t string) bool {
	return t != "" && subtle.ConstantTimeCompare([]byte(t), []byte(b.token)) == 1
}

// current returns the running boot, or nil.
func (b *box) current() *live {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != stateRunning || b.live == nil || isDone(b.live.sb.Done()) {
		return nil
	}
	return b.live
}

// createRequest is a create call, both paths' bodies (NewSandbox and
// NewSandboxV2) merged.
type createRequest struct {
	TemplateID          string            `json:"templateID"`
	Timeout             *int64            `json:"timeout"`
	Metadata            map[string]string `json:"metadata"`
	EnvVars             map[string]string `json:"envVars"`
	AllowInternetAccess *bool             `json:"allow_internet_access"`
	Secure              *bool             `json:"secure"`
	AutoPause           *bool             `json:"autoPause"`
	AutoPauseMemory     *bool             `json:"autoPauseMemory"`
	AutoResume          *autoResume       `json:"autoResume"`
	Network             *networkRequest   `json:"network"`
	VolumeMounts        []any             `json:"volumeMounts"`
	MCP                 map[string]any    `json:"mcp"`
}

// autoResume is create's autoResume: {"enabled": bool} (SDK 2.5x), or a
// bare bool.
type autoResume struct {
	Enabled bool `json:"enabled"`
}

func (a *autoResume) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &a.Enabled); err == nil {
		return nil
	}
	var v struct {
		Enabled bool `json:"enabled"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return errors.New(`autoResume: want {"enabled": true|false}`)
	}
	a.Enabled = v.Enabled
	return nil
}

// networkRequest is create's network: the sandbox's own egress rules
// (allowOut, denyOut), within its template's policy (netrules.go), and
// allowPublicTraffic (default true, as E2B's): false makes every exposed
// port need the sandbox's traffic access token (ports.go).
type networkRequest struct {
	AllowOut           []string       `json:"allowOut"`
	DenyOut            []string       `json:"denyOut"`
	AllowPublicTraffic *bool          `json:"allowPublicTraffic"`
	MaskRequestHost    *string        `json:"maskRequestHost"`
	Rules              map[string]any `json:"rules"`
	EgressProxy        map[string]any `json:"egressProxy"`
}

// Bounds on what a create names.
const (
	maxMapEntries = 64
	maxKeyLen     = 256
	maxValueLen   = 16 << 10
)

func checkMap(field string, m map[string]string, env bool) error {
	if len(m) > maxMapEntries {
		return fmt.Errorf("%s: %d entries, at most %d", field, len(m), maxMapEntries)
	}
	for k, v := range m {
		if k == "" || len(k) > maxKeyLen || len(v) > maxValueLen || strings.ContainsRune(k+v, 0) {
			return fmt.Errorf("%s: keys of 1 to %d bytes and values of at most %d, without NUL", field, maxKeyLen, maxValueLen)
		}
		if env && strings.ContainsRune(k, '=') {
			return fmt.Errorf("%s: %q: a variable name has no '='", field, clip(k))
		}
	}
	return nil
}

// timeoutOf is a requested timeout in seconds (nil: the default) as a
// lifetime for tenant's sandbox of tpl. One over the tenant's bound or
// the template's sandbox TTL is refused, never shortened: a client that
// asked for a day must not find its sandbox gone in an hour.
func (s *Server) timeoutOf(secs *int64, tpl template, tenant string) (time.Duration, error) {
	if secs == nil {
		d := s.cfg.DefaultTimeout
		if ttl := time.Duration(tpl.doc.Sandbox.Limits.TTL); ttl > 0 && d > ttl {
			d = ttl // not asked for: the template's TTL is the default
		}
		return d, nil
	}
	if *secs < 0 {
		return 0, errors.New("timeout: must not be negative")
	}
	limit := s.cfg.maxTimeout(tenant)
	if *secs > int64(limit/time.Second) {
		// E2B's words for it, in hours when the bound is whole hours.
		return 0, &publicError{status: 400, msg: "Timeout cannot be greater than " + spell(limit)}
	}
	d := time.Duration(*secs) * time.Second
	if *secs == 0 {
		d = limit
	}
	if ttl := time.Duration(tpl.doc.Sandbox.Limits.TTL); ttl > 0 && d > ttl {
		return 0, fmt.Errorf("timeout: %d seconds is over template %s's sandbox TTL (%s)", *secs, tpl.name, ttl)
	}
	return d, nil
}

// spell says d as E2B's error does: whole hours in hours, else minutes
// or seconds.
func spell(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return fmt.Sprintf("%d seconds", d/time.Second)
}

// create makes and boots a sandbox for tenant.
func (s *Server) create(ctx context.Context, tenant, keyID string, req createRequest) (*box, error) {
	if err := checkMap("metadata", req.Metadata, false); err != nil {
		return nil, &publicError{status: 400, msg: err.Error()}
	}
	if err := checkMap("envVars", req.EnvVars, true); err != nil {
		return nil, &publicError{status: 400, msg: err.Error()}
	}
	if err := req.Network.unsupported(); err != nil {
		return nil, err
	}
	if len(req.VolumeMounts) > 0 {
		return nil, &publicError{status: 400, msg: "volumeMounts: volumes are not supported"}
	}
	if req.AutoResume != nil && req.AutoResume.Enabled && (req.AutoPause == nil || !*req.AutoPause) {
		return nil, &publicError{status: 400, msg: "autoResume: only with autoPause (lifecycle onTimeout: pause)"}
	}
	if req.AutoResume != nil && req.AutoResume.Enabled && req.AutoPauseMemory != nil && !*req.AutoPauseMemory {
		return nil, &publicError{status: 400, msg: "autoResume: not with autoPauseMemory false: a filesystem-only pause is resumed by connect, not by traffic"}
	}
	// A snapshot's id or name is a template too: the sandbox it was
	// taken from's policy, with the snapshot's workspace.
	var tpl template
	var err error
	from, err := s.findSnapshot(ctx, tenant, req.TemplateID)
	if err != nil {
		return nil, err
	}
	if from != nil {
		tpl, err = s.snapshotTemplate(from)
	} else {
		tpl, err = s.resolveTemplate(ctx, tenant, req.TemplateID)
	}
	if errors.Is(err, errNoTemplate) {
		return nil, &publicError{status: 404, msg: fmt.Sprintf("template %q not found: templates are %q (the default policy), %q (the code interpreter), the names of your stored templates and policies, and your snapshots' ids and names", clip(req.TemplateID), DefaultTemplate, interp.Name)}
	}
	if err != nil {
		return nil, err
	}
	var ckpt, origin string
	if from != nil {
		ckpt, origin = from.Checkpoint, "snapshot "+from.ID
	}
	return s.start(ctx, tenant, keyID, req, tpl, ckpt, origin)
}

// hasEgress reports whether a sandbox of tpl can reach anything outside:
// the server gives sandboxes a network and the template's policy allows
// some egress.
func (s *Server) hasEgress(tpl template) bool {
	return s.o.Network != nil && tpl.raw != nil && needsNetwork(tpl.doc)
}

// internetNote says why a sandbox asked to have internet access has
// none, or "". SDKs before 2.5 send allowInternetAccess: true on every
// create, so a refusal would refuse every create of a template without
// egress: the request is taken, and the answer says what the sandbox got
// (the create response's Airlock-Internet-Access header, getInfo's
// allowInternetAccess false).
func (s *Server) internetNote(allow *bool, tpl template) string {
	switch {
	case allow == nil || !*allow || s.hasEgress(tpl):
		return ""
	case s.o.Network == nil:
		return "none; this server gives sandboxes no network"
	}
	return fmt.Sprintf("none; template %s's policy allows no egress", tpl.name)
}

// start makes and boots a sandbox for tenant from tpl, with the tree of
// checkpoint ckpt (named origin in errors) in its workspace when ckpt is
// not "": the second half of create, and each of a fork's sandboxes.
func (s *Server) start(ctx context.Context, tenant, keyID string, req createRequest, tpl template, ckpt, origin string) (*box, error) {
	timeout, err := s.timeoutOf(req.Timeout, tpl, tenant)
	if err != nil {
		return nil, &publicError{status: 400, msg: err.Error()}
	}
	switch a, err := s.credits.Account(ctx, tenant); {
	case err != nil:
		return nil, fmt.Errorf("e2b: %w", err)
	case a.Spent() != nil:
		return nil, errCreditsSpent
	}
	if err := s.reserve(tenant); err != nil {
		return nil, err
	}
	defer s.unreserve(tenant)

	b := &box{
		id: sandbox.NewID(), tenant: tenant, keyID: keyID, template: tpl, metadata: req.Metadata, envs: req.EnvVars,
		token: newToken(), started: s.now().UTC(), internet: req.AllowInternetAccess == nil || *req.AllowInternetAccess,
		autoPause: req.AutoPause != nil && *req.AutoPause, autoResume: req.AutoResume != nil && req.AutoResume.Enabled, lifetime: timeout,
		autoPauseFiles: req.AutoPauseMemory != nil && !*req.AutoPauseMemory,
		traffic:        newToken(), private: req.Network != nil && req.Network.AllowPublicTraffic != nil && !*req.Network.AllowPublicTraffic,
	}
	if n := req.Network; n != nil {
		rules, err := parseNetRules(n.AllowOut, n.DenyOut)
		if err != nil {
			return nil, &publicError{status: 400, msg: err.Error()}
		}
		if err := rules.widens(tpl, b.internet && s.hasEgress(tpl)); err != nil {
			return nil, err
		}
		b.rules.Store(rules)
		if n.MaskRequestHost != nil {
			if err := checkMaskHost(*n.MaskRequestHost); err != nil {
				return nil, &publicError{status: 400, msg: err.Error()}
			}
			b.maskHost = *n.MaskRequestHost
		}
	}
	b.spec = withAccount(s.specOf(tpl.doc))
	if err := s.applyTemplate(ctx, tpl, &b.spec); err != nil {
		return nil, err
	}
	if err := b.spec.Validate(); err != nil {
		return nil, &publicError{status: 400, msg: "template " + tpl.name + ": " + err.Error()}
	}
	b.events = s.newEventLog(ctx, b, false)
	if err := s.openRecord(ctx, b, timeout); err != nil {
		return nil, err
	}
	defer s.opened(b)
	b.life.Lock()
	defer b.life.Unlock()
	t0 := s.now()
	lv, err := s.boot(ctx, b, ckpt != "")
	if err != nil {
		s.closeRecord(ctx, b, endBootFailed, event.SandboxOp{Op: "sandbox.create", Outcome: "error", KeyID: keyID, Detail: "the sandbox did not boot"})
		return nil, err
	}
	if ckpt != "" {
		if err := s.restoreCheckpoint(ctx, b, lv, ckpt); err != nil {
			s.destroy(ctx, lv)
			s.closeRecord(ctx, b, endBootFailed, event.SandboxOp{Op: "sandbox.create", Outcome: "error", KeyID: keyID, Detail: "the workspace of " + origin + " was not restored"})
			return nil, fmt.Errorf("e2b: create sandbox %s from %s: %w", b.id, origin, err)
		}
	}
	restored := ckpt
	if tpl.env != nil && !lv.prepared {
		// Why before the sandbox is handed over: the client's first
		// command expects what the template starts to be up.
		if err := envtemplate.Prepare(ctx, lv.sb, withEnvs(tpl.env, b.envs)); err != nil {
			s.destroy(ctx, lv)
			s.closeRecord(ctx, b, endBootFailed, event.SandboxOp{Op: "sandbox.create", Outcome: "error", KeyID: keyID, Detail: "the template's start command or readiness check failed"})
			var re *envtemplate.ReadyError
			if errors.As(err, &re) {
				return nil, &publicError{status: 400, msg: fmt.Sprintf("template %s v%d: %s", tpl.name, tpl.version, clipDetail(re.Error()))}
			}
			return nil, fmt.Errorf("e2b: sandbox %s: template %s: %w", b.id, tpl.name, err)
		}
	}
	now := s.now()
	b.rec.add(event.SandboxProvisioned{Sandbox: b.id, SandboxID: lv.sb.ID(), Backend: lv.sb.Info().Backend, Snapshot: restored, DurationMS: now.Sub(t0).Milliseconds()}, now)
	b.meter = meterState{at: now}
	b.state, b.live, b.endAt = stateRunning, lv, now.Add(timeout)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.endLocked(ctx, b, endShutdown, "")
		return nil, &publicError{status: 503, msg: "the server is shutting down"}
	}
	s.boxes[b.id] = b
	s.mu.Unlock()
	return b, nil
}

// openRecord creates b's record in the store, with its first event, and
// takes its lease. The record's policy is the template's document (empty
// for the default policy), from which a restarted server boots it again.
func (s *Server) openRecord(ctx context.Context, b *box, timeout time.Duration) error {
	r := store.Run{
		ID: event.NewRunID(s.now()), Tenant: b.tenant, Kind: store.KindSandbox, Status: event.StatusRunning,
		Task: fmt.Sprintf("E2B sandbox %s, template %s", b.id, b.template.name), Policy: b.template.raw,
	}
	if b.template.raw != nil {
		r.PolicyHash = store.DocumentHash(b.template.raw)
	}
	s.mu.Lock()
	s.opening[r.ID] = true // not a record the sweep may close
	s.mu.Unlock()
	b.rec = s.newRecord(r.ID, 1)
	b.status = event.StatusRunning
	if _, err := s.o.Store.CreateRun(ctx, r); err != nil {
		s.opened(b)
		return fmt.Errorf("e2b: sandbox %s: create its record: %w", b.id, err)
	}
	sealed, err := s.sealedOf(b)
	if err != nil {
		s.closeRecord(ctx, b, endBootFailed)
		s.opened(b)
		return fmt.Errorf("e2b: sandbox %s: seal its secrets: %w", b.id, err)
	}
	l, err := s.o.Store.AcquireLease(ctx, r.ID, s.owner, s.leaseTTL())
	if err == nil {
		b.lease = l.Token
		_, err = b.rec.commit(ctx, "", "", event.SandboxCreated{
			TokenSHA256: tokenHash(b.token), TrafficSHA256: tokenHash(b.traffic), Sealed: sealed,
			SandboxID: b.id, Template: b.template.name, TemplateSource: b.template.source,
			KeyID: b.keyID, Metadata: b.metadata, EnvKeys: slices.Sorted(maps.Keys(b.envs)), Internet: b.internet,
			TimeoutMS: timeout.Milliseconds(), CPUs: b.spec.Limits.CPUs, MemoryBytes: b.spec.Limits.MemoryBytes,
			DiskBytes: b.spec.Limits.DiskBytes, Host: ownerLabel(s.owner),
		})
	}
	if err != nil {
		s.closeRecord(ctx, b, endBootFailed)
		s.opened(b)
		return fmt.Errorf("e2b: sandbox %s: open its record: %w", b.id, err)
	}
	return nil
}

// opened ends openRecord's hold on b's record: from now on it is in
// s.boxes, or closed.
func (s *Server) opened(b *box) {
	s.mu.Lock()
	delete(s.opening, b.rec.runID)
	s.mu.Unlock()
}

// reserve counts a sandbox being created against the tenant's bound.
func (s *Server) reserve(tenant string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return &publicError{status: 503, msg: "the server is shutting down"}
	}
	n := s.creating[tenant]
	for _, b := range s.boxes {
		if b.tenant == tenant {
			n++
		}
	}
	if n >= s.cfg.MaxSandboxes {
		return &publicError{status: 429, msg: fmt.Sprintf("you have %d sandboxes, the most this server allows a tenant; kill one first", n)}
	}
	s.creating[tenant]++
	return nil
}

func (s *Server) unreserve(tenant string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.creating[tenant]--; s.creating[tenant] <= 0 {
		delete(s.creating, tenant)
	}
}

// boot creates the airlock sandbox of b, with its egress proxy when the
// template's policy allows any egress and the client did not turn
// internet access off. With empty its workspace starts empty, for a
// checkpoint's tree (the whole workspace) to be unpacked into.
func (s *Server) boot(ctx context.Context, b *box, empty bool) (*live, error) {
	// The spec names no id, and the create request's envs go to each
	// command, so that a pool of ready sandboxes can serve a spec without
	// a network or a TTL; a proxied sandbox is named for its proxy.
	spec := b.spec
	if empty {
		spec.Workspace, spec.WorkspaceMode = "", ""
	}
	spec.Env = append([]string(nil), spec.Env...)
	release, err := s.network(ctx, b, &spec)
	if err != nil {
		return nil, err
	}
	var lv *live
	if sb, ok := s.takeWarm(b, spec, empty); ok {
		lv = &live{sb: sb, release: release, procs: newProcTable(), ending: make(chan struct{}), prepared: true}
	} else {
		sb, err := s.o.Backend.Create(ctx, spec)
		if err != nil {
			release()
			return nil, fmt.Errorf("e2b: create sandbox %s: %w", b.id, err)
		}
		lv = &live{sb: sb, release: release, procs: newProcTable(), ending: make(chan struct{})}
	}
	s.watch(ctx, b, lv)
	return lv, nil
}

// network attaches b's egress proxy to spec when the template's policy
// allows any egress and the client did not turn internet access off, and
// returns what releases it.
func (s *Server) network(ctx context.Context, b *box, spec *sandbox.Spec) (func(), error) {
	release := func() {}
	if b.internet && s.hasEgress(b.template) {
		spec.ID = b.id
		rel, err := s.o.Network.Attach(ctx, sandbox.Attachment{
			RunID: b.rec.runID, Tenant: b.tenant, Sandbox: b.id, Policy: b.template.raw, Spec: spec,
			Audit: func(d event.EgressDecision) {
				d.Sandbox = b.id
				b.rec.add(d, s.now())
				s.audit.line(Record{
					Tenant: b.tenant, Sandbox: b.id, Op: "egress", Outcome: d.Decision,
					Detail: clipDetail(fmt.Sprintf("%s %s:%d rule=%s %s", d.Method, d.Host, d.Port, d.Rule, d.Reason)),
				})
			},
			// The sandbox's own rules, as they are at each connection.
			Narrow: func(host string, a netip.Addr) bool { return b.rules.Load().refuses(host, a) },
			// Why deny: the E2B API has no one to ask; a policy's "ask"
			// fails closed here.
			Ask: func(context.Context, string, int) (bool, error) { return false, nil },
			// The LLM gateway's calls go into the record, and the
			// gateway debits each one's cost against its seq.
			Log: func(ctx context.Context, ps ...event.Payload) (int64, error) {
				for _, p := range ps {
					s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "llm", Outcome: "ok", Detail: clipDetail(string(p.EventType()))})
				}
				stored, err := b.rec.commit(ctx, "", "", ps...)
				if err != nil || len(stored) == 0 {
					return 0, err
				}
				return stored[0].Seq, nil
			},
		})
		if err != nil {
			return nil, fmt.Errorf("e2b: sandbox %s: network: %w", b.id, err)
		}
		release = rel
	}
	return release, nil
}

// takeWarm returns a sandbox of spec from the warm pool of b's stored
// template, when it has one (pool: N) and one is ready; it keeps the
// pool in demand either way, so that the next create finds one. A
// sandbox with a network of its own (spec.ID set) or one a checkpoint is
// restored into (empty) is never warm.
func (s *Server) takeWarm(b *box, spec sandbox.Spec, empty bool) (sandbox.Sandbox, bool) {
	t := b.template.env
	if s.o.Warm == nil || t == nil || t.Pool <= 0 || empty || spec.ID != "" {
		return nil, false
	}
	// Per tenant and version: a name means another template to another
	// tenant, and a new version may start something else.
	name := fmt.Sprintf("e2b\x00%s\x00%s@v%d", b.tenant, b.template.name, b.template.version)
	prepare := func(ctx context.Context, sb sandbox.Sandbox) error { return envtemplate.Prepare(ctx, sb, t) }
	if err := s.o.Warm.Warm(name, spec, t.Pool, prepare); err != nil {
		s.log.Warn("warm pool", "template", b.template.name, "err", err)
		return nil, false
	}
	return s.o.Warm.Take(name)
}

// destroy ends a boot: the reading of its event channel (what it holds
// is kept), its sandbox (every process in it), then its network.
func (s *Server) destroy(ctx context.Context, lv *live) {
	lv.unwatch()
	lv.endingMu.Do(func() { close(lv.ending) })
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := lv.sb.Destroy(dctx); err != nil {
		s.log.Warn("destroy sandbox", "sandbox_id", lv.sb.ID(), "err", err)
	}
	lv.procs.closeAll()
	lv.release()
}

// lookup returns tenant's sandbox id; another tenant's is as absent as
// one that never existed.
func (s *Server) lookup(tenant, id string) *box {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil || b.tenant != tenant {
		return nil
	}
	return b
}

// endReason is why a sandbox ended, and the final status of its record.
type endReason struct {
	name   string
	status event.Status
	lost   bool // recorded as sandbox.lost, not sandbox.destroyed
}

// The ends of a sandbox.
var (
	// endKilled: killed through the API.
	endKilled = endReason{name: "killed", status: event.StatusCancelled}
	// endTimeout: its timeout passed.
	endTimeout = endReason{name: "timeout", status: event.StatusCompleted}
	// endLost: it died on its own, or its server did.
	endLost = endReason{name: "lost", status: event.StatusFailed, lost: true}
	// endCredits: its tenant is metered and its balance spent.
	endCredits = endReason{name: "credits", status: event.StatusFailed}
	// endShutdown: its server shut down while it ran.
	endShutdown = endReason{name: "shutdown", status: event.StatusCancelled}
	// endBootFailed: it never booted.
	endBootFailed = endReason{name: "boot_failed", status: event.StatusFailed}
	// endTenantDeleted: its tenant is being deleted (tenants delete
	// --force).
	endTenantDeleted = endReason{name: "tenant_deleted", status: event.StatusCancelled}
	// endClosed: another process closed or deleted its record (a forced
	// deletion of its tenant run elsewhere, a cancel of the record);
	// nothing is appended to it.
	endClosed = endReason{name: "closed", status: event.StatusCancelled}
)

// end destroys b, forgets it and closes its record with why; keyID names
// the API key that killed it, if one did, and extra goes before the end
// event. It is idempotent.
func (s *Server) end(ctx context.Context, b *box, why endReason, keyID string, extra ...event.Payload) {
	b.life.Lock()
	defer b.life.Unlock()
	s.endLocked(ctx, b, why, keyID, extra...)
}

// endLocked is end. Preconditions: b.life held.
func (s *Server) endLocked(ctx context.Context, b *box, why endReason, keyID string, extra ...event.Payload) {
	b.mu.Lock()
	if b.state == stateKilled {
		b.mu.Unlock()
		return
	}
	lv, snap, frozen := b.live, b.snapshot, b.frozen
	b.state, b.live, b.paused, b.snapshot, b.frozen = stateKilled, nil, "", "", nil
	b.mu.Unlock()
	// Forgotten before anything is destroyed: a request meanwhile finds
	// no sandbox, not a killed one.
	s.mu.Lock()
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
	s.mu.Unlock()
	if frozen != nil {
		s.destroy(ctx, frozen)
	}
	s.sbxLimit.Forget(b.id)
	var (
		ps    []event.Payload
		usage *event.SandboxUsage
	)
	if lv != nil {
		// Measured before the sandbox, and its counters, are gone.
		u, _ := s.usage(b, lv, b.meter, s.now(), true)
		usage = &u
		ps = append(ps, u)
		s.destroy(ctx, lv)
	}
	if b.events != nil {
		b.events.End()
	}
	if snap != "" {
		_ = os.Remove(snap)
	}
	s.removePaused(b.rec.runID)
	if keyID != "" {
		ps = append(ps, event.SandboxOp{Op: "sandbox.kill", Outcome: "ok", KeyID: keyID})
	}
	ps = append(ps, extra...)
	stored := s.closeRecord(ctx, b, why, ps...)
	if usage != nil && len(stored) > 0 {
		s.debit(ctx, b, stored[0].Seq, usage.CostMicroCredits)
	}
	if why != endKilled {
		s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.end", Outcome: why.name})
	}
}

// closeRecord appends ps and the end event of why to b's record and
// moves it to why's final status; it returns ps as stored (nil if that
// failed, which is logged: a restarted server closes the record).
// Preconditions: b.life held, or b not yet shared.
func (s *Server) closeRecord(ctx context.Context, b *box, why endReason, ps ...event.Payload) []event.Event {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var end event.Payload = event.SandboxDestroyed{Sandbox: b.id, SandboxID: b.id, Reason: why.name, CPUMS: b.meter.cpu.Milliseconds()}
	if why.lost {
		end = event.SandboxLost{Sandbox: b.id, SandboxID: b.id, Reason: why.name, CPUMS: b.meter.cpu.Milliseconds()}
	}
	if b.status.Final() {
		return nil
	}
	stored, err := b.rec.commit(ctx, b.status, why.status, append(ps, end)...)
	if err != nil {
		s.log.Warn("e2b: close a sandbox's record", "sandbox_id", b.id, "run_id", b.rec.runID, "err", err)
		return nil
	}
	b.status = why.status
	return stored[:len(ps)]
}

// errAlreadyPaused answers pause on a paused sandbox.
var errAlreadyPaused = &publicError{status: 409, msg: "the sandbox is already paused"}

// pause keeps b's workspace as a checkpoint (the change since its last
// one). With memory (the SDKs' default) it then freezes the sandbox in
// place (freeze.go): its processes stop where they are, holding their
// memory, and a resume thaws them; the checkpoint is what a resume falls
// back to when the frozen sandbox is gone (killed, the server restarted,
// or degraded by the memory policy). Without memory, or when the sandbox
// cannot be frozen (the reason is the pause's note), the sandbox is
// destroyed and a resume boots a fresh one with the checkpoint's tree.
// The checkpoint's digest and what a resume needs besides the record (the
// access token, the environment's values) stay in StateDir, so a
// restarted server can resume it. A server without checkpoints keeps a
// tar of the workspace in StateDir instead.
//
// why is the record's reason: "api", or "timeout" for an automatic pause.
func (s *Server) pause(ctx context.Context, b *box, why string, memory bool) error {
	b.life.Lock()
	defer b.life.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case statePaused:
		return errAlreadyPaused
	case stateKilled:
		return errNoSandbox
	}
	var ps pausedState
	var snapshots []string
	if s.checkpoints(b.live) {
		digest, err := s.checkpoint(ctx, b, b.live)
		if err != nil {
			return err
		}
		ps.Checkpoint, snapshots = digest, []string{digest}
	} else {
		file, err := s.exportTar(ctx, b)
		if err != nil {
			return err
		}
		ps.Snapshot = filepath.Base(file)
	}
	removeTar := func() {
		if ps.Snapshot != "" {
			os.Remove(filepath.Join(s.o.StateDir, ps.Snapshot))
		}
	}
	lv := b.live
	// What the boot's processes reported goes into the log before they
	// are frozen or destroyed; a resume reads the channel again.
	lv.unwatch()
	kind, note := pauseKindFilesystem, ""
	if memory {
		if note = s.freeze(ctx, b, lv); note == "" {
			kind = pauseKindMemory
		}
	}
	thaw := func() {
		if kind == pauseKindMemory {
			_ = lv.sb.(sandbox.Freezer).Thaw(context.WithoutCancel(ctx))
		}
		s.watch(ctx, b, lv)
	}
	ps.Kind = kind
	if err := s.writePaused(b, ps); err != nil {
		thaw()
		removeTar()
		return err
	}
	sealed, err := s.sealedPause(b, ps)
	if err != nil {
		thaw()
		s.removePaused(b.rec.runID)
		removeTar()
		return fmt.Errorf("e2b: pause %s: seal its state: %w", b.id, err)
	}
	u, _ := s.usage(b, lv, b.meter, s.now(), true)
	stored, err := b.rec.commit(ctx, event.StatusRunning, event.StatusPaused, u, event.RunPaused{Reason: why, Snapshots: snapshots, Kind: kind, Note: note, Sealed: sealed})
	if err != nil {
		// The sandbox goes on running, as its record says.
		thaw()
		s.removePaused(b.rec.runID)
		removeTar()
		return fmt.Errorf("e2b: pause %s: %w", b.id, err)
	}
	b.status = event.StatusPaused
	b.state, b.live, b.paused, b.snapshot, b.endAt = statePaused, nil, ps.Checkpoint, "", s.now()
	b.pauseKind, b.pauseNote = kind, note
	if ps.Snapshot != "" {
		b.snapshot = filepath.Join(s.o.StateDir, ps.Snapshot)
	}
	if kind == pauseKindMemory {
		b.frozen, b.frozenAt = lv, s.now()
	} else {
		s.destroy(ctx, lv)
	}
	s.debit(ctx, b, stored[0].Seq, u.CostMicroCredits)
	// The lease ends now, but its owner's name stays on the record until
	// another acquires it: it tells the other replicas which one holds
	// the paused sandbox (its state is in this server's StateDir), and a
	// resume (this server's, or its next life's) acquires it again.
	if _, err := s.o.Store.RenewLease(context.WithoutCancel(ctx), b.rec.runID, s.owner, b.lease, time.Nanosecond); err != nil {
		s.log.Warn("e2b: end the lease of a paused sandbox's record", "sandbox_id", b.id, "err", err)
	}
	return nil
}

// exportTar writes a tar of b's running workspace to a file of StateDir
// and returns its path: the pause of a server without checkpoints.
func (s *Server) exportTar(ctx context.Context, b *box) (string, error) {
	f, err := os.CreateTemp(s.o.StateDir, snapshotPrefix+"*.tar")
	if err != nil {
		return "", fmt.Errorf("e2b: pause %s: %w", b.id, err)
	}
	w := &capWriter{w: f, left: s.cfg.MaxSnapshot}
	err = b.live.sb.Export(ctx, "/workspace", w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		if w.over {
			return "", &publicError{status: 507, msg: fmt.Sprintf("the workspace is over %d bytes, the most a pause keeps", s.cfg.MaxSnapshot)}
		}
		return "", fmt.Errorf("e2b: pause %s: snapshot: %w", b.id, err)
	}
	return f.Name(), nil
}

// resume thaws b's frozen sandbox in place when its pause kept memory and
// the sandbox is still there; otherwise (a filesystem pause, or one whose
// frozen sandbox is gone) it boots a fresh sandbox with b's paused
// workspace. timeout is its new lifetime.
func (s *Server) resume(ctx context.Context, b *box, timeout time.Duration) error {
	b.life.Lock()
	defer b.life.Unlock()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != statePaused {
		return nil
	}
	if s.movedAway(ctx, b) {
		return &publicError{status: 503, msg: "the sandbox was taken over by another replica of this service while this one did not answer for it: retry, and the request reaches that replica"}
	}
	t0 := s.now()
	if b.frozen != nil {
		ok, err := s.resumeFrozen(ctx, b, timeout, t0)
		if ok || err != nil {
			return err
		}
	}
	lv, err := s.boot(ctx, b, b.paused != "")
	if err != nil {
		return err
	}
	restored := b.paused
	if b.paused != "" {
		err = s.restoreCheckpoint(ctx, b, lv, b.paused)
	} else {
		restored = "workspace"
		err = s.restoreTar(ctx, lv, b.snapshot)
	}
	if err != nil {
		s.destroy(ctx, lv)
		return fmt.Errorf("e2b: resume %s: restore: %w", b.id, err)
	}
	if t := b.template.env; t != nil {
		// A filesystem pause keeps files, not processes: what the
		// template starts (its server, say) is started again, ready
		// before the resume returns, as on create.
		if err := envtemplate.Prepare(ctx, lv.sb, t); err != nil {
			s.destroy(ctx, lv)
			return fmt.Errorf("e2b: resume %s: template %s: %w", b.id, b.template.name, err)
		}
	}
	note := b.pauseNote
	if b.pauseKind != pauseKindFilesystem && note == "" {
		note = "the pause's memory was not kept"
	}
	l, err := s.o.Store.AcquireLease(ctx, b.rec.runID, s.owner, s.leaseTTL())
	if err == nil {
		now := s.now()
		_, err = b.rec.commit(ctx, event.StatusPaused, event.StatusRunning,
			event.RunResumed{Reason: "resume", FromSeq: b.rec.last(), Host: s.owner, Kind: pauseKindFilesystem, Note: note},
			event.SandboxProvisioned{Sandbox: b.id, SandboxID: lv.sb.ID(), Backend: lv.sb.Info().Backend, Snapshot: restored, DurationMS: now.Sub(t0).Milliseconds()})
	}
	if err != nil {
		s.destroy(ctx, lv)
		return fmt.Errorf("e2b: resume %s: %w", b.id, err)
	}
	b.lease, b.status = l.Token, event.StatusRunning
	if b.snapshot != "" {
		_ = os.Remove(filepath.Clean(b.snapshot))
	}
	s.removePaused(b.rec.runID)
	now := s.now()
	b.meter = meterState{at: now}
	b.state, b.live, b.paused, b.snapshot, b.endAt = stateRunning, lv, "", "", now.Add(timeout)
	b.resumeKind, b.resumeNote, b.pauseKind, b.pauseNote = pauseKindFilesystem, note, "", ""
	return nil
}

// restoreTar unpacks the tar file of a workspace paused before
// checkpoints into lv's sandbox, inside it, so the host never writes what
// a sandbox produced.
func (s *Server) restoreTar(ctx context.Context, lv *live, file string) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	return checkpoint.Untar(ctx, lv.sb, f, false)
}

// capWriter fails writes past its budget.
type capWriter struct {
	w    io.Writer
	left int64
	over bool
}

func (c *capWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		c.over = true
		return 0, errors.New("snapshot over its limit")
	}
	c.left -= int64(len(p))
	return c.w.Write(p)
}

// withEnvs is t with its start command run under create's envVars, when
// t is built in (the code interpreter: its kernels, as E2B's, see the
// sandbox's envVars as every command does); a stored template's start
// command is left as its document says.
func withEnvs(t *envtemplate.Template, envs map[string]string) *envtemplate.Template {
	if len(t.Files) == 0 || len(envs) == 0 || len(t.Start) == 0 {
		return t
	}
	c := *t
	// env(1) execs the command with its environment: the values are not
	// left in the server's argv.
	c.Start = envtemplate.Command{"env", "--"}
	for _, k := range slices.Sorted(maps.Keys(envs)) {
		c.Start = append(c.Start, k+"="+envs[k])
	}
	c.Start = append(c.Start, t.Start...)
	return &c
}
