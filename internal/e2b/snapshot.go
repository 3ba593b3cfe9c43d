package e2b

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/interp"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	envtemplate "github.com/airlockrun/airlock/internal/template"
)

// A snapshot is a tenant's saved workspace: a checkpoint of a sandbox
// taken while it runs on (or its paused one), with the sandbox's policy,
// from which create boots new sandboxes (templateID = the snapshot's id or
// name). The checkpoint is in the host's checkpoint store; the snapshot's
// own record is a small JSON file in StateDir/snapshots, one per
// snapshot, loaded when the Server starts, or, on a store several hosts
// share, a row of the store (Options.Snapshots; below). Why there and not in the run
// store: a snapshot outlives the sandbox it was taken from (whose record
// is then final), is deleted, and is looked up by id and name on every
// create; the run store has no mutable, deletable rows for that, and
// StateDir is already what a server's paused sandboxes depend on. The
// sandbox's record logs each snapshot taken of it (a sandbox.snapshot
// operation naming the snapshot and its checkpoint).

// snapshot is one snapshot's record.
type snapshot struct {
	ID         string    `json:"id"`
	Tenant     string    `json:"tenant"`
	Name       string    `json:"name,omitempty"`
	SandboxID  string    `json:"sandbox_id"`
	Checkpoint string    `json:"checkpoint"`
	Created    time.Time `json:"created"`
	// Template, TemplateSource and Policy are the sandbox's: Policy is
	// its stored document, nil for the default policy.
	Template       string          `json:"template"`
	TemplateSource string          `json:"template_source"`
	Policy         json.RawMessage `json:"policy,omitempty"`
	// Env is the stored template the sandbox was made of (its image by
	// digest, environment, working directory, user, start command and
	// readiness check; nil for a policy's sandbox), EnvVersion its
	// version: a sandbox created from the snapshot boots that image, not
	// the host's root, and is prepared as the template says.
	Env        *envtemplate.Template `json:"env_template,omitempty"`
	EnvVersion int64                 `json:"env_template_version,omitempty"`
}

// snapshotIDPrefix starts every snapshot id, so that it reads as one.
const snapshotIDPrefix = "snap-"

// maxSnapshotName bounds a snapshot's name.
const maxSnapshotName = 128

// checkSnapshotName checks a name a client gives a snapshot: 1 to 128
// letters, digits and ._:/- , not the default template's, not shaped
// like a snapshot id.
func checkSnapshotName(n string) error {
	if n == "" || len(n) > maxSnapshotName || strings.Trim(n, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._:/-") != "" {
		return fmt.Errorf("name: 1 to %d letters, digits and ._:/-", maxSnapshotName)
	}
	if n == DefaultTemplate || isSnapshotID(n) {
		return fmt.Errorf("name %q: taken by the default template or shaped like a snapshot id", n)
	}
	return nil
}

// isSnapshotID reports whether n has the shape of a snapshot's id:
// snapshotIDPrefix and 20 lowercase hex digits. Other names that start
// with the prefix (E2B's own tests call theirs snap-test-…) are free.
func isSnapshotID(n string) bool {
	h, ok := strings.CutPrefix(n, snapshotIDPrefix)
	return ok && len(h) == 20 && strings.Trim(h, "0123456789abcdef") == ""
}

func (s *Server) snapshotDir() string { return filepath.Join(s.o.StateDir, "snapshots") }

// loadSnapshots reads the snapshots' records in dir; one that does not
// load is logged and left out (its file stays, for an operator to read).
func loadSnapshots(dir string, log *slog.Logger) (map[string]*snapshot, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("e2b: snapshots: %w", err)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("e2b: snapshots: %w", err)
	}
	out := map[string]*snapshot{}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !strings.HasPrefix(id, snapshotIDPrefix) {
			continue
		}
		sn, err := readSnapshot(filepath.Join(dir, e.Name()))
		if err == nil && sn.ID != id {
			err = errors.New("its id is not its file's name")
		}
		if err != nil {
			log.Error("e2b: a snapshot's record does not load", "file", e.Name(), "err", err)
			continue
		}
		out[id] = sn
	}
	return out, nil
}

