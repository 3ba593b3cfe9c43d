package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// testCheckpoint checks sandbox.Checkpointer: every delta, applied to the
// tree before it, gives the sandbox's /workspace byte for byte; a delta
// holds what changed and nothing else; deletions, renames, type changes,
// links, FIFOs and odd names survive; and a workspace that fights back
// (symlinks swapped mid-walk, a file growing while read) gets an error or
// a faithful copy, never a byte from outside /workspace.
func (s *suite) testCheckpoint(t *testing.T) {
	t.Run("Cow", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		manyFiles(t, ws)
		s.checkpointSteps(t, s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCOW}), sandbox.WorkspaceCOW)
	})
	t.Run("CowLowerLinks", func(t *testing.T) {
		// Hard links of the host directory: one link, copied up when
		// written, becomes a file of its own.
		t.Parallel()
		ws := t.TempDir()
		writeHost(t, ws, "links/a", "shared\n")
		if err := os.Link(filepath.Join(ws, "links/a"), filepath.Join(ws, "links/b")); err != nil {
			t.Fatal(err)
		}
		sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceCOW})
		cp := checkpointer(t, sb)
		dir := t.TempDir()
		full, es := take(t, cp, sandbox.CheckpointRequest{})
		wantHardLinks("links/a", "links/b")(t, sandbox.WorkspaceCOW, es)
		ApplyDelta(t, dir, es)
		CompareTrees(t, "full", sb, dir)
		mustSh(t, sb, "echo more >> /workspace/links/a")
		es = mustTake(t, cp, full.Baseline)
		wantNames(t, "write to a linked file", es, []string{"links/", "links/a"}, []string{"links/a"})
		ApplyDelta(t, dir, es)
		CompareTrees(t, "after a write to one name", sb, dir)
		if b := readHost(t, dir, "links/b"); b != "shared\n" {
			t.Errorf("links/b = %q after links/a was written in the sandbox, want it unchanged (copy-up breaks the link)", b)
		}
	})
	t.Run("Empty", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		mustSh(t, sb, manyFilesScript)
		s.checkpointSteps(t, sb, "empty")
	})
	t.Run("Restored", func(t *testing.T) {
		// A tree imported into a fresh sandbox (a restore, an upload):
		// deletions, renames and type changes of what it brought.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		importManyFiles(t, sb)
		s.checkpointSteps(t, sb, "restored")
	})
	t.Run("RestoredStep", s.testCheckpointRestoredStep)
	t.Run("RW", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		manyFiles(t, ws)
		s.checkpointSteps(t, s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceRW}), sandbox.WorkspaceRW)
	})
	t.Run("RWStep", s.testCheckpointRWStep)
	t.Run("RO", func(t *testing.T) {
		// A read-only workspace changes only from the host's side; a
		// checkpoint sees that as any other change.
		t.Parallel()
		ws := t.TempDir()
		writeHost(t, ws, "a", "one\n")
		writeHost(t, ws, "b", "two\n")
		sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceRO})
		cp := checkpointer(t, sb)
		full, es := take(t, cp, sandbox.CheckpointRequest{})
		if got := names(es); !full.Full || !slices.Equal(got, []string{"a", "b"}) {
			t.Fatalf("full checkpoint of a ro workspace = %q (%+v), want [a b]", got, full)
		}
		writeHost(t, ws, "b", "three\n")
		es = mustTake(t, cp, full.Baseline)
		if len(es) != 1 || es[0].Name != "b" || string(es[0].Body) != "three\n" {
			t.Errorf("delta after the host rewrote b = %q, want b alone, as rewritten", names(es))
		}
	})
	t.Run("WhiteoutName", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		cp := checkpointer(t, sb)
		for _, name := range []string{".wh.evil", "sub/.wh..wh..opq"} {
			mustSh(t, sb, fmt.Sprintf("mkdir -p /workspace/sub && : > /workspace/%s", name))
			_, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{}, &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("Checkpoint with /workspace/%s = %v, want an error naming it", name, err)
			}
			mustSh(t, sb, "rm /workspace/"+name)
		}
		if res, _ := take(t, cp, sandbox.CheckpointRequest{}); !res.Full {
			t.Errorf("Checkpoint once the .wh. names are gone = %+v, want a full stream", res)
		}
	})
	t.Run("UnknownSince", func(t *testing.T) {
		t.Parallel()
		other := checkpointer(t, s.create(t, sandbox.Spec{}))
		foreign, _ := take(t, other, sandbox.CheckpointRequest{})
		sb := s.create(t, sandbox.Spec{})
		cp := checkpointer(t, sb)
		mustSh(t, sb, "echo a > /workspace/a")
		first, _ := take(t, cp, sandbox.CheckpointRequest{})
		for _, since := range []string{"never-1", foreign.Baseline} {
			res, es := take(t, cp, sandbox.CheckpointRequest{Since: since})
			if !res.Full || len(es) != 1 || es[0].Name != "a" || res.Baseline == first.Baseline || res.Baseline == foreign.Baseline {
				t.Errorf("Checkpoint(since %q, unknown here) = %+v, %v; want a new baseline and the full tree [a]", since, res, names(es))
			}
		}
	})
	t.Run("MarkOnly", func(t *testing.T) {
		t.Parallel()
		ws := t.TempDir()
		manyFiles(t, ws)
		sb := s.create(t, sandbox.Spec{Workspace: ws})
		cp := checkpointer(t, sb)
		dir := t.TempDir()
		full, es := take(t, cp, sandbox.CheckpointRequest{})
		ApplyDelta(t, dir, es)
		mustSh(t, sb, "echo a >> /workspace/d01/f001")
		ApplyDelta(t, dir, mustTake(t, cp, full.Baseline))
		var w countWriter
		mark, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{MarkOnly: true}, &w)
		if err != nil || mark.Baseline == "" || mark.Full || mark.Entries != 0 || w.count() != 0 {
			t.Fatalf("Checkpoint(mark only) = %+v, %v, %d bytes written; want a baseline and nothing written", mark, err, w.count())
		}
		mustSh(t, sb, "echo b >> /workspace/d02/f002")
		es = mustTake(t, cp, mark.Baseline)
		wantNames(t, "delta since a mark", es, []string{"d02/", "d02/f002"}, []string{"d02/f002"})
		ApplyDelta(t, dir, es)
		CompareTrees(t, "after a mark and a delta", sb, dir)
	})
	t.Run("BaselineBefore", func(t *testing.T) {
		// The host failed to store a checkpoint: it takes the next one
		// since the baseline before, which the sandbox still has.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		cp := checkpointer(t, sb)
		dir := t.TempDir()
		mustSh(t, sb, "echo 1 > /workspace/one && echo x > /workspace/gone")
		b1, es := take(t, cp, sandbox.CheckpointRequest{})
		ApplyDelta(t, dir, es)
		mustSh(t, sb, "echo 2 > /workspace/two && rm /workspace/gone")
		if _, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{Since: b1.Baseline}, &bytes.Buffer{}); err != nil {
			t.Fatalf("Checkpoint = %v", err)
		}
		mustSh(t, sb, "echo 3 > /workspace/three")
		res, es := take(t, cp, sandbox.CheckpointRequest{Since: b1.Baseline})
		if res.Full {
			t.Fatalf("Checkpoint(since the baseline before the last) = %+v: full; the sandbox must keep the last two", res)
		}
		wantNames(t, "delta since the baseline before", es, nil, []string{".wh.gone", "three", "two"})
		ApplyDelta(t, dir, es)
		CompareTrees(t, "after a delta since the baseline before", sb, dir)
	})
	t.Run("GrowingFile", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		cp := checkpointer(t, sb)
		mustSh(t, sb, "mkdir /workspace/d && head -c 4194304 /dev/zero > /workspace/d/big")
		// The stream stalls on flow control while the executor reads
		// big (4 MiB, far more than the window); the file grows then.
		w := &stallOnce{during: func() { mustSh(t, sb, "echo more >> /workspace/d/big") }}
		_, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{}, w)
		var fe *sandbox.FileError
		if !errors.As(err, &fe) || fe.Errno != "EAGAIN" || !strings.Contains(err.Error(), "/workspace/d/big") {
			t.Fatalf("Checkpoint while /workspace/d/big grows = %v; want an EAGAIN error naming it", err)
		}
		if _, es := take(t, cp, sandbox.CheckpointRequest{}); len(es) != 2 || len(es[1].Body) != 4194304+5 {
			t.Errorf("Checkpoint once the file is still = %v, want d/ and the grown d/big", names(es))
		}
	})
	t.Run("WriterFails", func(t *testing.T) {
		// The host could not take the stream: the checkpoint ends with
		// the writer's error, records nothing the host relies on, and
		// the next one, since the same baseline, works.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		cp := checkpointer(t, sb)
		mustSh(t, sb, "echo a > /workspace/a")
		first, _ := take(t, cp, sandbox.CheckpointRequest{})
		mustSh(t, sb, "head -c 4194304 /dev/zero > /workspace/big")
		broken := errors.New("store unavailable")
		if _, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{Since: first.Baseline}, failingWriter{broken}); !errors.Is(err, broken) {
			t.Fatalf("Checkpoint into a failing writer = %v, want its error", err)
		}
		es := mustTake(t, cp, first.Baseline)
		if got := names(es); !slices.Equal(got, []string{"big"}) || len(es[0].Body) != 4194304 {
			t.Errorf("Checkpoint after a failed one = %q, want big, whole", got)
		}
	})
	t.Run("SymlinkSwap", s.testCheckpointSymlinkSwap)
	t.Run("SymlinkSwapRace", s.testCheckpointSymlinkRace)
}

