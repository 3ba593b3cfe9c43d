package chunk_test

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/chunk"
	"github.com/airlockrun/airlock/internal/store/chunk/chunktest"
)

func newDir(t testing.TB) *chunk.Dir {
	t.Helper()
	d, err := chunk.NewDir(filepath.Join(t.TempDir(), "chunks"))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestDir(t *testing.T) {
	chunktest.Run(t, func(t *testing.T) chunk.Backend { return newDir(t) })
}

// chunkPath returns where d keeps id, its fan-out directory made.
func chunkPath(t *testing.T, d *chunk.Dir, id chunk.ID) string {
	t.Helper()
	fan := filepath.Join(d.Path(), id.String()[:2])
	if err := os.MkdirAll(fan, 0o700); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(fan, id.String())
}

// TestDirEmptyFileIsAbsent: a chunk file left empty by a crash before Sync
// (see Dir) is not a chunk: Has says so, Put writes it again, and Get
// reports it as corrupt rather than as content.
func TestDirEmptyFileIsAbsent(t *testing.T) {
	ctx := context.Background()
	d := newDir(t)
	s, err := chunk.NewStore(d)
	if err != nil {
		t.Fatal(err)
	}
	key := chunk.TenantKey("t")
	data := []byte("content")
	id := key.Hasher().Sum(data)
	path := chunkPath(t, d, id)
	if err := os.WriteFile(path, nil, 0o400); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Has(ctx, id); err != nil || ok {
		t.Errorf("Has(empty file) = %v, %v; want false, nil", ok, err)
	}
	if _, err := s.Get(ctx, key, id, nil); !errors.Is(err, chunk.ErrCorrupt) {
		t.Errorf("Get(empty file) = %v, want ErrCorrupt", err)
	}
	if _, err := s.Put(ctx, id, data); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, key, id, nil); err != nil || string(got) != "content" {
		t.Errorf("Get() after Put over the empty file = %q, %v", got, err)
	}
}

// TestDirOversized: a file larger than any chunk is refused as corrupt
// before it is read.
func TestDirOversized(t *testing.T) {
	d := newDir(t)
	id := chunk.TenantKey("t").Hasher().Sum([]byte("x"))
	path := chunkPath(t, d, id)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, chunk.MaxStored+1); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Get(context.Background(), id, nil); !errors.Is(err, chunk.ErrCorrupt) {
		t.Errorf("Get(oversized file) = %v, want ErrCorrupt", err)
	}
}

// TestDirStaleTemps: NewDir removes temporary files older than an hour
// (a crashed Put's) and keeps younger ones (a live Put's in another
// process); strangers in a fan-out directory are not listed as chunks.
func TestDirStaleTemps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "chunks")
	d, err := chunk.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	old, young := filepath.Join(dir, "tmp", "put-old"), filepath.Join(dir, "tmp", "put-young")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "ab"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "ab", "notes.txt"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := chunk.NewDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temp file survived NewDir: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("young temp file removed by NewDir: %v", err)
	}
	for id, err := range d.IDs(context.Background()) {
		t.Errorf("IDs() of a store with no chunks yielded %s, %v", id, err)
	}
}

func TestParseID(t *testing.T) {
	id := chunk.TenantKey("t").Hasher().Sum([]byte("x"))
	if got, err := chunk.ParseID(id.String()); err != nil || got != id {
		t.Errorf("ParseID(%s) = %s, %v", id, got, err)
	}
	bad := []string{"", "00", strings.ToUpper(id.String()), id.String()[:63] + "g", "../" + id.String()[3:], id.String() + "0"}
	for _, s := range bad {
		if _, err := chunk.ParseID(s); err == nil {
			t.Errorf("ParseID(%q) = nil error", s)
		}
	}
}

// TestTenantKey: keys are stable (every host derives the same) and differ
// per tenant, also for names that differ only by what follows.
func TestTenantKey(t *testing.T) {
	data := []byte("x")
	a1, a2 := chunk.TenantKey("a").Hasher().Sum(data), chunk.TenantKey("a").Hasher().Sum(data)
	if a1 != a2 {
		t.Error("TenantKey is not deterministic")
	}
	seen := map[chunk.ID]string{}
	for _, name := range []string{"a", "ab", "a\x00", "", "A"} {
		id := chunk.TenantKey(name).Hasher().Sum(data)
		if other, ok := seen[id]; ok {
			t.Errorf("tenants %q and %q have the same key", name, other)
		}
		seen[id] = name
	}
	if chunk.TenantKey("a").Derive("x") == chunk.TenantKey("a").Derive("y") {
		t.Error("Derive gives the same bytes for two labels")
	}
}

// TestDirInterruptedExpire: a chunk an Expire had moved aside when its
// process stopped (a writer may have found it just before) goes back into
// place when the directory is opened again, however old it is.
func TestDirInterruptedExpire(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "chunks")
	d, err := chunk.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	s, err := chunk.NewStore(d)
	if err != nil {
		t.Fatal(err)
	}
	key := chunk.TenantKey("t")
	data := []byte("moved aside")
	id := key.Hasher().Sum(data)
	if _, err := s.Put(ctx, id, data); err != nil {
		t.Fatal(err)
	}
	h := id.String()
	aside := filepath.Join(dir, "tmp", "expire-"+h)
	if err := os.Rename(filepath.Join(dir, h[:2], h), aside); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(aside, past, past); err != nil {
		t.Fatal(err)
	}
	d, err = chunk.NewDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if s, err = chunk.NewStore(d); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, key, id, nil); err != nil || string(got) != string(data) {
		t.Errorf("Get after reopening = %q, %v; want %q", got, err, data)
	}
}

// BenchmarkDirPutSync: what a first checkpoint asks of the directory, 512
// chunks of 1 MiB put and then synced at once; sync-s is the wait for the
// disk at the end (docs/benchmarks.md: starting each chunk's writeback in
// Put moved that wait into the Puts, for no gain in the sum).
func BenchmarkDirPutSync(b *testing.B) {
	ctx := context.Background()
	const n = 512
	data := make([]byte, 1<<20)
	key := chunk.TenantKey("bench").Hasher()
	var put, sync time.Duration
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		d, err := chunk.NewDir(filepath.Join(b.TempDir(), "chunks"))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		ids := make([]chunk.ID, n)
		t0 := time.Now()
		for j := range ids {
			binary.LittleEndian.PutUint64(data, uint64(i*n+j))
			ids[j] = key.Sum(data)
			if err := d.Put(ctx, ids[j], data); err != nil {
				b.Fatal(err)
			}
		}
		t1 := time.Now()
		if err := d.Sync(ctx, ids); err != nil {
			b.Fatal(err)
		}
		put, sync = put+t1.Sub(t0), sync+time.Since(t1)
	}
	b.ReportMetric(put.Seconds()/float64(b.N), "put-s")
	b.ReportMetric(sync.Seconds()/float64(b.N), "sync-s")
}
