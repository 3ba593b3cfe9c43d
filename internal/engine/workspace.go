package engine

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret/scan"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
	"github.com/airlockrun/airlock/internal/tools"
)

// sandboxEnv is added to every run sandbox's environment: bytecode caches
// would only add noise to snapshots and patches (and a cache written in the
// same second as an edit can hide the edit from Python).
var sandboxEnv = []string{"PYTHONDONTWRITEBYTECODE=1"}

// snapshotPrefix names the artifacts that hold workspace snapshots.
const snapshotPrefix = "snapshots/"

// setup builds the run's model provider and tool registry.
func (d *driver) setup(ctx context.Context) error {
	cfg := d.cfg
	kind, arg, _ := strings.Cut(cfg.Model, ":")
	d.provKind = kind
	switch kind {
	case "script":
		r, err := d.e.o.Blobs.Open(ctx, cfg.Script)
		if err != nil {
			return fmt.Errorf("the run's script %s: %w", cfg.Script, err)
		}
		b, err := io.ReadAll(io.LimitReader(r, model.MaxScriptBytes+1))
		r.Close()
		if err != nil {
			return fmt.Errorf("the run's script: %w", err)
		}
		s, err := model.ParseScript(b)
		if err != nil {
			return fmt.Errorf("the run's script: %w", err)
		}
		d.prov = model.NewScripted(arg, *s).After(cfg.ScriptAfter)
	case "replay":
		orig, err := d.e.o.Store.GetRun(ctx, arg)
		if err != nil {
			return fmt.Errorf("the replayed run: %w", err)
		}
		ost, _, err := d.e.load(ctx, orig)
		if err != nil {
			return err
		}
		d.prov = &replayProvider{run: arg, responses: ost.responses, step: d.curStep}
	default:
		if d.e.o.NewProvider == nil {
			return fmt.Errorf("model %q: this host has no model providers configured", cfg.Model)
		}
		p, err := d.e.o.NewProvider(ProviderSpec{Model: cfg.Model, BaseURL: cfg.BaseURL, Attempts: cfg.ModelAttempts})
		if err != nil {
			return err
		}
		d.prov = p
	}
	if d.e.o.WrapProvider != nil {
		d.prov = d.e.o.WrapProvider(d.prov)
	}
	d.reg = tools.Default(tools.Limits{MaxContent: cfg.MaxResultBytes, DefaultTimeout: time.Duration(cfg.CommandTimeoutMS) * time.Millisecond})
	for _, t := range d.e.o.Tools {
		if err := d.reg.Register(t); err != nil {
			return err
		}
	}
	if err := d.openMCP(ctx); err != nil {
		return err
	}
	d.names = make([]string, len(cfg.Sandboxes))
	for i, s := range cfg.Sandboxes {
		d.names[i] = s.Name
	}
	d.specs = d.reg.Specs(d.names...)
	// A git source is fetched before the model's first turn, so a
	// repository the policy does not let the sandbox reach fails the run
	// here, with git's reason, rather than at the model's first command.
	for _, s := range cfg.Sandboxes {
		if s.Git != nil && d.sourceTar(s.Name) == "" && d.snapshotOf(s.Name) == "" {
			if _, err := d.sandbox(ctx, s.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// snapshotOf returns the digest of sandbox name's latest snapshot ("" when
// it has none).
func (d *driver) snapshotOf(name string) string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shared.snapshots[name]
}

// sandbox returns the live sandbox called name, provisioning it on first
// use: from its last snapshot if it has one, else from its source workspace.
func (d *driver) sandbox(ctx context.Context, name string) (sandbox.Sandbox, error) {
	d.sbMu.Lock()
	l := d.sbs[name]
	if l == nil {
		l = &live{}
		d.sbs[name] = l
	}
	d.sbMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sb != nil {
		select {
		case <-l.sb.Done():
			// Gone between calls (TTL, OOM of its executor): recorded as
			// lost, and replaced below.
			if err := d.lostLocked(ctx, name, l, "the sandbox stopped between calls"); err != nil {
				return nil, err
			}
		default:
			return l.sb, nil
		}
	}
	var err error
	attempts := d.cfg.SandboxAttempts
	for attempt := 1; attempt <= attempts; attempt++ {
		if err = d.provision(ctx, name, l); err == nil || ctx.Err() != nil || attempt == attempts {
			break
		}
		if _, rerr := d.record(ctx, event.Retry{Step: d.curStep(), What: "sandbox", Attempt: attempt + 1, Reason: err.Error(), DelayMS: 200}); rerr != nil {
			return nil, rerr
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return nil, err
	case err != nil:
		return nil, &sandboxError{name: name, attempts: attempts, err: err}
	}
	return l.sb, nil
}

// sandboxError reports that every try the run's policy allows
// (retries.sandbox) to provision a sandbox, or to replace a lost one,
// failed: the run fails with it (see driver.loop), rather than being left
// for a worker to try again, and again, with the same workspace.
type sandboxError struct {
	name     string
	attempts int
	err      error
}

func (e *sandboxError) Error() string {
	tries := "1 try"
	if e.attempts != 1 {
		tries = fmt.Sprintf("%d tries", e.attempts)
	}
	return fmt.Sprintf("sandbox %s: %s failed, the last: %v", e.name, tries, e.err)
}

func (e *sandboxError) Unwrap() error { return e.err }

// curStep returns the number of the run's latest model turn.
func (d *driver) curStep() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shared.steps
}

// baseSpec is the spec every sandbox of the run starts from, its run
// sandboxes' and its stdio MCP servers': the run's limits (hard), root
// filesystem and runtime, the sandbox environment and env, and image (an
// image of the host's store, "" for none) as its root. resolve says image
// is a reference still to be resolved, and replaces the run's root
// filesystem (a server's own image); else it is the run's resolved image.
func (d *driver) baseSpec(ctx context.Context, env []string, image string, resolve bool) (sandbox.Spec, error) {
	cfg := d.cfg
	spec := sandbox.Spec{Env: append(slices.Clone(sandboxEnv), env...), Limits: sandbox.Limits{
		MemoryBytes: cfg.Limits.MemoryBytes, Pids: cfg.Limits.Pids, CPUs: cfg.Limits.CPUs,
		DiskBytes: cfg.Limits.DiskBytes, RequireHard: true,
	}}
	spec.RootFS, spec.Runtime = cfg.RootFS, cfg.Runtime
	if image == "" {
		return spec, nil
	}
	if d.e.o.Images == nil {
		return spec, fmt.Errorf("image %s: this host has no image store", image)
	}
	ref := image
	if resolve {
		var err error
		if ref, err = d.e.o.Images.Resolve(ctx, image); err != nil {
			return spec, fmt.Errorf("image %s: %w", image, err)
		}
		spec.RootFS = ""
	}
	if err := d.e.o.Images.Apply(ctx, ref, &spec); err != nil {
		return spec, fmt.Errorf("image %s: %w", image, err)
	}
	return spec, nil
}

// attach puts spec behind an egress proxy under pol (a policy document),
// whose decisions are recorded in the run's log as those of sandbox name
// and whose asks the run's approvals decide.
func (d *driver) attach(ctx context.Context, name string, pol []byte, spec *sandbox.Spec) (func(), error) {
	return d.e.o.Network.Attach(ctx, sandbox.Attachment{
		RunID: d.run.ID, Tenant: d.run.Tenant, Sandbox: name, Policy: pol, Spec: spec,
		Audit: func(ed event.EgressDecision) {
			ed.Sandbox = name
			d.audit(ctx, ed)
		},
		Ask: func(ctx context.Context, host string, port int) (bool, error) {
			return d.askNetwork(ctx, name, host, port)
		},
		Log: d.logged,
	})
}

// provision creates sandbox name into l (whose lock the caller holds).
func (d *driver) provision(ctx context.Context, name string, l *live) error {
	start := time.Now()
	cfg := d.cfg
	sc, _ := cfg.sandbox(name)
	snap := d.snapshotOf(name)
	spec, err := d.baseSpec(ctx, cfg.Env, cfg.Image, false)
	if err != nil {
		return err
	}
	if snap == "" {
		snap = d.sourceTar(name)
	}
	if sc.mode() != sandbox.WorkspaceCOW {
		// The host directory is the workspace's state (rw) or never
		// changes (ro): no snapshot stands for it.
		snap = ""
	}
	if snap == "" && sc.Workspace != "" {
		spec.Workspace, spec.WorkspaceMode = sc.Workspace, sc.mode()
	}
	// The run's own sandboxes only: an MCP server's (baseSpec too) gets
	// neither.
	spec.WritableRoot, spec.Sudo, spec.StaticReadOnly = cfg.WritableRoot, cfg.Sudo, cfg.StaticReadOnly
	for _, m := range cfg.Mounts {
		spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.ReadOnly})
	}
	release := func() {}
	if d.e.o.Network != nil {
		spec.ID = sandbox.NewID()
		rel, err := d.attach(ctx, name, d.run.Policy, &spec)
		if err != nil {
			return fmt.Errorf("network: %w", err)
		}
		release = rel
		if spec.Network != sandbox.NetworkProxy {
			// Nothing was bound to the id: leave the choice to the
			// backend, so a pool of ready sandboxes can serve the spec.
			spec.ID = ""
		}
	}
	sb, err := d.e.o.Backend.Create(ctx, spec)
	if err != nil {
		release()
		return err
	}
	ref, chunked := d.checkpointsOf(name)
	checkpoints := d.checkpointable(name, sb)
	l.baseline = ""
	fail := func(err error) error {
		destroy(ctx, sb)
		release()
		return err
	}
	switch {
	case snap != "" && chunked && snap == ref.latest:
		if !checkpoints {
			return fail(fmt.Errorf("restore checkpoint %s: the sandbox cannot take checkpoints", snap))
		}
		if err := d.restoreCheckpoint(ctx, sb, l, snap); err != nil {
			return fail(fmt.Errorf("restore checkpoint %s: %w", snap, err))
		}
	case snap != "":
		if err := d.restore(ctx, sb, snap); err != nil {
			return fail(fmt.Errorf("restore snapshot %s: %w", snap, err))
		}
	case sc.Git != nil:
		if err := d.fetchGit(ctx, sb, name, *sc.Git); err != nil {
			return fail(err)
		}
	}
	if t := cfg.Template; t != nil {
		// Before the first checkpoint: what the start command writes is
		// part of the workspace the run starts from.
		if err := template.Prepare(ctx, sb, t.template()); err != nil {
			return fail(fmt.Errorf("template %s v%d: %w", t.Name, t.Version, err))
		}
	}
	l.sb, l.release = sb, release
	d.mu.Lock()
	delete(d.snaps, name) // a restored tree has new inodes and times
	d.mu.Unlock()
	ps := []event.Payload{event.SandboxProvisioned{
		Sandbox: name, SandboxID: sb.ID(), Backend: sb.Info().Backend,
		Snapshot: snap, Image: cfg.Image, DurationMS: time.Since(start).Milliseconds(),
	}}
	if checkpoints && d.snapshotOf(name) == "" {
		// The sandbox's first checkpoint, its start: the workspace as it
		// was made, before any command, which later checkpoints change
		// and the run's patch is against.
		ev, err := d.checkpoint(ctx, name, l, d.curStep(), true)
		if err != nil {
			l.sb, l.release = nil, nil
			return fail(fmt.Errorf("checkpoint of the new workspace: %w", err))
		}
		ps = append(ps, ev)
	}
	if _, err = d.record(ctx, ps...); err != nil {
		return err
	}
	l.stopEvents = d.watchEvents(ctx, name, sb)
	return nil
}

// restore unpacks a gzipped tar (a snapshot of the older format, or an
// uploaded or fetched source tree) into the sandbox's empty workspace. The
// bytes are checked against their digest first, and unpacked inside the
// sandbox, so the host never writes what the sandbox produced.
func (d *driver) restore(ctx context.Context, sb sandbox.Sandbox, digest string) error {
	r, err := d.e.o.Blobs.Open(ctx, digest)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, r)
	r.Close()
	if err != nil {
		return err
	}
	if r, err = d.e.o.Blobs.Open(ctx, digest); err != nil {
		return err
	}
	defer r.Close()
	return checkpoint.Untar(ctx, sb, r, true)
}

