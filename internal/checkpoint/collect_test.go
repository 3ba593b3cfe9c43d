package checkpoint

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// randomBody returns n bytes that do not compress and that no other seed
// gives, so a file of them is cut into chunks of its own.
func randomBody(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return string(b)
}

// chunkSet lists the chunks of the chain ending in digest.
func chunkSet(t *testing.T, s *testStore, tenant, digest string) map[chunk.ID]bool {
	t.Helper()
	set := map[chunk.ID]bool{}
	for d := digest; d != ""; {
		m, err := s.Manifest(context.Background(), tenant, d)
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range m.ChunkIDs() {
			set[id] = true
		}
		if m.Full {
			break
		}
		d = m.Parent
	}
	return set
}

func storedChunks(t *testing.T, s *testStore) map[chunk.ID]bool {
	t.Helper()
	set := map[chunk.ID]bool{}
	for id, err := range s.Store.chunks.IDs(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		set[id] = true
	}
	return set
}

func rootsOf(rs ...Root) func(context.Context) ([]Root, error) {
	return func(context.Context) ([]Root, error) { return rs, nil }
}

// TestCollect runs the collection cases on each chunk backend (the
// directory and PostgreSQL's table): Collect relies on the backends' IDs,
// Has and Expire, which chunktest checks one by one; here the whole mark
// and sweep does.
func TestCollect(t *testing.T) {
	runOnBackends(t, []storeCase{
		{"Collect", testCollect},
		{"Grace", testCollectGrace},
		{"KilledWrite", testCollectKilledWrite},
		{"BrokenRoot", testCollectBrokenRoot},
	})
}

// testCollect: the chunks of a checkpoint no root names (a deleted run's)
// go; those a live chain refers to stay, shared ones too, and the live
// checkpoints restore as they did.
func testCollect(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	s := open(t)
	shared := randomBody(1, 6<<20)
	// Run A: a full checkpoint and a step; run B, of the same tenant,
	// shares a large file with it.
	a0 := write(t, s, "acme", "", true, tarStream(t, reg("a", randomBody(2, 3<<20)), reg("shared", shared)))
	a1 := write(t, s, "acme", a0.Digest, false, tarStream(t, reg("step", randomBody(3, 3<<20))))
	b0 := write(t, s, "acme", "", true, tarStream(t, reg("b", randomBody(4, 3<<20)), reg("shared", shared)))
	// Another tenant's checkpoint of the same files: other chunks.
	o0 := write(t, s, "other", "", true, tarStream(t, reg("a", randomBody(2, 3<<20)), reg("shared", shared)))
	aChunks, bChunks := chunkSet(t, s, "acme", a1.Digest), chunkSet(t, s, "acme", b0.Digest)
	var onlyA, both []chunk.ID
	for id := range aChunks {
		if bChunks[id] {
			both = append(both, id)
		} else {
			onlyA = append(onlyA, id)
		}
	}
	if len(onlyA) == 0 || len(both) == 0 {
		t.Fatalf("runs A and B share %d chunks, A has %d of its own: want some of each", len(both), len(onlyA))
	}
	bTree, oTree := restoreTar(t, s, "acme", b0.Digest), restoreTar(t, s, "other", o0.Digest)
	before := time.Now()

	// Run A is gone: B and the other tenant's checkpoint are the roots.
	st, err := s.Collect(ctx, before, rootsOf(Root{"acme", b0.Digest}, Root{"other", o0.Digest}))
	if err != nil {
		t.Fatalf("Collect = %v", err)
	}
	after := storedChunks(t, s)
	for _, id := range onlyA {
		if after[id] {
			t.Errorf("chunk %s of the deleted run only survived", id)
		}
	}
	for id := range bChunks {
		if !after[id] {
			t.Errorf("chunk %s of the live run was collected", id)
		}
	}
	if st.Expired != len(onlyA) || st.Roots != 2 || st.Manifests != 2 {
		t.Errorf("Collect = %+v; want %d expired, 2 roots, 2 manifests", st, len(onlyA))
	}
	if got := restoreTar(t, s, "acme", b0.Digest); !slices.Equal(got, bTree) {
		t.Errorf("the live run's checkpoint restores as %v after Collect, %v before", got, bTree)
	}
	if got := restoreTar(t, s, "other", o0.Digest); !slices.Equal(got, oTree) {
		t.Errorf("the other tenant's checkpoint restores as %v after Collect, %v before", got, oTree)
	}

	// Nothing is left to collect.
	if st, err := s.Collect(ctx, time.Now(), rootsOf(Root{"acme", b0.Digest}, Root{"other", o0.Digest})); err != nil || st.Expired != 0 {
		t.Errorf("second Collect = %+v, %v; want nothing expired", st, err)
	}
}