// manyFilesScript makes the workspace manyFiles makes, in a sandbox.
const manyFilesScript = `cd /workspace && for d in 01 02 03 04 05 06 07 08 09 10; do
	mkdir d$d && for f in 001 002 003 004 005 006 007 008 009 010 011 012 013 014 015 016 017 018 019 020; do
		echo "d$d/f$f" > d$d/f$f
	done
done && mkdir -p d01/sub/deep && echo deep > d01/sub/deep/x`

// manyFiles makes a workspace of 201 files in 12 directories on the host.
func manyFiles(t *testing.T, dir string) {
	t.Helper()
	for d := 1; d <= 10; d++ {
		for f := 1; f <= 20; f++ {
			name := fmt.Sprintf("d%02d/f%03d", d, f)
			writeHost(t, dir, name, name+"\n")
		}
	}
	writeHost(t, dir, "d01/sub/deep/x", "deep\n")
}

// importManyFiles imports manyFiles' tree into sb's empty /workspace, as
// a restore or an upload does.
func importManyFiles(t *testing.T, sb sandbox.Sandbox) {
	t.Helper()
	im, ok := sb.(sandbox.Importer)
	if !ok {
		t.Skip("the backend's sandboxes do not import tar streams")
	}
	ws := t.TempDir()
	manyFiles(t, ws)
	var entries []tarEntry
	err := filepath.WalkDir(ws, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == ws {
			return err
		}
		rel, _ := filepath.Rel(ws, p)
		e := tarEntry{h: tar.Header{Name: rel, Typeflag: tar.TypeReg, Mode: 0o644, Format: tar.FormatPAX, ModTime: time.Unix(1e9, 123)}}
		if d.IsDir() {
			e.h.Name += "/"
			e.h.Typeflag, e.h.Mode = tar.TypeDir, 0o755
		} else {
			e.body = readHost(t, ws, rel)
		}
		entries = append(entries, e)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := im.Import(opCtx(t), "/workspace", bytes.NewReader(makeTar(t, entries))); err != nil {
		t.Fatalf("Import = %v", err)
	}
}

// walksLayer reports whether sb's restored /workspace is an overlay whose
// upper layer a delta reads: the native backend's and a kubernetes pod's
// always (an overlay the executor mounts over the pod's volume), and
// gVisor's where its runsc's overlay serves (a runsc whose overlay fails
// a command's statx, Debian's 20221219, keeps its tmpfs: the sandbox
// reports no execproto.LayerRestoreLayer).
func walksLayer(sb sandbox.Sandbox) bool {
	info := sb.Info()
	return info.Backend != sandbox.RuntimeGVisor || slices.Contains(info.Layers, execproto.LayerRestoreLayer)
}

// testCheckpointRestoredStep checks that a delta after a restore reads
// what changed since, not the tree the restore brought: the sandbox walks
// only its layer of changes (Walked), where it has one (natively, in a
// kubernetes pod and under gVisor with a runsc whose overlay serves; else
// it walks it whole, as every mode but cow does).
func (s *suite) testCheckpointRestoredStep(t *testing.T) {
	t.Parallel()
	sb := s.create(t, sandbox.Spec{})
	// What a host does before it restores (the E2B server reads the
	// event channel, a status page measures the disk) looks nothing up
	// in /workspace: the tree still goes under the overlay.
	stop := sandbox.WatchLines(opCtx(t), sb, time.Second, func(_ context.Context, lines <-chan sandbox.EventLine) {
		for range lines {
		}
	})
	defer stop()
	if dm, ok := sb.(sandbox.DiskMeasurer); ok {
		if _, err := dm.MeasureDisk(opCtx(t)); err != nil {
			t.Fatalf("MeasureDisk = %v", err)
		}
	}
	importManyFiles(t, sb)
	cp := checkpointer(t, sb)
	dir := t.TempDir()
	full, es := take(t, cp, sandbox.CheckpointRequest{})
	if !full.Full || len(es) != 213 {
		t.Fatalf("full Checkpoint after the import = %+v, %d entries; want the 213 imported", full, len(es))
	}
	ApplyDelta(t, dir, es)
	mark, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{MarkOnly: true}, &bytes.Buffer{})
	if err != nil {
		t.Fatalf("Checkpoint(mark only) = %v", err)
	}
	mustSh(t, sb, "echo more >> /workspace/d01/f005")
	res, es := take(t, cp, sandbox.CheckpointRequest{Since: mark.Baseline})
	wantNames(t, "one file changed after a restore", es, []string{"d01/", "d01/f005"}, []string{"d01/f005"})
	ApplyDelta(t, dir, es)
	CompareTrees(t, "after a restore and a change", sb, dir)
	layered := walksLayer(sb)
	t.Logf("%s: the delta after one changed file walked %d entries", sb.Info().Backend, res.Walked)
	switch {
	case !layered:
		t.Logf("%s: no layer of changes to read", sb.Info().Backend)
	case res.Walked > 2:
		t.Errorf("delta after one changed file walked %d entries, want at most 2 (d01/ and d01/f005): the restored tree was walked", res.Walked)
	}
	mustSh(t, sb, "rm /workspace/d02/f001 && mv /workspace/d04/f001 /workspace/d04/g001")
	res, es = take(t, cp, sandbox.CheckpointRequest{Since: res.Baseline})
	wantNames(t, "a deletion and a rename after a restore", es,
		[]string{"d01/", "d01/f005", "d02/", "d02/.wh.f001", "d04/", "d04/.wh.f001", "d04/g001"},
		[]string{"d02/.wh.f001", "d04/.wh.f001", "d04/g001"})
	ApplyDelta(t, dir, es)
	CompareTrees(t, "after a deletion and a rename", sb, dir)
	if layered && res.Walked > 10 {
		t.Errorf("delta after a deletion and a rename walked %d entries, want the upper layer's few", res.Walked)
	}
	// An import once commands ran is a change like any other.
	im := sb.(sandbox.Importer)
	late := makeTar(t, []tarEntry{{h: tar.Header{Name: "d03/late", Typeflag: tar.TypeReg, Mode: 0o600, ModTime: time.Unix(2e9, 0)}, body: "late\n"}})
	if err := im.Import(opCtx(t), "/workspace", bytes.NewReader(late)); err != nil {
		t.Fatalf("Import after commands = %v", err)
	}
	es = mustTake(t, cp, res.Baseline)
	wantNames(t, "an import after commands", es, []string{"d03/", "d03/late"}, []string{"d03/late"})
	ApplyDelta(t, dir, es)
	CompareTrees(t, "after a late import", sb, dir)
}