// snapshot keeps what step n changed in sandbox name's workspace: a
// checkpoint of the change (see checkpoint.go), or for a sandbox that
// cannot take one, a gzipped tar of the whole workspace as an artifact.
// A sandbox found lost is replaced (restored from its previous snapshot)
// and snapshotted again.
func (d *driver) snapshot(ctx context.Context, n int, name string) error {
	d.mu.Lock()
	var fp string
	if ch := d.changes[name]; ch != nil && ch.calls == 1 {
		fp = ch.fingerprint
	}
	last, known := d.snaps[name]
	unchanged := known && fp != "" && fp == last.fingerprint && d.shared.snapshots[name] == last.digest
	d.mu.Unlock()
	if unchanged {
		// The one command that could have changed the workspace did not:
		// the last snapshot still holds it. No export, no write.
		id, cpu := d.meter(name)
		return d.later(event.SnapshotTaken{
			Step: n, Sandbox: name, Digest: last.digest, Size: last.size, Base: last.digest, SandboxID: id, CPUMS: cpu,
			Format: last.format, TreeBytes: last.treeBytes,
		})
	}
	attempts := d.cfg.SandboxAttempts
	for attempt := 1; ; attempt++ {
		sb, err := d.sandbox(ctx, name)
		if err != nil {
			return err
		}
		ev, err := d.snapshotOnce(ctx, n, name, sb)
		if errors.Is(err, errReplaced) {
			continue
		}
		if err != nil {
			select {
			case <-sb.Done():
				if ctx.Err() != nil {
					break
				}
				if lerr := d.lost(ctx, name, sb, "lost while its workspace was saved"); lerr != nil {
					return lerr
				}
				if attempt < attempts {
					continue
				}
				// Replaced as often as the policy allows, and lost each
				// time: the run fails.
				return &sandboxError{name: name, attempts: attempts, err: fmt.Errorf("lost while its workspace was saved: %w", err)}
			default:
			}
			return fmt.Errorf("engine: snapshot sandbox %s: %w", name, err)
		}
		d.mu.Lock()
		d.snaps[name] = snapInfo{digest: ev.Digest, size: ev.Size, fingerprint: fp, format: ev.Format, treeBytes: ev.TreeBytes}
		d.mu.Unlock()
		// Written with the next append (see driver.pending).
		return d.later(ev)
	}
}

