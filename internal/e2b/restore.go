package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	envtemplate "github.com/airlockrun/airlock/internal/template"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// What outlives the process: a sandbox's record is in the store; a paused
// sandbox's workspace is a checkpoint in the host's checkpoint store (a
// tar file in StateDir for one paused before checkpoints), and what its
// resume needs besides the record (the checkpoint's digest, its access
// token, its environment's values, which no event holds) is in StateDir,
// in a file only the host reads. A Server leases
// the records of the sandboxes it runs, as "e2b/<server id>/<nonce>",
// where the server id is kept in StateDir: so when it starts again it
// knows the records its earlier life left running (their sandboxes died
// with it) and closes them as lost, and it closes another server's once
// that server's lease has run out. Paused sandboxes stay paused and are
// listed and resumable again; a paused record whose files are not in
// this StateDir is another server's.

// serverIDFile holds the server's id in StateDir.
const serverIDFile = "server-id"

// readServerID returns the id kept in dir, making one the first time.
func readServerID(dir string) (string, error) {
	path := filepath.Join(dir, serverIDFile)
	b, err := os.ReadFile(path)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if len(id) == 32 && strings.Trim(id, "0123456789abcdef") == "" {
			return id, nil
		}
		return "", fmt.Errorf("e2b: %s: not a server id", path)
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("e2b: server id: %w", err)
	}
	id := randomHex(16)
	if err := writeFileAtomic(path, []byte(id+"\n")); err != nil {
		return "", fmt.Errorf("e2b: server id: %w", err)
	}
	return id, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// writeFileAtomic writes b to path, mode 0600, all or nothing.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if serr := f.Sync(); err == nil {
		err = serr
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

// ours reports whether a lease owner is this Server, in this life or an
// earlier one.
func (s *Server) ours(owner string) bool {
	return strings.HasPrefix(owner, "e2b/"+s.serverID+"/")
}

// boxState is what serving a sandbox again needs beyond its record's
// plain events (a resume after a restart, a replica taking it over): its
// tokens, create's envs and network, its lifecycle and its template. A
// paused sandbox's state file and a record's sealed state carry it.
type boxState struct {
	Token string            `json:"token"`
	Envs  map[string]string `json:"envs,omitempty"`
	// Traffic is the traffic access token, Private create's
	// allowPublicTraffic: false (empty in states written before ports:
	// a new token, public).
	Traffic string `json:"traffic,omitempty"`
	Private bool   `json:"private,omitempty"`
	// MaskHost is create's network.maskRequestHost.
	MaskHost string `json:"mask_host,omitempty"`
	// AutoPause, AutoResume and Lifetime are the sandbox's lifecycle:
	// what its timeout does, whether a request resumes it, and the
	// lifetime an automatic resume gives it.
	AutoPause  bool `json:"auto_pause,omitempty"`
	AutoResume bool `json:"auto_resume,omitempty"`
	// AutoPauseFiles makes the automatic pause filesystem-only.
	AutoPauseFiles bool          `json:"auto_pause_files,omitempty"`
	Lifetime       time.Duration `json:"lifetime,omitempty"`
	// AllowOut and DenyOut are the sandbox's own network rules.
	AllowOut []string `json:"allow_out,omitempty"`
	DenyOut  []string `json:"deny_out,omitempty"`
	// Template is the stored template the sandbox was made of (its image
	// by digest, environment, working directory, user, start command),
	// and TemplateVersion its version: a resume after a restart boots
	// the same root, not the host's.
	Template        *envtemplate.Template `json:"template,omitempty"`
	TemplateVersion int64                 `json:"template_version,omitempty"`
}

// stateOf is b's state, as it is now.
func stateOf(b *box) boxState {
	st := boxState{
		Token: b.token, Envs: b.envs, Traffic: b.traffic, Private: b.private, MaskHost: b.maskHost,
		AutoPause: b.autoPause, AutoResume: b.autoResume, AutoPauseFiles: b.autoPauseFiles, Lifetime: b.lifetime,
		Template: b.template.env, TemplateVersion: b.template.version,
	}
	if r := b.rules.Load(); r != nil {
		st.AllowOut, st.DenyOut = r.allowOut, r.denyOut
	}
	return st
}