// testCheckpointRWStep checks that a delta of an rw workspace looks at what
// changed, natively: the executor keeps a dirty set from inotify
// (docs/checkpoints.md, "Deltas of rw workspaces"). Its tracker watches the
// tree in the background from the sandbox's start, and a baseline taken
// before it is ready walks the whole tree once: the first steps may walk
// it all. gVisor and a pod walk it whole every time.
func (s *suite) testCheckpointRWStep(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	manyFiles(t, ws)
	sb := s.create(t, sandbox.Spec{Workspace: ws, WorkspaceMode: sandbox.WorkspaceRW})
	cp := checkpointer(t, sb)
	dir := t.TempDir()
	full, es := take(t, cp, sandbox.CheckpointRequest{})
	ApplyDelta(t, dir, es)
	since := full.Baseline
	var walked []int64
	for i := range 5 {
		mustSh(t, sb, fmt.Sprintf("echo %d >> /workspace/d01/f005", i))
		res, es := take(t, cp, sandbox.CheckpointRequest{Since: since})
		wantNames(t, "one file changed in an rw workspace", es, []string{"d01/", "d01/f005"}, []string{"d01/f005"})
		ApplyDelta(t, dir, es)
		since, walked = res.Baseline, append(walked, res.Walked)
	}
	CompareTrees(t, "after steps in an rw workspace", sb, dir)
	// d01 and its 21 entries; the root's other names come from the
	// baseline, and d01/sub and the other directories are not looked
	// into.
	t.Logf("%s: the deltas walked %v entries", sb.Info().Backend, walked)
	if walksLayer(sb) && walked[len(walked)-1] > 22 {
		t.Errorf("deltas after one changed file in an rw workspace walked %v entries, want at most 22 at the last: the tree was walked", walked)
	}
	// A change from the host is an event like the sandbox's own.
	writeHost(t, ws, "d07/f003", "from the host\n")
	mustSh(t, sb, "rm /workspace/d02/f001 && mv /workspace/d04/f001 /workspace/d04/g001 && mkdir -p /workspace/d09/new/deep && echo n > /workspace/d09/new/deep/n")
	res, es := take(t, cp, sandbox.CheckpointRequest{Since: since})
	wantNames(t, "a host write, a deletion, a rename and a new directory in an rw workspace", es,
		[]string{"d02/", "d02/.wh.f001", "d04/", "d04/.wh.f001", "d04/g001", "d07/", "d07/f003", "d09/", "d09/new/", "d09/new/deep/", "d09/new/deep/n"},
		[]string{"d02/.wh.f001", "d04/.wh.f001", "d04/g001", "d07/f003", "d09/new/deep/n"})
	ApplyDelta(t, dir, es)
	CompareTrees(t, "after a host write and more steps in an rw workspace", sb, dir)
	since = res.Baseline
	// A second name made in a directory just made, written through and
	// removed at once, before the tracker can watch that directory: the
	// executor notes every link before it goes on (the link notifier),
	// so the delta walks the whole tree and holds the file written.
	mustSh(t, sb, "cd /workspace && mkdir d05/new && ln d06/f002 d05/new/l && echo via the link >> d05/new/l && rm d05/new/l")
	res, es = take(t, cp, sandbox.CheckpointRequest{Since: since})
	if res.Full {
		t.Fatalf("Checkpoint(since %q) = %+v: full, want a delta", since, res)
	}
	wantNames(t, "a file written through a second name made and removed in a new directory", es, nil, []string{"d05/new/", "d06/f002"})
	ApplyDelta(t, dir, es)
	CompareTrees(t, "after a write through a passing second name", sb, dir)
	// The ln is gone: the next delta walks what changed (and the
	// directory of the file that had two names), not the tree.
	whole := res.Walked
	mustSh(t, sb, "echo again >> /workspace/d01/f005")
	res, es = take(t, cp, sandbox.CheckpointRequest{Since: res.Baseline})
	wantNames(t, "one file changed after a link", es, []string{"d01/", "d01/f005"}, []string{"d01/f005"})
	ApplyDelta(t, dir, es)
	t.Logf("%s: the delta of a link walked %d entries, the one after it %d", sb.Info().Backend, whole, res.Walked)
	if walksLayer(sb) && res.Walked*4 > whole {
		t.Errorf("the delta after the one of a link walked %d entries, the whole tree is %d: the link was taken as still in flight", res.Walked, whole)
	}
}