// errReplaced: the sandbox was replaced while a snapshot of it began.
var errReplaced = errors.New("engine: the sandbox was replaced")

// snapshotOnce takes one snapshot of sandbox name, live as sb.
func (d *driver) snapshotOnce(ctx context.Context, n int, name string, sb sandbox.Sandbox) (event.SnapshotTaken, error) {
	if d.checkpointable(name, sb) {
		d.sbMu.Lock()
		l := d.sbs[name]
		d.sbMu.Unlock()
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.sb != sb {
			return event.SnapshotTaken{}, errReplaced
		}
		return d.checkpoint(ctx, name, l, n, false)
	}
	start := time.Now()
	digest, size, err := d.export(ctx, sb)
	if err != nil {
		return event.SnapshotTaken{}, err
	}
	d.mu.Lock()
	base, seq := d.shared.snapshots[name], d.seq
	d.mu.Unlock()
	// An unchanged workspace packs to the same bytes (the export is
	// ordered, gzip carries no time): the blob exists and so does its
	// artifact.
	if digest != base {
		if _, err := d.e.o.Store.PutArtifact(ctx, store.Artifact{
			RunID: d.run.ID, Digest: digest, Size: size, MediaType: "application/gzip",
			Name: fmt.Sprintf("%s%s/%06d-step%d.tar.gz", snapshotPrefix, name, seq, n),
		}); err != nil {
			return event.SnapshotTaken{}, err
		}
	}
	return event.SnapshotTaken{
		Step: n, Sandbox: name, Digest: digest, Size: size, Base: base, DurationMS: time.Since(start).Milliseconds(),
		SandboxID: sb.ID(), CPUMS: measure(sb),
	}, nil
}