// templateOf is the template of the sandbox c created, with st's stored
// template and the record's policy (raw, when it has one).
func (st *boxState) templateOf(c *event.SandboxCreated, raw []byte) (template, error) {
	tpl := template{name: c.Template, doc: defaultDocument(), source: c.TemplateSource, env: st.Template, version: st.TemplateVersion}
	if len(raw) > 0 {
		doc, err := policy.Parse(raw)
		if err != nil {
			return template{}, fmt.Errorf("its policy: %w", err)
		}
		tpl.doc, tpl.raw = doc, raw
	}
	return tpl, nil
}

// onto gives b st's tokens, envs, network and lifecycle.
func (st *boxState) onto(b *box) error {
	rules, err := parseNetRules(st.AllowOut, st.DenyOut)
	if err != nil {
		return fmt.Errorf("its network rules: %w", err)
	}
	b.rules.Store(rules)
	b.token, b.envs, b.traffic, b.private, b.maskHost = st.Token, st.Envs, st.Traffic, st.Private, st.MaskHost
	b.autoPause, b.autoResume, b.autoPauseFiles, b.lifetime = st.AutoPause, st.AutoResume, st.AutoPauseFiles, st.Lifetime
	return nil
}

// pausedState is what a paused sandbox's resume needs besides its record.
type pausedState struct {
	SandboxID string `json:"sandbox_id"`
	boxState
	// Checkpoint is the digest of the workspace's checkpoint.
	Checkpoint string `json:"checkpoint,omitempty"`
	// Snapshot is, instead, the name of the workspace's tar file in
	// StateDir (a sandbox paused before checkpoints).
	Snapshot string `json:"snapshot,omitempty"`
	// Kind is what the pause kept: pauseKindMemory (a frozen sandbox
	// besides the checkpoint, lost with the server that held it) or
	// pauseKindFilesystem ("" in files of servers before memory pauses).
	Kind string `json:"kind,omitempty"`
}

// Files in StateDir.
const (
	pausedPrefix   = "paused-"
	pausedSuffix   = ".json"
	snapshotPrefix = "snapshot-"
)

func (s *Server) pausedPath(runID string) string {
	return filepath.Join(s.o.StateDir, pausedPrefix+runID+pausedSuffix)
}

// writePaused keeps what b's resume needs, with ps's workspace.
func (s *Server) writePaused(b *box, ps pausedState) error {
	ps.SandboxID, ps.boxState = b.id, stateOf(b)
	st, err := json.Marshal(ps)
	if err == nil {
		err = writeFileAtomic(s.pausedPath(b.rec.runID), st)
	}
	if err != nil {
		return fmt.Errorf("e2b: pause %s: keep its state: %w", b.id, err)
	}
	if ps.Checkpoint != "" {
		if err := s.hold(context.Background(), s.pausedHolder(b.rec.runID), b.tenant, ps.Checkpoint); err != nil {
			s.removePaused(b.rec.runID)
			return fmt.Errorf("e2b: pause %s: %w", b.id, err)
		}
	}
	return nil
}

// removePaused removes the paused state of record runID, if any, and its
// checkpoint's hold.
func (s *Server) removePaused(runID string) {
	if err := os.Remove(s.pausedPath(runID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		s.log.Warn("e2b: remove a paused sandbox's state", "run_id", runID, "err", err)
	}
	s.release(context.Background(), s.pausedHolder(runID))
}

// Holders of this server's checkpoint holds (Options.Holds).
func (s *Server) holdPrefix() string { return "e2b/" + s.serverID + "/" }

func (s *Server) pausedHolder(runID string) string { return s.holdPrefix() + "paused/" + runID }

func (s *Server) snapshotHolder(id string) string { return s.holdPrefix() + "snapshot/" + id }

// holdTimeout bounds a hold's statement, which runs on after the request
// that made it ended (a pause's state is written either way).
const holdTimeout = time.Minute

// hold records a hold of tenant's checkpoint digest for holder
// (Options.Holds), if the store is shared.
func (s *Server) hold(ctx context.Context, holder, tenant, digest string) error {
	if s.o.Holds == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holdTimeout)
	defer cancel()
	if err := s.o.Holds.HoldCheckpoint(ctx, store.CheckpointHold{Holder: holder, Tenant: tenant, Digest: digest}); err != nil {
		return fmt.Errorf("hold its checkpoint: %w", err)
	}
	return nil
}