// checkpointStep is one command and what the delta after it must hold.
type checkpointStep struct {
	name, script string
	// only, if not nil, lists every name the delta may hold; must lists
	// names it must hold. A cow workspace may add the parent directories
	// the step copied up to the upper layer.
	only, must []string
	check      func(t *testing.T, mode string, es []DeltaEntry)
}

func (s *suite) checkpointSteps(t *testing.T, sb sandbox.Sandbox, mode string) {
	cp := checkpointer(t, sb)
	dir := t.TempDir()
	full, es := take(t, cp, sandbox.CheckpointRequest{})
	if !full.Full {
		t.Fatalf("first Checkpoint = %+v, want a full stream", full)
	}
	if n := len(es); n != 213 {
		t.Errorf("full stream of the workspace = %d entries, want 213 (201 files, 12 directories)", n)
	}
	ApplyDelta(t, dir, es)
	CompareTrees(t, "full", sb, dir)
	last := full.Baseline
	gvisor := sb.Info().Backend == sandbox.RuntimeGVisor
	for _, st := range checkpointSteps {
		t.Run(st.name, func(t *testing.T) {
			script := st.script
			if gvisor && strings.Contains(script, preEpoch) {
				// gVisor 20221219 reports a time before 1970 with its
				// nanoseconds wrapped to 32 bits unsigned (-315619199 s
				// and 3794967296 ns for 1960-01-01 00:00:00.5): the
				// executor reads that back, but find in the sandbox,
				// which SandboxTree asks, prints it as it comes.
				t.Logf("gvisor: %s instead of %s (gVisor reports times before 1970 wrapped)", postEpoch, preEpoch)
				script = strings.ReplaceAll(script, preEpoch, postEpoch)
			}
			mustSh(t, sb, script)
			res, es := take(t, cp, sandbox.CheckpointRequest{Since: last})
			if res.Full {
				t.Fatalf("Checkpoint(since %q) = %+v: full, want a delta", last, res)
			}
			last = res.Baseline
			wantNames(t, st.name, es, st.only, st.must)
			if st.check != nil {
				st.check(t, mode, es)
			}
			ApplyDelta(t, dir, es)
			CompareTrees(t, st.name, sb, dir)
		})
	}
	// A full stream now gives the same tree as the full one and every delta.
	again := t.TempDir()
	res, es := take(t, cp, sandbox.CheckpointRequest{})
	if !res.Full {
		t.Fatalf("Checkpoint(since \"\") = %+v, want a full stream", res)
	}
	ApplyDelta(t, again, es)
	CompareTrees(t, "full at the end", sb, again)
	wantHardLinks("d08/f001", "hard2")(t, mode, es)
}