// gzips recycles gzip writers: each holds about a megabyte of tables.
var gzips = sync.Pool{New: func() any {
	w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
	return w
}}

// snapshotInMemory is the largest snapshot packed in memory, where its
// digest is known before it touches the disk; larger ones stream into the
// blob store.
const snapshotInMemory = 16 << 20

// export stores the gzipped tar of sb's /workspace in the blob store and
// returns its digest. Content already stored (an unchanged workspace packs
// to the same bytes) is not written again.
func (d *driver) export(ctx context.Context, sb sandbox.Sandbox) (string, int64, error) {
	pr, pw := io.Pipe()
	go func() {
		gz := gzips.Get().(*gzip.Writer)
		gz.Reset(pw)
		err := sb.Export(ctx, "/workspace", gz)
		if err == nil {
			err = gz.Close()
		}
		gz.Reset(io.Discard)
		gzips.Put(gz)
		pw.CloseWithError(err)
	}()
	defer pr.CloseWithError(errors.New("done"))
	var buf bytes.Buffer
	n, err := io.Copy(&buf, io.LimitReader(pr, snapshotInMemory+1))
	if err != nil {
		return "", 0, err
	}
	if n <= snapshotInMemory {
		sum := sha256.Sum256(buf.Bytes())
		digest := "sha256:" + hex.EncodeToString(sum[:])
		if ok, err := d.e.o.Blobs.Has(ctx, digest); err == nil && ok {
			return digest, n, nil
		}
		return d.e.o.Blobs.Put(ctx, &buf)
	}
	return d.e.o.Blobs.Put(ctx, io.MultiReader(&buf, pr))
}

