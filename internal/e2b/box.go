package e2b

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Sandbox states, as E2B names them.
const (
	stateRunning = "running"
	statePaused  = "paused"
	stateKilled  = "killed"
)

// box is one E2B sandbox: an airlock sandbox while running, a workspace
// snapshot while paused.
type box struct {
	id       string
	tenant   string
	keyID    string
	template template
	spec     sandbox.Spec // to boot from, without network
	metadata map[string]string
	envs     map[string]string
	token    string
	started  time.Time
	internet bool

	mu sync.Mutex
	// state, endAt, live and snapshot are guarded by mu.
	state    string
	endAt    time.Time
	live     *live  // nil unless running
	snapshot string // the paused workspace's tar file
}

// live is one boot of a box: the sandbox and what runs in it.
type live struct {
	sb      sandbox.Sandbox
	release func()
	procs   *procTable
}

// newToken returns a fresh access token: 32 random bytes, hex.
func newToken() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
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
	Network             *networkRequest   `json:"network"`
	VolumeMounts        []any             `json:"volumeMounts"`
	MCP                 map[string]any    `json:"mcp"`
}

// networkRequest is create's network override, which airlock does not
// take: the template's policy decides egress.
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

// timeoutOf bounds a requested timeout in seconds.
func (s *Server) timeoutOf(secs *int64, tpl template) (time.Duration, error) {
	d := s.cfg.DefaultTimeout
	if secs != nil {
		if *secs < 0 {
			return 0, errors.New("timeout: must not be negative")
		}
		d = time.Duration(*secs) * time.Second
		if *secs == 0 || *secs > int64(s.cfg.MaxTimeout/time.Second) {
			d = s.cfg.MaxTimeout
		}
	}
	if ttl := time.Duration(tpl.doc.Sandbox.Limits.TTL); ttl > 0 && d > ttl {
		d = ttl // the policy's sandbox TTL ends the sandbox anyway
	}
	return d, nil
}

// create makes and boots a sandbox for tenant.
func (s *Server) create(ctx context.Context, tenant, keyID string, req createRequest) (*box, error) {
	if err := checkMap("metadata", req.Metadata, false); err != nil {
		return nil, &publicError{status: 400, msg: err.Error()}
	}
	if err := checkMap("envVars", req.EnvVars, true); err != nil {
		return nil, &publicError{status: 400, msg: err.Error()}
	}
	if n := req.Network; n != nil && (len(n.AllowOut) > 0 || len(n.DenyOut) > 0 || len(n.Rules) > 0 || n.EgressProxy != nil || n.MaskRequestHost != nil) {
		return nil, &publicError{status: 400, msg: "network: airlock takes no per-sandbox network rules; the template's policy decides egress"}
	}
	if len(req.VolumeMounts) > 0 {
		return nil, &publicError{status: 400, msg: "volumeMounts: volumes are not supported"}
	}
	if req.AutoPause != nil && *req.AutoPause {
		return nil, &publicError{status: 400, msg: "autoPause: not supported; pause explicitly"}
	}
	tpl, err := s.resolveTemplate(ctx, tenant, req.TemplateID)
	if errors.Is(err, errNoTemplate) {
		return nil, &publicError{status: 404, msg: fmt.Sprintf("template %q not found: templates are %q (the default policy) and the names of your stored policies", clip(req.TemplateID), DefaultTemplate)}
	}
	if err != nil {
		return nil, err
	}
	timeout, err := s.timeoutOf(req.Timeout, tpl)
	if err != nil {
		return nil, &publicError{status: 400, msg: err.Error()}
	}
	if err := s.reserve(tenant); err != nil {
		return nil, err
	}
	defer s.unreserve(tenant)

	b := &box{id: sandbox.NewID(), tenant: tenant, keyID: keyID, template: tpl, metadata: req.Metadata, envs: req.EnvVars,
		token: newToken(), started: s.now().UTC(), internet: req.AllowInternetAccess == nil || *req.AllowInternetAccess}
	b.spec = specOf(tpl.doc)
	for k, v := range req.EnvVars {
		b.spec.Env = append(b.spec.Env, k+"="+v)
	}
	if err := b.spec.Validate(); err != nil {
		return nil, &publicError{status: 400, msg: "template " + tpl.name + ": " + err.Error()}
	}
	lv, err := s.boot(ctx, b)
	if err != nil {
		return nil, err
	}
	b.state, b.live, b.endAt = stateRunning, lv, s.now().Add(timeout)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		s.destroy(ctx, lv)
		return nil, &publicError{status: 503, msg: "the server is shutting down"}
	}
	s.boxes[b.id] = b
	s.mu.Unlock()
	return b, nil
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
// internet access off.
func (s *Server) boot(ctx context.Context, b *box) (*live, error) {
	spec := b.spec
	spec.ID = b.id
	spec.Env = append([]string(nil), spec.Env...)
	release := func() {}
	if s.o.Network != nil && b.internet && b.template.raw != nil && needsNetwork(b.template.doc) {
		rel, err := s.o.Network.Attach(ctx, engine.Attachment{RunID: "e2b-" + b.id, Tenant: b.tenant, Sandbox: b.id, Policy: b.template.raw, Spec: &spec,
			Audit: func(d event.EgressDecision) {
				s.audit.record(Record{Tenant: b.tenant, Sandbox: b.id, Op: "egress", Outcome: d.Decision,
					Detail: clipDetail(fmt.Sprintf("%s %s:%d rule=%s %s", d.Method, d.Host, d.Port, d.Rule, d.Reason))})
			},
			// Why deny: the E2B API has no one to ask; a policy's "ask"
			// fails closed here.
			Ask: func(context.Context, string, int) (bool, error) { return false, nil },
			Log: func(_ context.Context, ps ...event.Payload) (int64, error) {
				for _, p := range ps {
					s.audit.record(Record{Tenant: b.tenant, Sandbox: b.id, Op: "llm", Outcome: "ok", Detail: clipDetail(string(p.EventType()))})
				}
				return 0, nil
			},
		})
		if err != nil {
			return nil, fmt.Errorf("e2b: sandbox %s: network: %w", b.id, err)
		}
		release = rel
	}
	sb, err := s.o.Backend.Create(ctx, spec)
	if err != nil {
		release()
		return nil, fmt.Errorf("e2b: create sandbox %s: %w", b.id, err)
	}
	return &live{sb: sb, release: release, procs: newProcTable()}, nil
}