// preEpoch is a time before 1970 a checkpoint step gives a symlink;
// postEpoch replaces it on gvisor.
const (
	preEpoch  = "1960-01-01 00:00:00.5"
	postEpoch = "1970-01-02 00:00:00.5"
)

var checkpointSteps = []checkpointStep{
	{
		name: "append to one file", script: "echo more >> /workspace/d01/f005",
		only: []string{"d01/", "d01/f005"}, must: []string{"d01/f005"},
	},
	{name: "append to it again", script: "echo more >> /workspace/d01/f005", only: []string{"d01/f005"}},
	{name: "nothing", script: "true", only: []string{}},
	{
		name: "delete a file of the source", script: "rm /workspace/d02/f001",
		only: []string{"d02/", "d02/.wh.f001"}, must: []string{"d02/.wh.f001"},
	},
	{
		name: "create a file", script: "echo new > /workspace/d02/new",
		only: []string{"d02/", "d02/new"}, must: []string{"d02/new"},
	},
	{
		name: "delete the new file", script: "rm /workspace/d02/new",
		only: []string{"d02/", "d02/.wh.new"}, must: []string{"d02/.wh.new"},
	},
	{name: "delete a directory", script: "rm -r /workspace/d03", only: []string{".wh.d03"}},
	{
		name: "rename a file", script: "mv /workspace/d04/f001 /workspace/d04/g001",
		only: []string{"d04/", "d04/.wh.f001", "d04/g001"}, must: []string{"d04/.wh.f001", "d04/g001"},
	},
	{
		name: "rename a directory", script: "mv /workspace/d09 /workspace/d09-moved",
		must: []string{".wh.d09", "d09-moved/", "d09-moved/f001", "d09-moved/f020"},
	},
	{
		name: "file to directory", script: "rm /workspace/d05/f001 && mkdir /workspace/d05/f001 && echo in > /workspace/d05/f001/x",
		must: []string{"d05/f001/", "d05/f001/x"},
	},
	{
		name: "directory to file", script: "rm -r /workspace/d05/f001 && echo back > /workspace/d05/f001",
		must: []string{"d05/f001"},
	},
	{
		name: "remove a directory and make it again", script: "rm -rf /workspace/d06 && mkdir /workspace/d06 && echo fresh > /workspace/d06/new",
		must: []string{"d06/", "d06/new"},
		check: func(t *testing.T, mode string, es []DeltaEntry) {
			// Whiteouts for the old children, or one marker: an
			// overlay's upper layer, where it is read (cow, and the
			// empty and restored workspaces' overlay), may have the
			// opaque directory (gVisor's overlay marks a directory
			// made again opaque even where no lower layer had it: the
			// empty workspace's d06 was all the upper layer's). An rw
			// workspace has no layer: it is walked whole.
			got := names(es)
			if !slices.Contains(got, "d06/.wh..wh..opq") && !slices.Contains(got, "d06/.wh.f001") {
				t.Errorf("remade directory: delta %q has neither d06/.wh..wh..opq nor d06/.wh.f001", got)
			}
			if mode == sandbox.WorkspaceRW && slices.Contains(got, "d06/.wh..wh..opq") {
				t.Errorf("remade directory: delta %q of a %s workspace has an opaque marker", got, mode)
			}
		},
	},
	{
		name:   "symlinks",
		script: `cd /workspace && ln -s ../d01/f005 d07/rel && ln -s /etc/passwd abs && ln -s nowhere dangling && ln -s "$(printf 'odd\nlink\377')" odd`,
		must:   []string{"d07/rel", "abs", "dangling", "odd"},
		check: func(t *testing.T, _ string, es []DeltaEntry) {
			want := map[string]string{"d07/rel": "../d01/f005", "abs": "/etc/passwd", "dangling": "nowhere", "odd": "odd\nlink\xff"}
			for _, e := range es {
				if target, ok := want[e.Name]; ok && (e.Type != tar.TypeSymlink || e.Linkname != target || len(e.Body) != 0) {
					t.Errorf("entry %q = type %q -> %q with %d bytes, want a symlink to %q", e.Name, e.Type, e.Linkname, len(e.Body), target)
				}
			}
		},
	},
	{name: "retarget a symlink", script: "ln -sfn elsewhere /workspace/dangling", must: []string{"dangling"}},
	{
		name:   "hard links",
		script: "ln /workspace/d08/f001 /workspace/d08/hard && ln /workspace/d08/f001 /workspace/hard2",
		must:   []string{"d08/f001", "d08/hard", "hard2"},
		check:  wantHardLinks("d08/f001", "d08/hard", "hard2"),
	},
	{
		name: "write through a hard link", script: "echo x >> /workspace/hard2",
		must: []string{"d08/f001", "d08/hard", "hard2"}, check: wantHardLinks("d08/f001", "d08/hard", "hard2"),
	},
	{name: "remove a name of a hard link", script: "rm /workspace/d08/hard", must: []string{"d08/.wh.hard"}},
	{
		name: "fifo", script: "mkfifo /workspace/d10/pipe", must: []string{"d10/pipe"},
		check: func(t *testing.T, _ string, es []DeltaEntry) {
			for _, e := range es {
				if e.Name == "d10/pipe" && e.Type != tar.TypeFifo {
					t.Errorf("d10/pipe: type %q, want a FIFO", e.Type)
				}
			}
		},
	},
	{
		name: "odd names",
		script: `cd /workspace && touch "$(printf 'new\nline')" "$(printf 'bad\377name')" "$(printf 'tab\tand space')" ` +
			`&& mkdir "$(printf 'dir\nnl')" && echo inner > "$(printf 'dir\nnl')/$(printf '\342\202\254')"`,
		must: []string{"new\nline", "bad\xffname", "tab\tand space", "dir\nnl/", "dir\nnl/€"},
	},
	{
		name: "modes and times",
		script: "chmod 0750 /workspace/d10 && chmod 4755 /workspace/d10/f003 && chmod 1777 /workspace/d07 && chmod 0444 /workspace/d07/f002 && " +
			"touch -d '2001-02-03 04:05:06.123456789' /workspace/d10/f002 && touch -h -d '" + preEpoch + "' /workspace/abs",
		must: []string{"d10/", "d10/f002", "d10/f003", "d07/", "d07/f002", "abs"},
	},
	{
		name: "deep tree and empty things", script: "mkdir -p /workspace/a/b/c/d/e && echo deep > /workspace/a/b/c/d/e/f && : > /workspace/empty && mkdir /workspace/emptydir",
		must: []string{"a/", "a/b/", "a/b/c/", "a/b/c/d/", "a/b/c/d/e/", "a/b/c/d/e/f", "empty", "emptydir/"},
	},
	{name: "a large file", script: "head -c 3000001 /dev/urandom > /workspace/big", must: []string{"big"}},
	{name: "nothing again", script: "true", only: []string{}},
}