// lost records that sandbox name died and forgets it; the next use
// provisions a fresh one from the last snapshot.
func (d *driver) lost(ctx context.Context, name string, sb sandbox.Sandbox, reason string) error {
	d.sbMu.Lock()
	l := d.sbs[name]
	d.sbMu.Unlock()
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sb == nil || l.sb != sb {
		return nil // already replaced
	}
	return d.lostLocked(ctx, name, l, reason)
}

func (d *driver) lostLocked(ctx context.Context, name string, l *live, reason string) error {
	id, cpu := l.sb.ID(), measure(l.sb)
	l.stopEventsNow()
	destroy(ctx, l.sb)
	l.release()
	l.sb, l.release = nil, nil
	_, err := d.record(ctx, event.SandboxLost{Sandbox: name, SandboxID: id, Reason: reason, CPUMS: cpu})
	return err
}

// stopEventsNow drains and stops the reader of l's event channel, if it
// has one. Preconditions: l.mu held.
func (l *live) stopEventsNow() {
	if l.stopEvents != nil {
		l.stopEvents()
		l.stopEvents = nil
	}
}

// measure returns sb's CPU time in milliseconds as its host measures it,
// or 0 when it cannot be measured.
func measure(sb sandbox.Sandbox) int64 {
	m, ok := sb.(sandbox.Measurer)
	if !ok {
		return 0
	}
	x, err := m.Measure()
	if err != nil {
		return 0
	}
	return x.CPU.Milliseconds()
}

// meter returns the id and CPU time of sandbox name, if it is live.
func (d *driver) meter(name string) (string, int64) {
	d.sbMu.Lock()
	l := d.sbs[name]
	d.sbMu.Unlock()
	if l == nil {
		return "", 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sb == nil {
		return "", 0
	}
	return l.sb.ID(), measure(l.sb)
}

// cpuUsed is the CPU time of all the run's sandboxes: what the log
// records, and for live ones what their host measures now.
//
// Preconditions: called by the loop.
func (d *driver) cpuUsed() int64 {
	d.sbMu.Lock()
	names := make([]string, 0, len(d.sbs))
	for name := range d.sbs {
		names = append(names, name)
	}
	d.sbMu.Unlock()
	live := map[string]int64{}
	for _, name := range names {
		if id, cpu := d.meter(name); id != "" {
			live[id] = cpu
		}
	}
	var total int64
	for id, ms := range d.st.cpu {
		total += max(ms, live[id])
		delete(live, id)
	}
	for _, ms := range live {
		total += ms
	}
	return total
}

// destroyAll destroys every live sandbox and records it (with the CPU
// time it used, which the run's budget counts). It destroys them all
// whatever fails, and reports the records it could not write.
func (d *driver) destroyAll(ctx context.Context, reason string) error {
	d.sbMu.Lock()
	defer d.sbMu.Unlock()
	var errs []error
	for name, l := range d.sbs {
		l.mu.Lock()
		if l.sb != nil {
			id, cpu := l.sb.ID(), measure(l.sb)
			l.stopEventsNow()
			destroy(ctx, l.sb)
			l.release()
			l.sb, l.release = nil, nil
			if _, err := d.record(ctx, event.SandboxDestroyed{Sandbox: name, SandboxID: id, Reason: reason, CPUMS: cpu}); err != nil {
				errs = append(errs, err)
			}
		}
		l.mu.Unlock()
	}
	return errors.Join(errs...)
}

// destroy destroys sb, past ctx's end, within a minute. Its error is not
// the run's: the backend kills what it could not remove when its host
// process ends, and nothing recorded depends on it.
func destroy(ctx context.Context, sb sandbox.Sandbox) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	_ = sb.Destroy(ctx)
}

