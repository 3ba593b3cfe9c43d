package checkpoint

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// storedBlobs lists the blob store's digests.
func storedBlobs(t *testing.T, s *testStore) map[string]bool {
	t.Helper()
	set := map[string]bool{}
	for d, err := range s.blobs.Digests(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		set[d] = true
	}
	return set
}

// files returns a tree of name and n small files more: enough entries
// that a one-file step on it stays a delta (CompactShare).
func files(name, body string, n int) []tent {
	ents := []tent{reg(name, body)}
	for i := range n {
		ents = append(ents, reg(fmt.Sprintf("%s-%02d", name, i), fmt.Sprint(i)))
	}
	return ents
}

// TestCollectManifests runs the manifest cases on each backend (the blob
// directory, PostgreSQL's blob table).
func TestCollectManifests(t *testing.T) {
	runOnBackends(t, []storeCase{
		{"Orphans", testCollectManifests},
		{"ConcurrentDelta", testCollectConcurrentDelta},
		{"Killed", testCollectKilled},
		{"Forget", testForget},
	})
}

// testCollectManifests: the manifests of a deleted run's chain go (and
// the file names they hold with them); the live chains' stay; blobs that
// are not manifests stay whatever they hold (zstd frames too); a manifest
// written after the cut stays.
func testCollectManifests(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	s := open(t)
	a0 := write(t, s, "acme", "", true, tarStream(t, files("secret-plan.txt", "a", 8)...))
	a1 := write(t, s, "acme", a0.Digest, false, tarStream(t, reg("step", "b")))
	if a1.Full {
		t.Fatal("the step is a full checkpoint: the case tests less")
	}
	b0 := write(t, s, "acme", "", true, tarStream(t, files("kept.txt", "c", 8)...))
	b1 := write(t, s, "acme", b0.Digest, false, tarStream(t, reg("kept-step", "d")))
	// Blobs that are not manifests: plain bytes, and a zstd frame of
	// other content (an uploaded .zst).
	put := func(b []byte) string {
		d, _, err := s.blobs.Put(ctx, strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	enc, _ := zstd.NewWriter(nil)
	others := []string{put([]byte("an artifact")), put(enc.EncodeAll([]byte("\x89ALCKPX\nnot a manifest"), nil)), put([]byte{0x28, 0xb5})}
	cut := time.Now()
	late := write(t, s, "acme", "", true, tarStream(t, reg("late", "e")))

	st, err := s.Collect(ctx, cut, rootsOf(Root{"acme", b1.Digest}))
	if err != nil {
		t.Fatal(err)
	}
	stored := storedBlobs(t, s)
	for _, tt := range []struct {
		what, digest string
		kept         bool
	}{
		{"the deleted run's full checkpoint", a0.Digest, false},
		{"the deleted run's delta", a1.Digest, false},
		{"the live run's full checkpoint", b0.Digest, true},
		{"the live run's delta", b1.Digest, true},
		{"a checkpoint written after the cut", late.Digest, true},
		{"an artifact", others[0], true},
		{"a zstd blob", others[1], true},
		{"a blob of two bytes", others[2], true},
	} {
		if stored[tt.digest] != tt.kept {
			t.Errorf("%s (%s): stored = %v, want %v", tt.what, tt.digest, stored[tt.digest], tt.kept)
		}
	}
	if st.Orphans != 3 || st.ManifestsExpired != 2 || st.Blobs != 8 {
		t.Errorf("Collect = %+v; want 8 blobs, 3 orphan manifests, 2 expired", st)
	}
	restoreTar(t, s, "acme", b1.Digest)
	restoreTar(t, s, "acme", late.Digest)
	if _, err := s.Manifest(ctx, "acme", a1.Digest); err == nil {
		t.Error("the collected manifest still loads")
	}
}

// testCollectConcurrentDelta: a delta written while the collection lists
// its roots, on a parent no root names (its run's event is not appended
// yet, or the parent's sandbox was paused before the collection), keeps
// its parent's chain: its writer marked it used. A later collection that
// has the delta as a root keeps the whole chain, which restores. Both
// with the writer's tree cache (the usual next step) and without (another
// process, or a restart).
func testCollectConcurrentDelta(t *testing.T, open func(*testing.T) *testStore) {
	for _, cached := range []bool{true, false} {
		t.Run(fmt.Sprintf("cached=%v", cached), func(t *testing.T) {
			ctx := context.Background()
			s := open(t)
			p0 := write(t, s, "acme", "", true, tarStream(t, files("base", randomBody(20, 1<<20), 12)...))
			p1 := write(t, s, "acme", p0.Digest, false, tarStream(t, reg("step", "1")))
			w := s
			if !cached {
				w = newTestStoreOn(t, s.blobs, s.Store.chunks.Backend())
			}
			cut := time.Now()
			var racing Result
			st, err := s.Collect(ctx, cut, func(context.Context) ([]Root, error) {
				racing = write(t, w, "acme", p1.Digest, false, tarStream(t, reg("step2", "2")))
				return nil, nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if racing.Full {
				t.Fatal("the racing write is a full checkpoint: the case tests nothing")
			}
			if st.ManifestsExpired != 0 || st.Expired != 0 {
				t.Errorf("Collect = %+v; want nothing removed", st)
			}
			restoreTar(t, s, "acme", racing.Digest)
			if _, err := s.Collect(ctx, time.Now(), rootsOf(Root{"acme", racing.Digest})); err != nil {
				t.Fatal(err)
			}
			restoreTar(t, s, "acme", racing.Digest)
		})
	}
}

// testCollectKilled: a collection killed (SIGKILL) in the middle of its
// removals loses nothing a live chain holds: the live checkpoints restore
// after it, from a restarted store; the next collection removes the rest
// of what no root names, and nothing else.
func testCollectKilled(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	s := open(t)
	live := write(t, s, "acme", "", true, tarStream(t, files("live", randomBody(30, 1<<20), 8)...))
	live1 := write(t, s, "acme", live.Digest, false, tarStream(t, reg("live-step", "x")))
	const orphans = 40
	for i := range orphans {
		write(t, s, "acme", "", true, tarStream(t, reg(fmt.Sprintf("orphan-%d", i), randomBody(uint64(100+i), 4096))))
	}
	if live1.Full {
		t.Fatal("the live step is a full checkpoint: the case tests less")
	}
	liveBlobs := map[string]bool{live.Digest: true, live1.Digest: true}
	liveChunks := chunkSet(t, s, "acme", live1.Digest)
	time.Sleep(10 * time.Millisecond) // every write before the child's cut

	// The child removes 10 things, says so, and waits to be killed.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), append(s.reopen, "CKPT_CHILD_ROOTS="+live1.Digest, "CKPT_CHILD_STOP=10")...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "stopped\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q, %v", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()

	// Restarted: the blob store puts back what the killed collection had
	// moved aside.
	s2 := reopenStore(t, s)
	blobs := storedBlobs(t, s2)
	if n := len(blobs); n != orphans+2-10 {
		// 10 removals, of manifests first: killed in the middle.
		t.Errorf("%d blobs after the kill, want %d", n, orphans+2-10)
	}
	for d := range liveBlobs {
		if !blobs[d] {
			t.Errorf("live manifest %s lost in the killed collection", d)
		}
	}
	restoreTar(t, s2, "acme", live1.Digest)
	st, err := s2.Collect(ctx, time.Now(), rootsOf(Root{"acme", live1.Digest}))
	if err != nil {
		t.Fatal(err)
	}
	if st.ManifestsExpired == 0 {
		t.Errorf("the next collection removed no manifest: %+v", st)
	}
	blobs = storedBlobs(t, s2)
	if len(blobs) != len(liveBlobs) {
		t.Errorf("after the next collection %d blobs remain, want the %d live ones", len(blobs), len(liveBlobs))
	}
	chunks := storedChunks(t, s2)
	for id := range chunks {
		if !liveChunks[id] {
			t.Errorf("chunk %s no live chain holds remains", id)
		}
	}
	restoreTar(t, s2, "acme", live1.Digest)
}

// reopenStore opens the store s's child would (a restarted process).
func reopenStore(t *testing.T, s *testStore) *testStore {
	t.Helper()
	return openTestStore(t, s.reopen)
}

// collectChild is the test binary as testCollectKilled's child: it
// collects the store the environment names, with CKPT_CHILD_ROOTS the
// roots (tenant acme), and after CKPT_CHILD_STOP removals prints
// "stopped" and waits to be killed.
func collectChild() {
	dir, err := os.MkdirTemp("", "ckpt-child-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	s, _, err := openStore(os.Getenv, dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var stop int
	fmt.Sscan(os.Getenv("CKPT_CHILD_STOP"), &stop)
	n := 0
	s.removed = func() {
		if n++; n == stop {
			os.Stdout.WriteString("stopped\n")
			time.Sleep(time.Hour) // killed here
		}
	}
	var roots []Root
	for _, d := range strings.Fields(os.Getenv("CKPT_CHILD_ROOTS")) {
		roots = append(roots, Root{"acme", d})
	}
	_, err = s.Collect(context.Background(), time.Now(), rootsOf(roots...))
	fmt.Fprintf(os.Stderr, "collect ended before the stop: %v\n", err)
	os.Exit(1)
}

// testForget: a deletion's Forget removes the manifests of the deleted
// checkpoints' chains at once, except what a live chain holds (a fork's
// parent) and what was written or found after the deletion began.
func testForget(t *testing.T, open func(*testing.T) *testStore) {
	ctx := context.Background()
	s := open(t)
	a0 := write(t, s, "acme", "", true, tarStream(t, files("base", "a", 8)...))
	a1 := write(t, s, "acme", a0.Digest, false, tarStream(t, reg("deleted-name", "b")))
	fork := write(t, s, "acme", a0.Digest, false, tarStream(t, reg("fork-step", "c")))
	write(t, s, "acme", "", true, tarStream(t, files("other", "d", 8)...))
	// Written again, it stores nothing new: the same manifest each time.
	other := write(t, s, "acme", "", true, tarStream(t, files("other", "d", 8)...))
	if a1.Full || fork.Full {
		t.Fatal("a step is a full checkpoint: the case tests less")
	}
	since := time.Now()
	again := write(t, s, "acme", "", true, tarStream(t, files("other", "d", 8)...)) // found after since
	if again.Digest != other.Digest {
		t.Fatalf("the same tree twice: %s, then %s", other.Digest, again.Digest)
	}
	cachedA1 := func() bool {
		s.trees.mu.Lock()
		defer s.trees.mu.Unlock()
		for _, ct := range s.trees.trees {
			if slices.Contains(ct.chain, a1.Digest) {
				return true
			}
		}
		return false
	}
	if !cachedA1() {
		t.Fatal("the tree cache does not hold the step's tree: the case tests less")
	}
	// A live root whose manifest is gone (a record naming a checkpoint
	// collected long ago) keeps nothing and stops nothing.
	missing := Root{"acme", "sha256:" + strings.Repeat("0", 64)}
	n, err := s.Forget(ctx, []Root{{"acme", a1.Digest}, {"acme", other.Digest}}, since, rootsOf(missing, Root{"acme", fork.Digest}))
	if err != nil || n != 1 {
		t.Fatalf("Forget = %d, %v; want 1 removed", n, err)
	}
	if cachedA1() {
		t.Error("the tree cache still holds the deleted checkpoint's tree")
	}
	stored := storedBlobs(t, s)
	if stored[a1.Digest] || !stored[a0.Digest] || !stored[fork.Digest] || !stored[other.Digest] {
		t.Errorf("after Forget: deleted step %v, fork's parent %v, fork %v, found again %v; want false, true, true, true",
			stored[a1.Digest], stored[a0.Digest], stored[fork.Digest], stored[other.Digest])
	}
	restoreTar(t, s, "acme", fork.Digest)
	// A live root that does not load: nothing removed.
	if _, err := s.Forget(ctx, []Root{{"acme", fork.Digest}}, time.Now(), rootsOf(Root{"other", a0.Digest})); err == nil {
		t.Error("Forget with a broken live root succeeded")
	}
	if !storedBlobs(t, s)[fork.Digest] {
		t.Error("a failed Forget removed a manifest")
	}
}