// readSnapshot reads and checks one snapshot's record.
func readSnapshot(path string) (*snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return parseSnapshot(b)
}

// parseSnapshot decodes and checks one snapshot's record.
func parseSnapshot(b []byte) (*snapshot, error) {
	if len(b) > maxPausedState {
		return nil, errors.New("too large")
	}
	var sn snapshot
	if err := json.Unmarshal(b, &sn); err != nil {
		return nil, err
	}
	switch {
	case sn.Tenant == "", sn.SandboxID == "":
		return nil, errors.New("no tenant or sandbox")
	case blob.ValidDigest(sn.Checkpoint) != nil:
		return nil, errors.New("malformed checkpoint digest")
	case sn.Name != "" && checkSnapshotName(sn.Name) != nil:
		return nil, errors.New("malformed name")
	}
	return &sn, nil
}

// findSnapshot returns tenant's snapshot whose id or name is ref, or nil;
// another tenant's is as absent as one that never existed.
func (s *Server) findSnapshot(ctx context.Context, tenant, ref string) (*snapshot, error) {
	if ref == "" || ref == DefaultTemplate {
		return nil, nil // no snapshot's name (checkSnapshotName): no query
	}
	if s.o.Snapshots != nil {
		row, err := s.o.Snapshots.GetE2BSnapshot(ctx, tenant, ref)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("e2b: find snapshot: %w", err)
		}
		return snapshotOfRow(row)
	}
	return s.findSnapshotHere(tenant, ref), nil
}

// snapshotOfRow decodes a snapshot's row of the shared store.
func snapshotOfRow(row store.E2BSnapshot) (*snapshot, error) {
	sn, err := parseSnapshot(row.Body)
	if err == nil && (sn.ID != row.ID || sn.Tenant != row.Tenant || sn.Name != row.Name) {
		err = errors.New("its body names another snapshot")
	}
	if err != nil {
		return nil, fmt.Errorf("e2b: snapshot %s: %w", clip(row.ID), err)
	}
	return sn, nil
}

// findSnapshotHere is findSnapshot in this server's StateDir.
func (s *Server) findSnapshotHere(tenant, ref string) *snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sn := s.snaps[ref]; sn != nil {
		if sn.Tenant == tenant {
			return sn
		}
		return nil
	}
	for _, sn := range s.snaps {
		if sn.Tenant == tenant && sn.Name == ref {
			return sn
		}
	}
	return nil
}

// snapshotTemplate is the template of a sandbox created from sn: the
// policy of the sandbox sn was taken from, and the stored template it was
// made of, if any (its image, environment and preparation).
func (s *Server) snapshotTemplate(sn *snapshot) (template, error) {
	tpl := template{
		name: sn.ID, doc: defaultDocument(), source: fmt.Sprintf("snapshot %s of sandbox %s (template %s, %s)", sn.ID, sn.SandboxID, sn.Template, sn.TemplateSource),
		env: sn.Env, version: sn.EnvVersion,
	}
	if sn.Env != nil && sn.EnvVersion == 0 && slices.Equal(sn.Env.Start, interp.Template().Start) {
		// The built-in code interpreter: its files are not in the
		// record (a record read after a restart has none).
		tpl.env = interp.Template()
	}
	if sn.Env != nil && sn.Env.Image != "" && s.o.Images == nil {
		return template{}, &publicError{status: 400, msg: fmt.Sprintf("snapshot %s: this server keeps no images to make its sandboxes of", sn.ID)}
	}
	if len(sn.Policy) > 0 {
		doc, err := policy.Parse(sn.Policy)
		if err != nil {
			return template{}, &publicError{status: 400, msg: fmt.Sprintf("snapshot %s: its policy does not load", sn.ID)}
		}
		if err := s.hostResources(sn.ID, doc); err != nil {
			return template{}, err
		}
		tpl.doc, tpl.raw = doc, sn.Policy
	}
	return tpl, nil
}