// verify runs the completion checks in the first sandbox.
func (d *driver) verify(ctx context.Context) (event.VerificationResult, error) {
	start := time.Now()
	cfg := d.cfg
	first := cfg.Sandboxes[0]
	vr := event.VerificationResult{Passed: true, Checks: []event.Check{}}
	add := func(c event.Check) {
		vr.Checks = append(vr.Checks, c)
		vr.Passed = vr.Passed && c.Passed
	}
	if len(cfg.Checks.Commands) > 0 || len(cfg.Checks.Changed) > 0 || len(cfg.Checks.OnlyChanged) > 0 {
		sb, err := d.sandbox(ctx, first.Name)
		if err != nil {
			return vr, err
		}
		for _, cmd := range cfg.Checks.Commands {
			var out tailBuffer
			res, err := sandbox.Run(ctx, sb, sandbox.Command{
				Argv: []string{"sh", "-c", cmd}, Stdout: &out, Stderr: &out,
				Timeout: time.Duration(cfg.Checks.TimeoutMS) * time.Millisecond, MaxOutput: 16 << 20,
			})
			if err != nil {
				return vr, fmt.Errorf("check %q: %w", cmd, err)
			}
			code := res.ExitCode
			c := event.Check{Name: cmd, Kind: "command", Passed: res.Outcome == sandbox.OutcomeExited && code == 0, Detail: out.String()}
			if res.Outcome == sandbox.OutcomeExited {
				c.ExitCode = &code
			} else {
				c.Detail = string(res.Outcome) + ": " + res.Message + "\n" + c.Detail
			}
			add(c)
		}
		if len(cfg.Checks.Changed) > 0 || len(cfg.Checks.OnlyChanged) > 0 {
			patch, err := d.diff(ctx, first.Name)
			if err != nil {
				return vr, err
			}
			changed := changedPaths(patch)
			for _, p := range cfg.Checks.Changed {
				rel, _ := workspaceRel(p)
				ok := slices.Contains(changed, rel)
				c := event.Check{Name: "changed " + rel, Kind: "changed", Passed: ok}
				if !ok {
					c.Detail = rel + " is the same as in the source workspace"
				}
				add(c)
			}
			if len(cfg.Checks.OnlyChanged) > 0 {
				var outside []string
				for _, p := range changed {
					if !slices.ContainsFunc(cfg.Checks.OnlyChanged, func(g string) bool { return matchGlob(g, p) }) {
						outside = append(outside, p)
					}
				}
				c := event.Check{Name: "only changed " + strings.Join(cfg.Checks.OnlyChanged, ", "), Kind: "unchanged_outside", Passed: len(outside) == 0}
				if len(outside) > 0 {
					c.Detail = "changed outside the allowed globs: " + strings.Join(outside, ", ")
				}
				add(c)
			}
		}
	}
	vr.DurationMS = time.Since(start).Milliseconds()
	return vr, nil
}