// destroy ends a boot: its sandbox (every process in it), then its
// network.
func (s *Server) destroy(ctx context.Context, lv *live) {
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

// kill destroys b and forgets it. It is idempotent.
func (s *Server) kill(ctx context.Context, b *box, why string) {
	b.mu.Lock()
	if b.state == stateKilled {
		b.mu.Unlock()
		return
	}
	lv, snap := b.live, b.snapshot
	b.state, b.live, b.snapshot = stateKilled, nil, ""
	b.mu.Unlock()
	s.mu.Lock()
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
	s.mu.Unlock()
	if lv != nil {
		s.destroy(ctx, lv)
	}
	if snap != "" {
		_ = os.Remove(snap)
	}
	if why != "api" {
		s.audit.record(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.end", Outcome: why})
	}
}

// errAlreadyPaused answers pause on a paused sandbox.
var errAlreadyPaused = &publicError{status: 409, msg: "the sandbox is already paused"}

// pause snapshots b's workspace, then destroys its sandbox. Memory is not
// kept: resuming boots a fresh sandbox from the snapshot.
func (s *Server) pause(ctx context.Context, b *box) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case statePaused:
		return errAlreadyPaused
	case stateKilled:
		return errNoSandbox
	}
	f, err := os.CreateTemp(s.o.StateDir, "snapshot-*.tar")
	if err != nil {
		return fmt.Errorf("e2b: pause %s: %w", b.id, err)
	}
	w := &capWriter{w: f, left: s.cfg.MaxSnapshot}
	err = b.live.sb.Export(ctx, "/workspace", w)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		if w.over {
			return &publicError{status: 507, msg: fmt.Sprintf("the workspace is over %d bytes, the most a pause keeps", s.cfg.MaxSnapshot)}
		}
		return fmt.Errorf("e2b: pause %s: snapshot: %w", b.id, err)
	}
	lv := b.live
	b.state, b.live, b.snapshot = statePaused, nil, f.Name()
	s.destroy(ctx, lv)
	return nil
}

// resume boots a fresh sandbox from b's snapshot; timeout is its new
// lifetime.
func (s *Server) resume(ctx context.Context, b *box, timeout time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != statePaused {
		return nil
	}
	lv, err := s.boot(ctx, b)
	if err != nil {
		return err
	}
	f, err := os.Open(b.snapshot)
	if err != nil {
		s.destroy(ctx, lv)
		return fmt.Errorf("e2b: resume %s: %w", b.id, err)
	}
	defer f.Close()
	// Unpacked inside the sandbox, so the host never writes what a
	// sandbox produced.
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, lv.sb, sandbox.Command{
		Argv:  []string{"tar", "-xf", "-", "-C", "/workspace", "--no-same-owner", "--delay-directory-restore"},
		Stdin: f, Stdout: &out, Stderr: &out, Timeout: 10 * time.Minute, MaxOutput: 64 << 10,
	})
	if err == nil && (res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0) {
		err = fmt.Errorf("tar: %s %d: %s", res.Outcome, res.ExitCode, strings.TrimSpace(out.String()))
	}
	if err != nil {
		s.destroy(ctx, lv)
		return fmt.Errorf("e2b: resume %s: restore: %w", b.id, err)
	}
	_ = os.Remove(filepath.Clean(b.snapshot))
	b.state, b.live, b.snapshot, b.endAt = stateRunning, lv, "", s.now().Add(timeout)
	return nil
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