// release deletes holder's hold, if the store is shared. A failure is
// logged: the hold keeps the checkpoint until the server's next start
// syncs its holds (syncHolds).
func (s *Server) release(ctx context.Context, holder string) {
	if s.o.Holds == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), holdTimeout)
	defer cancel()
	if err := s.o.Holds.ReleaseCheckpoint(ctx, holder); err != nil {
		s.log.Warn("e2b: release a checkpoint's hold", "holder", holder, "err", err)
	}
}

// syncHolds makes this server's holds in the store (Options.Holds) those
// of its paused sandboxes' and snapshots' records, tenants is the tenant
// of each paused record by run id.
func (s *Server) syncHolds(ctx context.Context, tenants map[string]string) error {
	if s.o.Holds == nil {
		return nil
	}
	var hs []store.CheckpointHold
	for runID, tenant := range tenants {
		ps, err := s.readPaused(runID)
		if err != nil || ps.Checkpoint == "" {
			continue
		}
		hs = append(hs, store.CheckpointHold{Holder: s.pausedHolder(runID), Tenant: tenant, Digest: ps.Checkpoint})
	}
	s.mu.Lock()
	for _, sn := range s.snaps {
		hs = append(hs, store.CheckpointHold{Holder: s.snapshotHolder(sn.ID), Tenant: sn.Tenant, Digest: sn.Checkpoint})
	}
	s.mu.Unlock()
	if err := s.o.Holds.SyncCheckpointHolds(ctx, s.holdPrefix(), hs); err != nil {
		return fmt.Errorf("e2b: restore: the checkpoints' holds: %w", err)
	}
	return nil
}

// readPaused reads the paused state of record runID; fs.ErrNotExist when
// there is none (another server's sandbox).
func (s *Server) readPaused(runID string) (pausedState, error) {
	b, err := os.ReadFile(s.pausedPath(runID))
	if err != nil {
		return pausedState{}, err
	}
	ps, err := parsePaused(b)
	if err != nil {
		return ps, fmt.Errorf("e2b: paused state of %s: %w", runID, err)
	}
	return ps, nil
}

// maxPausedState bounds a paused state file: a token, a sandbox id, a
// file name, and environment variables within create's bounds.
const maxPausedState = 4 << 20

// parsePaused decodes a paused state. Its workspace is a checkpoint's
// digest, or a plain file name of StateDir's snapshots, never a path that
// could lead out.
func parsePaused(b []byte) (pausedState, error) {
	var ps pausedState
	if len(b) > maxPausedState {
		return ps, errors.New("too large")
	}
	if err := json.Unmarshal(b, &ps); err != nil {
		return ps, err
	}
	switch {
	case ps.SandboxID == "" || len(ps.SandboxID) > 64, ps.Token == "" || len(ps.Token) > 256, len(ps.Traffic) > 256:
		return ps, errors.New("malformed sandbox id or token")
	case ps.Checkpoint != "" && ps.Snapshot != "", ps.Checkpoint == "" && ps.Snapshot == "":
		return ps, errors.New("want one of a checkpoint and a snapshot file")
	case ps.Checkpoint != "" && blob.ValidDigest(ps.Checkpoint) != nil:
		return ps, errors.New("malformed checkpoint digest")
	case ps.Snapshot != "" && (!strings.HasPrefix(ps.Snapshot, snapshotPrefix) || strings.ContainsAny(ps.Snapshot, "/\\\x00") || filepath.Base(ps.Snapshot) != ps.Snapshot):
		return ps, errors.New("malformed snapshot name")
	}
	if err := checkMap("envs", ps.Envs, true); err != nil {
		return ps, err
	}
	return ps, nil
}

// sandboxRecords returns every sandbox record in one of statuses.
func (s *Server) sandboxRecords(ctx context.Context, statuses ...event.Status) ([]store.Run, error) {
	f := store.RunFilter{Kind: store.KindSandbox, Statuses: statuses}
	var out []store.Run
	for {
		page, err := s.o.Store.ListRuns(ctx, f)
		if err != nil {
			return nil, fmt.Errorf("e2b: list sandbox records: %w", err)
		}
		out = append(out, page...)
		if len(page) < store.MaxPage {
			return out, nil
		}
		f.After = page[len(page)-1].ID
	}
}

