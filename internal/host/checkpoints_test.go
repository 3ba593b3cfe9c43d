package host

import (
	"bytes"
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
)

// oneFileTar is a delta stream of one file of n random bytes from seed.
func oneFileTar(t *testing.T, name string, seed uint64, n int) *bytes.Reader {
	t.Helper()
	return filesTar(t, n, map[string]uint64{name: seed})
}

// TestCollectCheckpoints: the host's collection keeps the chunks of the
// checkpoints its runs' events, its paused E2B sandboxes and its E2B
// snapshots name, and removes those of a deleted snapshot and of a write
// killed before its event, once older than the grace period.
func TestCollectCheckpoints(t *testing.T) {
	ctx := context.Background()
	home := t.TempDir()
	h, err := New(Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	rs, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	write := func(tenant, name string, seed uint64) checkpoint.Result {
		t.Helper()
		res, err := rs.checkpoints.Write(ctx, tenant, "", true, oneFileTar(t, name, seed, 3<<20))
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	inRun, paused, snapped, deleted, killed := write("acme", "run", 1), write("acme", "paused", 2), write("beta", "snap", 3), write("beta", "gone", 4), write("acme", "killed", 5)

	// A run whose event names its checkpoint; a paused E2B sandbox (a
	// record of tenant acme); two E2B snapshots, one deleted since.
	runID := event.NewRunID(time.Now())
	if _, err := rs.store.CreateRun(ctx, store.Run{ID: runID, Tenant: "acme", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	ev, err := event.New(event.SnapshotTaken{Step: 1, Sandbox: "main", Digest: inRun.Digest, Format: event.FormatCheckpoint, Full: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rs.store.Append(ctx, runID, 1, []event.Event{ev}); err != nil {
		t.Fatal(err)
	}
	pausedRun := event.NewRunID(time.Now())
	if _, err := rs.store.CreateRun(ctx, store.Run{ID: pausedRun, Tenant: "acme", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(home, sandboxcli.E2BStateDir)
	writeJSON := func(path string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(filepath.Join(state, "paused-"+pausedRun+".json"), map[string]string{"sandbox_id": "sbx1", "token": "tok", "checkpoint": paused.Digest})
	writeJSON(filepath.Join(state, "snapshots", "snap-1.json"), map[string]string{"id": "snap-1", "tenant": "beta", "sandbox_id": "sbx2", "checkpoint": snapped.Digest})
	gone := filepath.Join(state, "snapshots", "snap-2.json")
	writeJSON(gone, map[string]string{"id": "snap-2", "tenant": "beta", "sandbox_id": "sbx3", "checkpoint": deleted.Digest})
	if err := os.Remove(gone); err != nil {
		t.Fatal(err)
	}

	chunksOf := func(tenant string, c checkpoint.Result) []string {
		t.Helper()
		m, err := rs.checkpoints.Manifest(ctx, tenant, c.Digest)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, id := range m.ChunkIDs() {
			ids = append(ids, id.String())
		}
		return ids
	}

	// Within the grace period nothing goes, whatever refers to it.
	if st, err := h.CollectCheckpoints(ctx, time.Hour); err != nil || st.Expired != 0 || st.Roots != 3 {
		t.Fatalf("CollectCheckpoints within the grace period = %+v, %v; want 3 roots, nothing expired", st, err)
	}
	// What each checkpoint refers to, read before its manifest may go.
	cases := []struct {
		what   string
		tenant string
		res    checkpoint.Result
		kept   bool
		chunks []string
	}{
		{"a run's", "acme", inRun, true, nil},
		{"a paused sandbox's", "acme", paused, true, nil},
		{"a snapshot's", "beta", snapped, true, nil},
		{"a deleted snapshot's", "beta", deleted, false, nil},
		{"a killed write's", "acme", killed, false, nil},
	}
	for i := range cases {
		cases[i].chunks = chunksOf(cases[i].tenant, cases[i].res)
	}
	// Two hours later (the chunks and the manifests made older; nothing
	// sleeps).
	past := time.Now().Add(-2 * time.Hour)
	for name := range chunkFiles(t, home) {
		if err := os.Chtimes(filepath.Join(home, "chunks", name[:2], name), past, past); err != nil {
			t.Fatal(err)
		}
	}
	ageFiles(t, filepath.Join(home, "blobs", "sha256"), past)
	st, err := h.CollectCheckpoints(ctx, time.Hour)
	if err != nil {
		t.Fatalf("CollectCheckpoints = %v", err)
	}
	have := chunkFiles(t, home)
	for _, c := range cases {
		for _, id := range c.chunks {
			if have[id] != c.kept {
				t.Errorf("%s chunk %s: stored %t after the collection, want %t", c.what, id, have[id], c.kept)
			}
		}
		if ok, err := rs.blobs.Has(ctx, c.res.Digest); err != nil || ok != c.kept {
			t.Errorf("%s manifest: stored %t (%v) after the collection, want %t", c.what, ok, err, c.kept)
		}
	}
	if st.Roots != 3 || st.Expired == 0 {
		t.Errorf("CollectCheckpoints = %+v, want 3 roots and some chunks expired", st)
	}
	if _, err := h.CollectCheckpoints(ctx, time.Minute); err == nil {
		t.Error("CollectCheckpoints with a grace period of a minute = nil, want an error")
	}
}

// ageFiles sets the times of every file under dir to at.
func ageFiles(t *testing.T, dir string, at time.Time) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		return os.Chtimes(p, at, at)
	})
	if err != nil {
		t.Fatal(err)
	}
}
