package host

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// filesTar is a delta stream of the files named in files, each of n
// random bytes from its seed.
func filesTar(t *testing.T, n int, files map[string]uint64) *bytes.Reader {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		r := rand.New(rand.NewPCG(files[name], 2))
		body := make([]byte, n)
		for i := range body {
			body[i] = byte(r.Uint32())
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: int64(n), Mode: 0o644, ModTime: time.Unix(1, 0), Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return bytes.NewReader(b.Bytes())
}

// checkpointRun stores an ended run of tenant whose snapshot.taken event
// names the checkpoint c.
func checkpointRun(t *testing.T, st store.Store, tenant string, c checkpoint.Result) string {
	t.Helper()
	ctx := context.Background()
	ev, err := event.New(event.SnapshotTaken{Step: 1, Sandbox: "main", Digest: c.Digest, Format: event.FormatCheckpoint, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	r := store.Run{ID: event.NewRunID(time.Now()), Tenant: tenant, Task: "task", Model: "script:x", Status: event.StatusQueued}
	if _, _, err := st.CreateRunWith(ctx, r, []event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	return r.ID
}

// storedChunks returns the ids of the checkpoint chunks the host keeps:
// the rows of PostgreSQL's chunks table, or the files of
// $AIRLOCK_HOME/chunks, read directly.
func storedChunks(t *testing.T, h *Host) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	if h.cfg.Store != "" {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, h.cfg.Store)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		rows, err := conn.Query(ctx, `SELECT id FROM chunks`)
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			set[id] = true
		}
		return set
	}
	return chunkFiles(t, h.cfg.Home)
}

// chunkFiles is the ids of the chunk files under home (a local store's).
func chunkFiles(t *testing.T, home string) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(home, "chunks"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() && filepath.Base(filepath.Dir(p)) != "tmp" {
			set[filepath.Base(p)] = true
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// ageStored makes every chunk and blob the host keeps older by d: the
// rows' times in PostgreSQL, the files' in the home.
func ageStored(t *testing.T, h *Host, d time.Duration) {
	t.Helper()
	if h.cfg.Store != "" {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, h.cfg.Store)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		for _, q := range []string{`UPDATE chunks SET created_ns = created_ns - $1`, `UPDATE blobs SET created_ns = created_ns - $1`} {
			if _, err := conn.Exec(ctx, q, d.Nanoseconds()); err != nil {
				t.Fatal(err)
			}
		}
		return
	}
	past := time.Now().Add(-d)
	ageFiles(t, filepath.Join(h.cfg.Home, "chunks"), past)
	ageFiles(t, filepath.Join(h.cfg.Home, "blobs", "sha256"), past)
}

// chunkIDs returns the ids of the chunks checkpoint c of tenant refers to.
func chunkIDs(t *testing.T, rs *runSide, tenant string, c checkpoint.Result) []string {
	t.Helper()
	m, err := rs.checkpoints.Manifest(context.Background(), tenant, c.Digest)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, id := range m.ChunkIDs() {
		ids = append(ids, id.String())
	}
	return ids
}

// TestCollectAfterDeletions: on SQLite and on PostgreSQL, a purged run's
// checkpoint manifest goes with the purge, and the next collection
// removes the chunks only it used while a chunk a live run's checkpoint
// shares stays; on PostgreSQL a hold another host's E2B server keeps (a
// snapshot) keeps its checkpoint, until its tenant is deleted.
func TestCollectAfterDeletions(t *testing.T) {
	onBothStores(t, []string{"acme", "beta"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		rs, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		write := func(tenant string, files map[string]uint64) checkpoint.Result {
			t.Helper()
			res, err := rs.checkpoints.Write(ctx, tenant, "", true, filesTar(t, 4<<20, files))
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		purged := write("acme", map[string]uint64{"a-shared": 1, "b-own": 2})
		live := write("acme", map[string]uint64{"a-shared": 1})
		held := write("beta", map[string]uint64{"held": 3})
		purgedRun := checkpointRun(t, st, "acme", purged)
		checkpointRun(t, st, "acme", live)
		shared, own := map[string]bool{}, []string{}
		liveIDs := chunkIDs(t, rs, "acme", live)
		for _, id := range liveIDs {
			shared[id] = true
		}
		for _, id := range chunkIDs(t, rs, "acme", purged) {
			if !shared[id] {
				own = append(own, id)
			}
		}
		if len(own) == 0 || len(own) == len(chunkIDs(t, rs, "acme", purged)) {
			t.Fatalf("the purged run's checkpoint has %d chunks of its own of %d: want some shared, some not", len(own), len(chunkIDs(t, rs, "acme", purged)))
		}
		heldIDs := chunkIDs(t, rs, "beta", held)
		if rs.holds != nil {
			// What another host's E2B server records of a snapshot.
			if err := rs.holds.HoldCheckpoint(ctx, store.CheckpointHold{Holder: "e2b/other/snapshot/snap-1", Tenant: "beta", Digest: held.Digest}); err != nil {
				t.Fatal(err)
			}
		}

		if _, err := h.PurgeRun(ctx, purgedRun, "test"); err != nil {
			t.Fatal(err)
		}
		if ok, err := rs.blobs.Has(ctx, purged.Digest); err != nil || ok {
			t.Errorf("the purged run's manifest is stored after the purge (%v)", err)
		}
		// airlock gc's collection, two hours later (what is stored made
		// older; nothing sleeps).
		ageStored(t, h, 2*time.Hour)
		cs, err := h.CollectCheckpoints(ctx, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		have := storedChunks(t, h)
		for _, id := range own {
			if have[id] {
				t.Errorf("chunk %s, only the purged run's, is stored after the collection", id)
			}
		}
		for _, id := range liveIDs {
			if !have[id] {
				t.Errorf("chunk %s of the live run's checkpoint (shared with the purged one) is gone", id)
			}
		}
		if _, err := rs.checkpoints.Manifest(ctx, "acme", live.Digest); err != nil {
			t.Errorf("the live run's manifest: %v", err)
		}
		wantHeld := rs.holds != nil // SQLite: nothing holds it
		for _, id := range heldIDs {
			if have[id] != wantHeld {
				t.Errorf("chunk %s of the held checkpoint: stored %t, want %t", id, have[id], wantHeld)
			}
		}
		if cs.Expired < len(own) {
			t.Errorf("Collect = %+v, want at least %d chunks expired", cs, len(own))
		}
		if rs.holds == nil {
			return
		}
		// The tenant's deletion deletes its holds; the next collection
		// its chunks.
		rec, err := h.DeleteTenant(ctx, "beta", "test", false)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Counts["checkpoint_holds"] != 1 {
			t.Errorf("the deletion's record counts %d holds, want 1", rec.Counts["checkpoint_holds"])
		}
		if hs, err := rs.holds.ListCheckpointHolds(ctx); err != nil || len(hs) != 0 {
			t.Errorf("holds after the tenant's deletion: %v, %v", hs, err)
		}
		ageStored(t, h, 2*time.Hour)
		if _, err := h.CollectCheckpoints(ctx, time.Hour); err != nil {
			t.Fatal(err)
		}
		have = storedChunks(t, h)
		for _, id := range heldIDs {
			if have[id] {
				t.Errorf("chunk %s of the deleted tenant's held checkpoint is stored after the collection", id)
			}
		}
		for _, id := range liveIDs {
			if !have[id] {
				t.Errorf("chunk %s of the live run's checkpoint is gone", id)
			}
		}
	})
}

// twoHostsShared is two hosts on one PostgreSQL with the tenant acme: the
// first and its run side, the second's run side, and the database's URL.
func twoHostsShared(t *testing.T) (*Host, *runSide, *runSide, string) {
	t.Helper()
	url := postgresURL(t)
	open := func() (*Host, *runSide) {
		t.Helper()
		h, err := New(Config{Home: t.TempDir(), Store: url})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		rs, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		return h, rs
	}
	a, ra := open()
	_, rb := open()
	if _, err := ra.store.CreateTenant(context.Background(), "acme"); err != nil {
		t.Fatal(err)
	}
	return a, ra, rb, url
}

// TestCollectSharedRace: two hosts on one PostgreSQL; while host A's
// collection marks (its roots listed, nothing swept yet), host B writes
// a checkpoint of new content and one of the content of an old
// unreferenced checkpoint, neither recorded yet (their runs' events come
// after the write). Everything B stored or found after A's cut survives
// A's sweep, the old checkpoint's chunks with it; a collection after B's
// writes, with B's checkpoint recorded, removes only what nothing names.
func TestCollectSharedRace(t *testing.T) {
	ctx := context.Background()
	a, ra, rb, _ := twoHostsShared(t)
	write := func(rs *runSide, files map[string]uint64) checkpoint.Result {
		t.Helper()
		res, err := rs.checkpoints.Write(ctx, "acme", "", true, filesTar(t, 2<<20, files))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	// An old checkpoint nothing names (a run purged long ago), and one
	// that will stay unnamed.
	old := write(ra, map[string]uint64{"old": 1})
	orphan := write(ra, map[string]uint64{"orphan": 2})
	oldIDs, orphanIDs := chunkIDs(t, ra, "acme", old), chunkIDs(t, ra, "acme", orphan)
	cut := time.Now()
	var fresh, again checkpoint.Result
	roots := func(ctx context.Context) ([]checkpoint.Root, error) {
		rs, err := a.liveCheckpoints(ra)(ctx)
		// B writes between A's mark and A's sweep.
		fresh = write(rb, map[string]uint64{"fresh": 3})
		again = write(rb, map[string]uint64{"old": 1})
		return rs, err
	}
	st, err := ra.checkpoints.Collect(ctx, cut, roots)
	if err != nil {
		t.Fatal(err)
	}
	have := storedChunks(t, a)
	for _, c := range []struct {
		what string
		ids  []string
		kept bool
	}{
		{"B's new checkpoint's", chunkIDs(t, rb, "acme", fresh), true},
		{"the old checkpoint's, found again by B,", oldIDs, true},
		{"the orphan's", orphanIDs, false},
	} {
		for _, id := range c.ids {
			if have[id] != c.kept {
				t.Errorf("%s chunk %s: stored %t after A's collection, want %t", c.what, id, have[id], c.kept)
			}
		}
	}
	for _, d := range []string{fresh.Digest, again.Digest} {
		if _, err := rb.checkpoints.Manifest(ctx, "acme", d); err != nil {
			t.Errorf("manifest %s, written by B during A's collection: %v", d, err)
		}
	}
	if st.Expired != len(orphanIDs) {
		t.Errorf("Collect = %+v, want the orphan's %d chunks expired", st, len(orphanIDs))
	}
	// B's run records its new checkpoint; the old content's is not.
	checkpointRun(t, rb.store, "acme", fresh)
	if _, err := ra.checkpoints.Collect(ctx, time.Now(), a.liveCheckpoints(ra)); err != nil {
		t.Fatal(err)
	}
	have = storedChunks(t, a)
	for _, id := range chunkIDs(t, rb, "acme", fresh) {
		if !have[id] {
			t.Errorf("chunk %s of B's recorded checkpoint is gone", id)
		}
	}
	for _, id := range oldIDs {
		if have[id] {
			t.Errorf("chunk %s of the old checkpoint, named by nothing, stays", id)
		}
	}
}

// TestCollectSharedRaceChunks: host B's write of an old, unreferenced
// checkpoint's content has found (and marked) its chunks but not yet
// written its manifest when host A's collection runs, cut before B's
// write: every chunk B found survives, so B's checkpoint restores whole.
func TestCollectSharedRaceChunks(t *testing.T) {
	ctx := context.Background()
	a, ra, rb, url := twoHostsShared(t)
	const size = 4 << 20
	old, err := ra.checkpoints.Write(ctx, "acme", "", true, filesTar(t, size, map[string]uint64{"old": 1}))
	if err != nil {
		t.Fatal(err)
	}
	oldIDs := chunkIDs(t, ra, "acme", old)
	cut := time.Now()

	// B's stream: the old file, then (once A has collected) one more.
	whole := filesTar(t, size, map[string]uint64{"old": 1, "z-more": 2})
	all := make([]byte, whole.Len())
	if _, err := whole.Read(all); err != nil {
		t.Fatal(err)
	}
	split := 512 + size // the old file's header and data; PAX adds none for these names
	pr, pw := io.Pipe()
	release := make(chan struct{})
	go func() {
		if _, err := pw.Write(all[:split]); err != nil {
			return
		}
		<-release
		_, _ = pw.Write(all[split:])
		pw.Close()
	}()
	type result struct {
		res checkpoint.Result
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := rb.checkpoints.Write(ctx, "acme", "", true, pr)
		done <- result{res, err}
	}()
	// Wait until B has found some of the old chunks (their rows marked
	// after the cut): a state of the database, not a time.
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	found := map[string]bool{}
	for deadline := time.Now().Add(2 * time.Minute); len(found) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			close(release)
			t.Fatal("B's write never marked any of the old checkpoint's chunks used (a hang guard, not a timing)")
		}
		rows, err := conn.Query(ctx, `SELECT id FROM chunks WHERE id = ANY($1) AND created_ns > $2`, oldIDs, cut.UnixNano())
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			found[id] = true
		}
	}
	st, err := ra.checkpoints.Collect(ctx, cut, a.liveCheckpoints(ra))
	if err != nil {
		t.Fatal(err)
	}
	have := storedChunks(t, a)
	for id := range found {
		if !have[id] {
			t.Errorf("chunk %s, found by B's write after the cut, was removed by A's collection", id)
		}
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	have = storedChunks(t, a)
	for _, id := range chunkIDs(t, rb, "acme", r.res) {
		if !have[id] {
			t.Errorf("chunk %s of B's checkpoint is missing", id)
		}
	}
	t.Logf("A's collection: %+v; B had found %d of the old checkpoint's %d chunks", st, len(found), len(oldIDs))
}