// restore reads the records at start: it closes those an earlier life of
// this Server left running, settles their debits, and takes the paused
// sandboxes whose state is in StateDir back, then removes files no record
// needs.
func (s *Server) restore(ctx context.Context) error {
	recs, err := s.sandboxRecords(ctx, event.StatusRunning, event.StatusPaused)
	if err != nil {
		return err
	}
	keep := map[string]bool{serverIDFile: true}
	pausedHere := map[string]string{} // run id: tenant
	for _, r := range recs {
		switch {
		case r.Status == event.StatusRunning && s.ours(r.LeaseOwner):
			s.closeLost(ctx, r, "its server stopped while it ran")
		case r.Status == event.StatusRunning:
			s.takeOver(ctx, r)
		case r.Status == event.StatusPaused && r.LeaseOwner != "" && !s.ours(r.LeaseOwner):
			// Another replica took it over while this server was
			// down (handover.go): its state here is stale.
			continue
		case r.Status == event.StatusPaused:
			ps, err := s.readPaused(r.ID)
			if errors.Is(err, fs.ErrNotExist) {
				continue // another server's
			}
			if err == nil {
				err = s.restoreBox(ctx, r, ps)
			}
			if err != nil {
				s.log.Error("e2b: a paused sandbox cannot be restored", "run_id", r.ID, "err", err)
				continue
			}
			keep[pausedPrefix+r.ID+pausedSuffix] = true
			pausedHere[r.ID] = r.Tenant
			if ps.Snapshot != "" {
				keep[ps.Snapshot] = true
			}
			if err := s.settle(ctx, r); err != nil {
				s.log.Warn("e2b: settle a paused sandbox's debits", "run_id", r.ID, "err", err)
			}
		}
	}
	entries, err := os.ReadDir(s.o.StateDir)
	if err != nil {
		return fmt.Errorf("e2b: restore: %w", err)
	}
	for _, e := range entries {
		n := e.Name()
		if !keep[n] && (strings.HasPrefix(n, pausedPrefix) || strings.HasPrefix(n, snapshotPrefix) || strings.HasPrefix(n, ".tmp-")) {
			_ = os.Remove(filepath.Join(s.o.StateDir, n))
		}
	}
	if err := s.moveSnapshots(ctx); err != nil {
		return err
	}
	return s.syncHolds(ctx, pausedHere)
}

// restoreBox takes paused record r back as a sandbox of this Server.
func (s *Server) restoreBox(ctx context.Context, r store.Run, ps pausedState) error {
	evs, err := s.o.Store.Events(ctx, r.ID, 1, 1)
	if err != nil {
		return err
	}
	if len(evs) == 0 || evs[0].Type != event.TypeSandboxCreated {
		return errors.New("its log does not start with sandbox.created")
	}
	p, err := evs[0].Unpack()
	if err != nil {
		return err
	}
	c := p.(*event.SandboxCreated)
	if c.SandboxID != ps.SandboxID {
		return errors.New("its state names another sandbox")
	}
	tpl, err := ps.templateOf(c, r.Policy)
	if err != nil {
		return err
	}
	b := &box{
		id: c.SandboxID, tenant: r.Tenant, keyID: c.KeyID, template: tpl, metadata: c.Metadata,
		started: r.Created, internet: c.Internet, rec: s.newRecord(r.ID, r.LastSeq+1), status: event.StatusPaused,
		state: statePaused, endAt: r.Updated, paused: ps.Checkpoint,
		pauseKind: pauseKindFilesystem,
	}
	if err := ps.onto(b); err != nil {
		return err
	}
	b.traffic = cmpOr(b.traffic, newToken())
	if ps.Kind == pauseKindMemory {
		// The server that froze it is gone, and its processes with it.
		b.pauseNote = "the server that held the frozen sandbox stopped; its checkpoint is kept"
	}
	if ps.Snapshot != "" {
		b.snapshot = filepath.Join(s.o.StateDir, ps.Snapshot)
	}
	b.spec = withAccount(s.specOf(tpl.doc))
	if err := s.applyTemplate(ctx, tpl, &b.spec); err != nil {
		return err
	}
	if err := b.spec.Validate(); err != nil {
		return err
	}
	b.events = s.newEventLog(ctx, b, true)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.boxes[b.id] = b
	return nil
}

// takeOver closes running record r as lost if its server's lease ran
// out: the store's clock decides, through AcquireLease.
func (s *Server) takeOver(ctx context.Context, r store.Run) {
	end := s.beginTakeover(ctx, r.ID)
	if end == nil {
		return
	}
	defer end()
	l, err := s.o.Store.AcquireLease(ctx, r.ID, s.owner, s.leaseTTL())
	switch {
	case errors.Is(err, store.ErrLeased), errors.Is(err, store.ErrFinal):
		return // alive elsewhere, or closed meanwhile
	case err != nil:
		s.log.Warn("e2b: lease a sandbox record to close it", "run_id", r.ID, "err", err)
		return
	}
	if s.adopt(ctx, r, l.Token) {
		return // reachable from here: it goes on, this server's now
	}
	s.closeLost(ctx, r, "its server stopped renewing its lease")
}