// workspaceNow returns the digest of a checkpoint of b's workspace as it
// is: a new one of the running sandbox, which runs on, or the paused
// one's. Preconditions: b.life held.
func (s *Server) workspaceNow(ctx context.Context, b *box) (string, error) {
	b.mu.Lock()
	state, lv, paused := b.state, b.live, b.paused
	b.mu.Unlock()
	switch {
	case state == stateRunning && lv != nil:
		return s.checkpoint(ctx, b, lv)
	case state == statePaused && paused != "":
		return paused, nil
	case state == statePaused:
		return "", &publicError{status: 409, msg: "the sandbox was paused before this server kept checkpoints: resume it, then snapshot it"}
	}
	return "", errNoSandbox
}

// takeSnapshot keeps b's workspace as tenant's snapshot called name (""
// for none): a checkpoint of the running sandbox, which runs on, or the
// paused one's checkpoint.
func (s *Server) takeSnapshot(ctx context.Context, b *box, name string) (*snapshot, error) {
	b.life.Lock()
	defer b.life.Unlock()
	digest, err := s.workspaceNow(ctx, b)
	if err != nil {
		return nil, err
	}
	sn := &snapshot{
		ID: snapshotIDPrefix + randomHex(10), Tenant: b.tenant, Name: name, SandboxID: b.id, Checkpoint: digest,
		Created: s.now().UTC(), Template: b.template.name, TemplateSource: b.template.source, Policy: b.template.raw,
		Env: b.template.env, EnvVersion: b.template.version,
	}
	if s.o.Snapshots != nil {
		if err := s.putShared(ctx, sn); err != nil {
			return nil, err
		}
		return sn, nil
	}
	s.mu.Lock()
	for _, o := range s.snaps {
		if name != "" && o.Tenant == b.tenant && o.Name == name {
			s.mu.Unlock()
			return nil, &publicError{status: 409, msg: fmt.Sprintf("you have a snapshot called %q (%s); delete it first", name, o.ID)}
		}
	}
	s.snaps[sn.ID] = sn
	s.mu.Unlock()
	raw, err := json.Marshal(sn)
	if err == nil {
		err = writeFileAtomic(filepath.Join(s.snapshotDir(), sn.ID+".json"), raw)
	}
	if err == nil {
		err = s.hold(ctx, s.snapshotHolder(sn.ID), sn.Tenant, sn.Checkpoint)
		if err != nil {
			_ = os.Remove(filepath.Join(s.snapshotDir(), sn.ID+".json"))
		}
	}
	if err != nil {
		s.mu.Lock()
		delete(s.snaps, sn.ID)
		s.mu.Unlock()
		return nil, fmt.Errorf("e2b: snapshot %s: keep its record: %w", b.id, err)
	}
	return sn, nil
}

// snapshotJSON is a snapshot as createSnapshot and listSnapshots answer
// it (SnapshotInfo, and what airlock adds).
type snapshotJSON struct {
	SnapshotID string    `json:"snapshotID"`
	Names      []string  `json:"names"`
	SandboxID  string    `json:"sandboxID"`
	CreatedAt  time.Time `json:"createdAt"`
}

func snapshotJSONOf(sn *snapshot) snapshotJSON {
	names := []string{}
	if sn.Name != "" {
		names = append(names, sn.Name)
	}
	return snapshotJSON{SnapshotID: sn.ID, Names: names, SandboxID: sn.SandboxID, CreatedAt: sn.Created}
}