// wantHardLinks checks that the first of names is a file and the others
// hard links to it.
func wantHardLinks(names ...string) func(*testing.T, string, []DeltaEntry) {
	return func(t *testing.T, _ string, es []DeltaEntry) {
		for _, e := range es {
			i := slices.Index(names, e.Name)
			switch {
			case i == 0 && e.Type != tar.TypeReg:
				t.Errorf("%s: type %q, want a regular file", e.Name, e.Type)
			case i > 0 && (e.Type != tar.TypeLink || e.Linkname != names[0]):
				t.Errorf("%s: type %q -> %q, want a hard link to %s", e.Name, e.Type, e.Linkname, names[0])
			}
		}
	}
}

// wantNames checks the names of a delta: each of must is there and, if only
// is not nil, nothing else.
func wantNames(t *testing.T, what string, es []DeltaEntry, only, must []string) {
	t.Helper()
	got := names(es)
	for _, n := range must {
		if !slices.Contains(got, n) {
			t.Errorf("%s: delta %q lacks %q", what, got, n)
		}
	}
	if only == nil {
		return
	}
	for _, n := range got {
		if !slices.Contains(only, n) {
			t.Errorf("%s: delta %q holds %q, want only %q", what, got, n, only)
		}
	}
}

func names(es []DeltaEntry) []string {
	ns := make([]string, len(es))
	for i, e := range es {
		ns[i] = e.Name
	}
	return ns
}