// diff returns the unified diff of sandbox name's workspace against its
// source directory ("" when the sandbox was never used).
func (d *driver) diff(ctx context.Context, name string) (string, error) {
	if ref, ok := d.checkpointsOf(name); ok && ref.start != "" {
		// From the manifests, against the workspace as the sandbox was
		// made: only what changed is read.
		var b strings.Builder
		if err := d.diffCheckpoints(ctx, &b, ref.start, ref.latest); err != nil {
			return "", fmt.Errorf("engine: diff of sandbox %s: %w", name, err)
		}
		return b.String(), nil
	}
	sc, _ := d.cfg.sandbox(name)
	sb, err := d.sandbox(ctx, name)
	if err != nil {
		return "", err
	}
	tr := workspaceTar(ctx, sb)
	var b strings.Builder
	if base := d.sourceTar(name); base != "" {
		// The workspace started as an uploaded tar or a git source's
		// tree: the patch is against it.
		err = d.diffTar(ctx, &b, base, tr)
	} else {
		err = sandbox.WriteDiff(&b, sc.Workspace, tr)
	}
	tr.CloseWithError(errors.New("done"))
	if err != nil {
		return "", fmt.Errorf("engine: diff of sandbox %s: %w", name, err)
	}
	return b.String(), nil
}

// diffTar writes the patch of the export tr against the gzipped tar blob
// digest.
func (d *driver) diffTar(ctx context.Context, w io.Writer, digest string, tr io.Reader) error {
	r, err := d.e.o.Blobs.Open(ctx, digest)
	if err != nil {
		return err
	}
	defer r.Close()
	zr, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	defer zr.Close()
	return sandbox.WriteDiffTar(w, zr, tr)
}

// workspaceTar streams the tar of sb's /workspace; closing it stops the
// export.
func workspaceTar(ctx context.Context, sb sandbox.Sandbox) *io.PipeReader {
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(sb.Export(ctx, "/workspace", pw)) }()
	return pr
}

// changedPaths lists the files a diff from WriteDiff changes.
func changedPaths(patch string) []string {
	var out []string
	for line := range strings.Lines(patch) {
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "diff --git a/")
		if !ok || len(rest) < 3 {
			continue
		}
		// "NAME b/NAME": the name is the first half.
		out = append(out, rest[:(len(rest)-3)/2])
	}
	return out
}

// exportArtifacts keeps the patch of every used sandbox and the files the
// artifact globs match.
func (d *driver) exportArtifacts(ctx context.Context) error {
	cfg := d.cfg
	for i, sc := range cfg.Sandboxes {
		d.sbMu.Lock()
		l := d.sbs[sc.Name]
		d.sbMu.Unlock()
		if l == nil && d.snapshotOf(sc.Name) == "" {
			continue // never used
		}
		patch, err := d.diff(ctx, sc.Name)
		if err != nil {
			return err
		}
		name := "patch.diff"
		if i > 0 {
			name = sc.Name + ".patch.diff"
		}
		stored := event.ArtifactStored{Name: name, MediaType: "text/x-diff", Kind: "patch"}
		if d.scan != nil {
			red, ids := redactPatch(d.scan, patch)
			stored.Secrets = ids
			if stored.SecretsKept = d.cfg.Secrets.Patch == string(policy.SecretKeep); !stored.SecretsKept {
				patch = red
			}
		}
		if err := d.keepArtifact(ctx, stored, strings.NewReader(patch)); err != nil {
			return err
		}
		if i > 0 || len(cfg.Artifacts) == 0 {
			continue
		}
		sb, err := d.sandbox(ctx, sc.Name)
		if err != nil {
			return err
		}
		if err := d.keepFiles(ctx, sb, cfg.Artifacts); err != nil {
			return err
		}
	}
	return nil
}

// keepFiles stores the regular files of sb's workspace that match globs.
func (d *driver) keepFiles(ctx context.Context, sb sandbox.Sandbox, globs []string) error {
	pr := workspaceTar(ctx, sb)
	defer pr.CloseWithError(errors.New("done"))
	tr := tar.NewReader(pr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("engine: artifacts: %w", err)
		}
		name := path.Clean(strings.TrimPrefix(h.Name, "./"))
		if h.Typeflag != tar.TypeReg || name == "." || strings.HasPrefix(name, "../") || path.IsAbs(name) {
			continue
		}
		if !slices.ContainsFunc(globs, func(g string) bool { return matchGlob(g, name) }) {
			continue
		}
		if err := d.keep(ctx, "files/"+name, "file", "application/octet-stream", tr); err != nil {
			return err
		}
	}
}