// beginTakeover registers a takeover of record runID by this server and
// returns its end, to call once the sandbox is served here or given up;
// or, when another goroutine of this server (the sweep, a request) is
// taking it over already, waits for that one, whose outcome is this
// one's, and returns nil.
func (s *Server) beginTakeover(ctx context.Context, runID string) (end func()) {
	s.mu.Lock()
	if ch, ok := s.takeovers[runID]; ok {
		s.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
		}
		return nil
	}
	if s.takeovers == nil {
		s.takeovers = map[string]chan struct{}{}
	}
	done := make(chan struct{})
	s.takeovers[runID] = done
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.takeovers, runID)
		s.mu.Unlock()
		close(done)
	}
}

// awaitTakeover waits while this server takes record runID over: its
// lease is this server's from the acquisition on, but its sandbox is
// served here only once attached, and a request in between would find
// neither a sandbox here nor another owner to relay to (a 404).
func (s *Server) awaitTakeover(ctx context.Context, runID string) {
	s.mu.Lock()
	ch := s.takeovers[runID]
	s.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
		}
	}
}

// closeLost closes running record r, whose sandbox died with its server,
// and settles its debits.
func (s *Server) closeLost(ctx context.Context, r store.Run, reason string) {
	id := ""
	if evs, err := s.o.Store.Events(ctx, r.ID, 1, 1); err == nil && len(evs) == 1 {
		if p, err := evs[0].Unpack(); err == nil {
			if c, ok := p.(*event.SandboxCreated); ok {
				id = c.SandboxID
			}
		}
	}
	d, err := event.New(event.SandboxLost{Sandbox: id, SandboxID: id, Reason: reason})
	for attempt := 0; err == nil; attempt++ {
		_, _, err = s.o.Store.AppendStatus(ctx, r.ID, r.LastSeq+1, event.StatusRunning, event.StatusFailed, []event.Event{d})
		if !errors.Is(err, store.ErrConflict) || attempt == 3 {
			break
		}
		// A last write of its server landed after the listing.
		var gerr error
		if r, gerr = s.o.Store.GetRun(ctx, r.ID); gerr != nil || r.Status != event.StatusRunning {
			return
		}
	}
	if err != nil {
		s.log.Warn("e2b: close a lost sandbox's record", "run_id", r.ID, "err", err)
		return
	}
	s.log.Info("e2b: closed the record of a sandbox lost with its server", "run_id", r.ID, "sandbox_id", id)
	s.removePaused(r.ID)
	if err := s.settle(ctx, r); err != nil {
		s.log.Warn("e2b: settle a lost sandbox's debits", "run_id", r.ID, "err", err)
	}
}

// sweep closes the records other servers left running whose leases ran
// out, and those an earlier life of this one left, so no record shows a
// sandbox that no longer exists.
func (s *Server) sweep(ctx context.Context) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return // a server on its way out judges no one else's records
	}
	recs, err := s.sandboxRecords(ctx, event.StatusRunning)
	if err != nil {
		s.log.Warn("e2b: sweep", "err", err)
		return
	}
	s.mu.Lock()
	live := make(map[string]bool, len(s.boxes)+len(s.opening))
	for _, b := range s.boxes {
		live[b.rec.runID] = true
	}
	for id := range s.opening {
		live[id] = true
	}
	s.mu.Unlock()
	for _, r := range recs {
		switch {
		case live[r.ID] || r.LeaseOwner == s.owner:
		case s.ours(r.LeaseOwner):
			s.closeLost(ctx, r, "its server stopped while it ran")
		default:
			s.takeOver(ctx, r)
		}
	}
}

// newRecord returns the appender of record runID, whose next seq is next.
func (s *Server) newRecord(runID string, next int64) *record {
	return &record{runID: runID, st: s.o.Store, next: next, wake: s.wakeFlusher}
}

// last returns the seq of the log's last event this record wrote.
func (r *record) last() int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next - 1
}

// restoreWait is how long Run waits before trying to restore again after
// the store failed.
const restoreWait = 2 * time.Second