func checkpointer(t *testing.T, sb sandbox.Sandbox) sandbox.Checkpointer {
	t.Helper()
	cp, ok := sb.(sandbox.Checkpointer)
	if !ok {
		t.Skipf("%T does not implement sandbox.Checkpointer", sb)
	}
	return cp
}

// take takes a checkpoint that must succeed and reads its stream, checking
// the counts the result reports.
func take(t *testing.T, cp sandbox.Checkpointer, req sandbox.CheckpointRequest) (sandbox.CheckpointResult, []DeltaEntry) {
	t.Helper()
	var buf bytes.Buffer
	res, err := cp.Checkpoint(opCtx(t), req, &buf)
	if err != nil {
		t.Fatalf("Checkpoint(%+v) = %v", req, err)
	}
	es := ReadDelta(t, buf.Bytes(), res.Full)
	var n int64
	for _, e := range es {
		n += int64(len(e.Body))
	}
	if res.Entries != int64(len(es)) || res.Bytes != n || res.Baseline == "" {
		t.Errorf("Checkpoint(%+v) = %+v; the stream holds %d entries, %d bytes", req, res, len(es), n)
	}
	return res, es
}

// mustTake takes a delta since a baseline the sandbox must know.
func mustTake(t *testing.T, cp sandbox.Checkpointer, since string) []DeltaEntry {
	t.Helper()
	res, es := take(t, cp, sandbox.CheckpointRequest{Since: since})
	if res.Full {
		t.Fatalf("Checkpoint(since %q) = %+v: full, want a delta", since, res)
	}
	return es
}

// stallOnce is a writer whose first Write runs during before it returns:
// the checkpoint waits, on flow control, in the middle of its walk.
type stallOnce struct {
	once   sync.Once
	during func()
	buf    SyncBuffer
}