// keep stores r as artifact name and records it.
func (d *driver) keep(ctx context.Context, name, kind, media string, r io.Reader) error {
	return d.keepArtifact(ctx, event.ArtifactStored{Name: name, MediaType: media, Kind: kind}, r)
}

// keepArtifact stores r as the artifact a describes (its digest and size
// filled in) and records it.
func (d *driver) keepArtifact(ctx context.Context, a event.ArtifactStored, r io.Reader) error {
	a, kept, err := d.storeArtifact(ctx, a, r)
	if err != nil || !kept {
		return err
	}
	return d.append(ctx, a)
}

// storeArtifact stores r as the artifact a describes and returns a with
// its digest and size, to be recorded; kept is false when an earlier
// attempt (a resumed run) stored one of the name: the first one stands.
func (d *driver) storeArtifact(ctx context.Context, a event.ArtifactStored, r io.Reader) (event.ArtifactStored, bool, error) {
	name, media := a.Name, a.MediaType
	digest, size, err := d.e.o.Blobs.Put(ctx, r)
	if err != nil {
		return a, false, fmt.Errorf("engine: artifact %s: %w", name, err)
	}
	a.Digest, a.Size = digest, size
	_, err = d.e.o.Store.PutArtifact(ctx, store.Artifact{RunID: d.run.ID, Name: name, Digest: digest, Size: size, MediaType: media})
	if errors.Is(err, store.ErrExists) {
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	return a, true, nil
}

// redactPatch redacts the findings of sc that start on lines a unified
// diff adds (the run's own changes; what it removed or kept was there
// before it), line by line so that the diff's hunks still count right: a
// secret over several lines becomes a marker on each. It returns the
// redacted diff and the rules that found something, sorted.
func redactPatch(sc *scan.Scanner, patch string) (string, []string) {
	var kept []scan.Finding
	for _, f := range sc.Scan(patch) {
		ls := strings.LastIndexByte(patch[:f.Start], '\n') + 1
		if strings.HasPrefix(patch[ls:], "+") && !strings.HasPrefix(patch[ls:], "+++ ") {
			kept = append(kept, f)
		}
	}
	if len(kept) == 0 {
		return patch, nil
	}
	var b strings.Builder
	last := 0
	for _, f := range kept {
		b.WriteString(patch[last:f.Start])
		for i, piece := range strings.Split(patch[f.Start:f.End], "\n") {
			switch {
			case i == 0:
				b.WriteString(scan.Marker(f.Rule))
			case strings.HasPrefix(piece, "+"):
				b.WriteString("\n+" + scan.Marker(f.Rule))
			default:
				// A line the run did not add: as it was.
				b.WriteString("\n" + piece)
			}
		}
		last = f.End
	}
	b.WriteString(patch[last:])
	return b.String(), scan.IDs(kept)
}

// tailBuffer keeps the last 4 KiB written to it.
type tailBuffer struct{ b []byte }

const tailMax = 4 << 10

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 2*tailMax {
		t.b = append(t.b[:0], t.b[len(t.b)-tailMax:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	if len(t.b) > tailMax {
		return "[...]" + string(t.b[len(t.b)-tailMax:])
	}
	return string(t.b)
}

// replayProvider answers with a run's recorded model turns, by step.
type replayProvider struct {
	run       string
	responses []event.ModelResponse
	step      func() int
}

func (p *replayProvider) Complete(ctx context.Context, req model.Request, _ func(model.Delta)) (model.Response, error) {
	if err := ctx.Err(); err != nil {
		return model.Response{}, err
	}
	n := p.step()
	if n >= len(p.responses) {
		return model.Response{}, fmt.Errorf("replay of %s: %w: the run recorded %d model turns", p.run, model.ErrScriptEnded, len(p.responses))
	}
	r := p.responses[n]
	resp := model.Response{
		Model: r.Model, Text: r.Text, StopReason: model.StopReason(r.StopReason),
		Usage: model.Usage{InputTokens: r.Usage.InputTokens, OutputTokens: r.Usage.OutputTokens}, ToolCalls: modelCalls(r.ToolCalls),
	}
	return resp, nil
}