// testCollectGrace: a checkpoint written after the cut, whose event is
// not appended yet (so no root names it), keeps its chunks: those it
// stored new and those it found stored already, which belonged to a
// checkpoint that is gone. The write here runs while the collection lists
// its roots, where a real one races it.
func testCollectGrace(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	s := open(t)
	tree := []tent{reg("old", randomBody(5, 3<<20)), reg("x", randomBody(6, 2<<20))}
	gone := write(t, s, "acme", "", true, tarStream(t, tree...))
	goneChunks := chunkSet(t, s, "acme", gone.Digest) // its manifest goes too
	before := time.Now()
	var racing Result
	st, err := s.Collect(ctx, before, func(context.Context) ([]Root, error) {
		// The same tree again (every chunk found stored), plus a file.
		racing = write(t, s, "acme", "", true, tarStream(t, append(slices.Clone(tree), reg("y", randomBody(7, 2<<20)))...))
		return nil, nil
	})
	if err != nil {
		t.Fatalf("Collect = %v", err)
	}
	if racing.Stats.SharedChunks == 0 {
		t.Fatalf("the racing write found no chunk stored (%+v): the case tests nothing", racing.Stats)
	}
	// What goes is the gone checkpoint's chunks the racing one does not
	// use (the last, cut where its stream ended), nothing else.
	racingChunks := chunkSet(t, s, "acme", racing.Digest)
	stored := storedChunks(t, s)
	unused := 0
	for id := range goneChunks {
		if !racingChunks[id] {
			unused++
		}
	}
	for id := range racingChunks {
		if !stored[id] {
			t.Errorf("chunk %s of the checkpoint written during the collection was collected", id)
		}
	}
	if st.Expired != unused {
		t.Errorf("Collect expired %d chunks, want the %d only the gone checkpoint used", st.Expired, unused)
	}
	restoreTar(t, s, "acme", racing.Digest)

	// Once the racing checkpoint is recorded, and the other is gone, a
	// later collection with a later cut takes nothing it needs.
	if _, err := s.Collect(ctx, time.Now(), rootsOf(Root{"acme", racing.Digest})); err != nil {
		t.Fatal(err)
	}
	restoreTar(t, s, "acme", racing.Digest)
}

// testCollectKilledWrite: the chunks of a write killed before its event
// (no root names it) go once they are older than the cut.
func testCollectKilledWrite(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	s := open(t)
	live := write(t, s, "acme", "", true, tarStream(t, reg("kept", randomBody(8, 2<<20))))
	killed := write(t, s, "acme", "", true, tarStream(t, reg("orphan", randomBody(9, 3<<20))))
	orphans := chunkSet(t, s, "acme", killed.Digest)
	// A cut before the write: kept (it may still be writing).
	if st, err := s.Collect(ctx, time.Now().Add(-time.Hour), rootsOf(Root{"acme", live.Digest})); err != nil || st.Expired != 0 {
		t.Fatalf("Collect within the grace period = %+v, %v; want nothing expired", st, err)
	}
	st, err := s.Collect(ctx, time.Now(), rootsOf(Root{"acme", live.Digest}))
	if err != nil {
		t.Fatal(err)
	}
	if st.Expired != len(orphans) {
		t.Errorf("Collect after the grace period expired %d chunks, want the killed write's %d", st.Expired, len(orphans))
	}
	restoreTar(t, s, "acme", live.Digest)
}

// testCollectBrokenRoot: a root that does not load (missing, another
// tenant's) fails the collection, and nothing is removed.
func testCollectBrokenRoot(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	for _, tt := range []struct {
		name string
		root func(digest string) Root
		is   error
	}{
		{"missing", func(string) Root { return Root{"acme", "sha256:" + strings.Repeat("0", 64)} }, nil},
		{"another tenant's", func(d string) Root { return Root{"other", d} }, ErrTenant},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := open(t)
			c := write(t, s, "acme", "", true, tarStream(t, reg("f", randomBody(10, 2<<20))))
			stored := storedChunks(t, s)
			_, err := s.Collect(ctx, time.Now(), rootsOf(tt.root(c.Digest)))
			if err == nil || (tt.is != nil && !errors.Is(err, tt.is)) {
				t.Fatalf("Collect = %v, want an error (%v)", err, tt.is)
			}
			if got := storedChunks(t, s); len(got) != len(stored) {
				t.Errorf("a failed Collect left %d of %d chunks", len(got), len(stored))
			}
		})
	}
}