func (s *Server) handleCreateSnapshot(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	var req struct {
		Name string `json:"name"`
	}
	if err := readBody(r, &req); err != nil {
		return err
	}
	if req.Name != "" {
		if err := checkSnapshotName(req.Name); err != nil {
			return &publicError{status: 400, msg: err.Error()}
		}
	}
	b := s.lookup(c.p.Tenant, r.PathValue("id"))
	if b == nil {
		return errNoSandbox
	}
	if s.o.Checkpoints == nil {
		return errNoCheckpoints
	}
	sn, err := s.takeSnapshot(ctx, b, req.Name)
	if err != nil {
		return err
	}
	s.audit.record(Record{
		Tenant: b.tenant, KeyID: c.p.KeyID, Sandbox: b.id, Op: "sandbox.snapshot", Outcome: "ok",
		Detail: clipDetail(fmt.Sprintf("snapshot %s (checkpoint %s)", sn.ID, sn.Checkpoint)),
	})
	writeJSON(w, http.StatusCreated, snapshotJSONOf(sn))
	return nil
}

// handleListSnapshots lists the caller's snapshots, oldest first, paged
// as the sandbox list is; sandboxID and name filter.
func (s *Server) handleListSnapshots(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	q := r.URL.Query()
	limit, err := listLimitParam.Parse(q.Get("limit"))
	if err != nil {
		return &publicError{status: 400, msg: err.Error()}
	}
	var after cursor
	if v := q.Get("nextToken"); v != "" {
		if after, err = parseCursor(v); err != nil {
			return &publicError{status: 400, msg: "nextToken: not a token this server gave"}
		}
	}
	sandboxID, name := q.Get("sandboxID"), q.Get("name")
	all, err := s.tenantSnapshots(ctx, c.p.Tenant)
	if err != nil {
		return err
	}
	var rows []*snapshot
	for _, sn := range all {
		if (sandboxID == "" || sn.SandboxID == sandboxID) && (name == "" || sn.Name == name) {
			rows = append(rows, sn)
		}
	}
	order := func(a, b *snapshot) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	}
	slices.SortFunc(rows, order)
	if after.id != "" {
		at := &snapshot{Created: after.started, ID: after.id}
		rows = slices.DeleteFunc(rows, func(sn *snapshot) bool { return order(sn, at) <= 0 })
	}
	if len(rows) > int(limit) {
		rows = rows[:limit]
		last := rows[len(rows)-1]
		w.Header().Set("X-Next-Token", cursor{started: last.Created, id: last.ID}.token())
	}
	out := make([]snapshotJSON, 0, len(rows))
	for _, sn := range rows {
		out = append(out, snapshotJSONOf(sn))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// errNoSnapshot answers a snapshot id the caller may not see.
var errNoSnapshot = &publicError{status: 404, msg: "snapshot not found"}

// handleDeleteSnapshot deletes the caller's snapshot (by id or name).
// Its checkpoint stays in the store, shared with whatever else refers to
// its chunks; sandboxes created from it keep their workspaces.
func (s *Server) handleDeleteSnapshot(ctx context.Context, w http.ResponseWriter, r *http.Request, c caller) error {
	sn, err := s.findSnapshot(ctx, c.p.Tenant, r.PathValue("templateID"))
	if err != nil {
		return err
	}
	if sn == nil {
		return errNoSnapshot
	}
	if s.o.Snapshots != nil {
		err := s.o.Snapshots.DeleteE2BSnapshot(ctx, sn.Tenant, sn.ID)
		if errors.Is(err, store.ErrNotFound) {
			return errNoSnapshot // another replica deleted it a moment ago
		}
		if err != nil {
			return fmt.Errorf("e2b: delete snapshot %s: %w", sn.ID, err)
		}
		s.release(ctx, sharedSnapshotHolder(sn.ID))
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	err = os.Remove(filepath.Join(s.snapshotDir(), sn.ID+".json"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("e2b: delete snapshot %s: %w", sn.ID, err)
	}
	s.mu.Lock()
	delete(s.snaps, sn.ID)
	s.mu.Unlock()
	s.release(ctx, s.snapshotHolder(sn.ID))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// On a store several hosts share (Options.Snapshots: PostgreSQL), the
// snapshots' records are rows of the store, not files of StateDir: every
// replica of the service lists, finds, deletes and creates sandboxes from
// every snapshot, whichever replica took it. Each one's checkpoint is
// held under a holder no server owns (sharedSnapshotHolder), released by
// whichever replica deletes it; the tenant's deletion deletes both rows.
// A server that kept snapshots as files before moves them into the store
// at its start (moveSnapshots).

// sharedSnapshotHolder is the hold of snapshot id's checkpoint on a
// shared store.
func sharedSnapshotHolder(id string) string { return "e2b/snapshot/" + id }

// putShared records sn in the shared store, and its checkpoint's hold.
func (s *Server) putShared(ctx context.Context, sn *snapshot) error {
	raw, err := json.Marshal(sn)
	if err != nil {
		return err
	}
	// The hold first: a row is never without its checkpoint's hold.
	if err := s.hold(ctx, sharedSnapshotHolder(sn.ID), sn.Tenant, sn.Checkpoint); err != nil {
		return fmt.Errorf("e2b: snapshot %s: %w", sn.SandboxID, err)
	}
	err = s.o.Snapshots.PutE2BSnapshot(ctx, store.E2BSnapshot{ID: sn.ID, Tenant: sn.Tenant, Name: sn.Name, Created: sn.Created, Body: raw})
	if err == nil {
		return nil
	}
	s.release(ctx, sharedSnapshotHolder(sn.ID))
	if errors.Is(err, store.ErrExists) && sn.Name != "" {
		return &publicError{status: 409, msg: fmt.Sprintf("you have a snapshot called %q; delete it first", sn.Name)}
	}
	return fmt.Errorf("e2b: snapshot %s: keep its record: %w", sn.SandboxID, err)
}

// tenantSnapshots returns every snapshot of tenant.
func (s *Server) tenantSnapshots(ctx context.Context, tenant string) ([]*snapshot, error) {
	if s.o.Snapshots == nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		var out []*snapshot
		for _, sn := range s.snaps {
			if sn.Tenant == tenant {
				out = append(out, sn)
			}
		}
		return out, nil
	}
	rows, err := s.o.Snapshots.ListE2BSnapshots(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("e2b: list snapshots: %w", err)
	}
	out := make([]*snapshot, 0, len(rows))
	for _, row := range rows {
		sn, err := snapshotOfRow(row)
		if err != nil {
			s.log.Error("e2b: a snapshot's record does not load", "snapshot_id", row.ID, "err", err)
			continue
		}
		out = append(out, sn)
	}
	return out, nil
}

// moveSnapshots moves the snapshots this server kept as files of StateDir
// into the shared store (Options.Snapshots), each with its checkpoint's
// shared hold, and removes their files (whose holds the next syncHolds
// drops). One whose id is in the store already was moved before; one
// whose name its tenant has taken since keeps its id alone.
func (s *Server) moveSnapshots(ctx context.Context) error {
	if s.o.Snapshots == nil {
		return nil
	}
	s.mu.Lock()
	snaps := make([]*snapshot, 0, len(s.snaps))
	for _, sn := range s.snaps {
		snaps = append(snaps, sn)
	}
	s.mu.Unlock()
	for _, sn := range snaps {
		_, err := s.o.Snapshots.GetE2BSnapshot(ctx, sn.Tenant, sn.ID)
		switch {
		case errors.Is(err, store.ErrNotFound):
			err = s.putShared(ctx, sn)
			var pe *publicError
			if errors.As(err, &pe) {
				moved := *sn
				moved.Name = ""
				s.log.Warn("e2b: a snapshot's name is taken in the shared store: moved without it", "snapshot_id", sn.ID, "name", sn.Name)
				err = s.putShared(ctx, &moved)
			}
		case err == nil:
			err = s.hold(ctx, sharedSnapshotHolder(sn.ID), sn.Tenant, sn.Checkpoint)
		}
		if err != nil {
			return fmt.Errorf("e2b: move snapshot %s into the shared store: %w", sn.ID, err)
		}
		if err := os.Remove(filepath.Join(s.snapshotDir(), sn.ID+".json")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("e2b: move snapshot %s into the shared store: %w", sn.ID, err)
		}
		s.mu.Lock()
		delete(s.snaps, sn.ID)
		s.mu.Unlock()
	}
	return nil
}