func (w *stallOnce) Write(p []byte) (int, error) {
	w.once.Do(w.during)
	return w.buf.Write(p)
}

// failingWriter fails every write with err.
type failingWriter struct{ err error }

func (w failingWriter) Write([]byte) (int, error) { return 0, w.err }

// outside is what the symlink attacks plant outside /workspace: a
// checkpoint that holds it read outside.
const outside = "SECRET-OUTSIDE-WORKSPACE"

// testCheckpointSymlinkSwap swaps a directory for a symlink out of the
// workspace while the checkpoint is inside it: the walk goes on in the
// directory it opened, by descriptor, never by a path that now leads out.
func (s *suite) testCheckpointSymlinkSwap(t *testing.T) {
	t.Parallel()
	sb := s.create(t, sandbox.Spec{})
	cp := checkpointer(t, sb)
	mustSh(t, sb, `mkdir /workspace/d /tmp/secret && head -c 4194304 /dev/zero > /workspace/d/big && echo inside > /workspace/d/zz &&
		head -c 4194304 /dev/zero > /tmp/secret/big && echo `+outside+` > /tmp/secret/zz`)
	w := &stallOnce{during: func() {
		mustSh(t, sb, "mv /workspace/d /workspace/d.real && ln -s /tmp/secret /workspace/d")
	}}
	res, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{}, w)
	if err == nil {
		es := ReadDelta(t, w.buf.Bytes(), res.Full)
		noneOutside(t, es)
		if got := names(es); !slices.Equal(got, []string{"d/", "d/big", "d/zz"}) || string(es[2].Body) != "inside\n" {
			t.Errorf("Checkpoint across the swap = %q; want d/, d/big, d/zz as they were when the walk began", got)
		}
	}
	_, es := take(t, cp, sandbox.CheckpointRequest{Since: res.Baseline})
	noneOutside(t, es)
}

// testCheckpointSymlinkRace swaps directories for symlinks to /etc and to
// a directory planted outside, in a loop, while checkpoints run: each
// fails or holds what the workspace held, never a byte from outside.
func (s *suite) testCheckpointSymlinkRace(t *testing.T) {
	t.Parallel()
	sb := s.create(t, sandbox.Spec{})
	cp := checkpointer(t, sb)
	// Many files in d, so that walks spend their time in it while it
	// is swapped; /tmp/secret has the same names.
	mustSh(t, sb, `mkdir -p /workspace/d /tmp/secret && cd /workspace/d && for f in passwd group hosts; do echo inside > $f; echo `+outside+` > /tmp/secret/$f; done &&
		for i in $(seq 100); do echo inside > f$i; echo `+outside+` > /tmp/secret/f$i; done`)
	loop, err := sb.Start(opCtx(t), sandbox.Command{Argv: []string{"sh", "-c", `cd /workspace && while [ ! -e /tmp/stop ]; do
		for target in /tmp/secret /etc /proc/1/root/etc; do
			mv d d.x && ln -s $target d && rm d && mv d.x d
		done
	done`}})
	if err != nil {
		t.Fatalf("Start(swap loop) = %v", err)
	}
	const checkpoints = 30
	since, failed, links := "", 0, 0
	for i := range checkpoints {
		if i%2 == 0 {
			since = "" // a full stream reads every file under d
		}
		var buf bytes.Buffer
		res, err := cp.Checkpoint(opCtx(t), sandbox.CheckpointRequest{Since: since}, &buf)
		if err != nil {
			failed++
			continue
		}
		es := ReadDelta(t, buf.Bytes(), res.Full)
		noneOutside(t, es)
		if slices.ContainsFunc(es, func(e DeltaEntry) bool { return e.Name == "d" }) {
			links++
		}
		since = res.Baseline
	}
	mustSh(t, sb, "touch /tmp/stop")
	// A context of its own: the checkpoints may have taken longer than
	// one operation's bound.
	if r, err := loop.Wait(opCtx(t)); err != nil || r.ExitCode != 0 {
		t.Errorf("swap loop: %+v, %v", r, err)
	}
	t.Logf("of %d checkpoints, %d failed (the tree changed under them) and %d found d a symlink", checkpoints, failed, links)
}

// noneOutside fails t if a checkpoint holds what lies outside /workspace.
func noneOutside(t *testing.T, es []DeltaEntry) {
	t.Helper()
	passwd, _ := os.ReadFile(filepath.Join("/etc", "passwd"))
	for _, e := range es {
		if bytes.Contains(e.Body, []byte(outside)) || bytes.Contains(e.Body, []byte("root:x:0:0")) ||
			(len(passwd) > 0 && bytes.Equal(e.Body, passwd)) {
			t.Errorf("checkpoint entry %q holds content from outside /workspace: %.60q", e.Name, e.Body)
		}
	}
}
