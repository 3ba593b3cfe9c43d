package executor

import (
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// asSelf runs f as the test process: the identity switch is the sandbox's
// business, tested by the sandbox suite.
func asSelf(f func() error) error { return f() }

// watching is a watcher running on real files, its events collected.
type watching struct {
	t        *testing.T
	w        *watcher
	quit     chan struct{}
	quitOnce sync.Once
	ran      chan struct{} // closed when run has returned
	runErr   error         // run's result, set before ran is closed
	wg       sync.WaitGroup

	mu  sync.Mutex
	got []execproto.WatchEvent // guarded by mu
	// wake is signalled when got grows.
	wake chan struct{}
}

func startWatch(t *testing.T, root string, recursive bool, maxDirs, maxQueue int) *watching {
	t.Helper()
	w, err := newWatcher(root, recursive, asSelf, maxDirs, maxQueue)
	if err != nil {
		t.Fatalf("newWatcher(%s) = %v", root, err)
	}
	x := &watching{t: t, w: w, quit: make(chan struct{}), ran: make(chan struct{}), wake: make(chan struct{}, 1)}
	x.wg.Add(2)
	go func() {
		defer x.wg.Done()
		w.forward(x.quit, x.record)
	}()
	go func() {
		defer x.wg.Done()
		x.runErr = w.run()
		close(x.ran)
	}()
	t.Cleanup(func() {
		w.close()
		if err := x.wait(); err != nil {
			t.Errorf("run = %v after close, want nil", err)
		}
	})
	return x
}

func (x *watching) record(ev execproto.WatchEvent) error {
	if err := ev.Validate(); err != nil {
		x.t.Errorf("the watcher sent an invalid event %+v: %v", ev, err)
	}
	x.mu.Lock()
	x.got = append(x.got, ev)
	x.mu.Unlock()
	select {
	case x.wake <- struct{}{}:
	default:
	}
	return nil
}

// wait waits for run to return, lets forward send what is left, and
// returns run's error. The bound is on a hang, not a speed.
func (x *watching) wait() error {
	select {
	case <-x.ran:
	case <-time.After(10 * time.Second):
		x.t.Fatal("the watch did not end within 10s")
	}
	x.quitOnce.Do(func() { close(x.quit) })
	x.wg.Wait()
	return x.runErr
}

func (x *watching) events() []execproto.WatchEvent {
	x.mu.Lock()
	defer x.mu.Unlock()
	return slices.Clone(x.got)
}

// waitFor waits until an event equal to want has arrived. The bound is on
// a hang, not a speed.
func (x *watching) waitFor(want execproto.WatchEvent) {
	x.t.Helper()
	deadline := time.After(10 * time.Second)
	for !slices.Contains(x.events(), want) {
		select {
		case <-x.wake:
		case <-deadline:
			x.t.Fatalf("no event %+v within 10s; got %+v", want, x.events())
		}
	}
}

// mark writes a file under dir and waits for its create event: every event
// of what was done before has arrived by then.
func (x *watching) mark(dir string) {
	x.t.Helper()
	p := filepath.Join(dir, "mark-"+time.Now().Format("150405.000000000"))
	must(x.t, os.WriteFile(p, nil, 0o644))
	x.waitFor(execproto.WatchEvent{Op: execproto.WatchCreate, Path: p})
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func ev(op, p string, dir bool) execproto.WatchEvent {
	return execproto.WatchEvent{Op: op, Path: p, Dir: dir}
}

func TestWatchEvents(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	must(t, os.Mkdir(filepath.Join(root, "old-sub"), 0o755))
	tests := []struct {
		name string
		do   func(t *testing.T)
		want []execproto.WatchEvent
	}{
		{
			"create", func(t *testing.T) { must(t, os.WriteFile(filepath.Join(root, "a"), nil, 0o644)) },
			[]execproto.WatchEvent{ev("create", root+"/a", false)},
		},
		{
			"write", func(t *testing.T) { must(t, os.WriteFile(filepath.Join(root, "a"), []byte("x"), 0o644)) },
			[]execproto.WatchEvent{ev("write", root+"/a", false)},
		},
		{
			"chmod", func(t *testing.T) { must(t, os.Chmod(filepath.Join(root, "a"), 0o600)) },
			[]execproto.WatchEvent{ev("chmod", root+"/a", false)},
		},
		{
			"rename", func(t *testing.T) { must(t, os.Rename(filepath.Join(root, "a"), filepath.Join(root, "b"))) },
			[]execproto.WatchEvent{ev("rename", root+"/a", false), ev("create", root+"/b", false)},
		},
		{
			"remove", func(t *testing.T) { must(t, os.Remove(filepath.Join(root, "b"))) },
			[]execproto.WatchEvent{ev("remove", root+"/b", false)},
		},
		{
			"mkdir", func(t *testing.T) { must(t, os.Mkdir(filepath.Join(root, "d"), 0o755)) },
			[]execproto.WatchEvent{ev("create", root+"/d", true)},
		},
		{
			"rmdir", func(t *testing.T) { must(t, os.Remove(filepath.Join(root, "d"))) },
			[]execproto.WatchEvent{ev("remove", root+"/d", true)},
		},
	}
	// Not recursive: what happens below the first level is not reported.
	x := startWatch(t, root, false, 16, 64)
	for _, tt := range tests {
		// Every event of the case before has arrived (os.WriteFile may
		// report two writes: the truncation and the data).
		x.mark(root)
		before := len(x.events())
		tt.do(t)
		for _, want := range tt.want {
			x.waitFor(want)
		}
		// The mark's own events may still trail in: the first event of
		// the case is the first one that is not about a mark.
		for _, got := range x.events()[before:] {
			if strings.HasPrefix(filepath.Base(got.Path), "mark-") {
				continue
			}
			if got != tt.want[0] {
				t.Errorf("%s: first event %+v, want %+v", tt.name, got, tt.want[0])
			}
			break
		}
	}
	before := len(x.events())
	must(t, os.WriteFile(filepath.Join(root, "old-sub", "deep"), nil, 0o644))
	x.mark(root)
	for _, e := range x.events()[before:] {
		if strings.Contains(e.Path, "old-sub") {
			t.Errorf("a watch that is not recursive reported %+v", e)
		}
	}
}

func TestWatchRecursive(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(root, "old", "deeper"), 0o755))
	// A link out of the tree is not followed.
	must(t, os.Symlink(outside, filepath.Join(root, "link")))
	x := startWatch(t, root, true, 64, 256)

	must(t, os.WriteFile(filepath.Join(root, "old", "deeper", "f"), []byte("1"), 0o644))
	x.waitFor(ev("create", root+"/old/deeper/f", false))
	x.waitFor(ev("write", root+"/old/deeper/f", false))

	// A tree made at once: its files are reported even if they were there
	// before the new directory's watch.
	must(t, os.MkdirAll(filepath.Join(root, "new", "a", "b"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "new", "a", "b", "g"), nil, 0o644))
	x.waitFor(ev("create", root+"/new", true))
	x.waitFor(ev("create", root+"/new/a/b/g", false))
	must(t, os.WriteFile(filepath.Join(root, "new", "a", "b", "g"), []byte("2"), 0o644))
	x.waitFor(ev("write", root+"/new/a/b/g", false))
	// A file written there at once is reported written, whether its
	// write came before the directory's watch or after.
	must(t, os.MkdirAll(filepath.Join(root, "new2", "c"), 0o755))
	must(t, os.WriteFile(filepath.Join(root, "new2", "c", "full"), []byte("content"), 0o644))
	x.waitFor(ev("write", root+"/new2/c/full", false))

	// A directory moved in is watched; one moved out is not.
	moved := filepath.Join(outside, "tree")
	must(t, os.MkdirAll(filepath.Join(moved, "in"), 0o755))
	must(t, os.Rename(moved, filepath.Join(root, "came")))
	x.waitFor(ev("create", root+"/came", true))
	must(t, os.WriteFile(filepath.Join(root, "came", "in", "h"), nil, 0o644))
	x.waitFor(ev("create", root+"/came/in/h", false))
	must(t, os.Rename(filepath.Join(root, "old"), filepath.Join(outside, "gone")))
	x.waitFor(ev("rename", root+"/old", true))

	before := len(x.events())
	must(t, os.WriteFile(filepath.Join(outside, "gone", "deeper", "f"), []byte("after"), 0o644))
	must(t, os.WriteFile(filepath.Join(outside, "via-link"), nil, 0o644))
	x.mark(root)
	for _, e := range x.events()[before:] {
		// Matched below root, so that a temporary directory named like
		// them (TMPDIR=/tmp/old-…) does not match.
		rel := strings.TrimPrefix(e.Path, root)
		if strings.Contains(rel, "gone") || strings.Contains(rel, "old") || strings.Contains(rel, "via-link") || strings.HasPrefix(rel, "/link/") {
			t.Errorf("an event from outside the watched tree: %+v", e)
		}
	}
}

func TestWatchRootGone(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name string
		gone func(root string) error
		last execproto.WatchEvent
	}{
		{"removed", os.Remove, execproto.WatchEvent{Op: execproto.WatchRemove, Dir: true}},
		{"moved", func(root string) error { return os.Rename(root, root+"-moved") }, execproto.WatchEvent{Op: execproto.WatchRename, Dir: true}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := filepath.Join(t.TempDir(), "w")
			must(t, os.Mkdir(root, 0o755))
			x := startWatch(t, root, true, 16, 64)
			must(t, tt.gone(root))
			if err := x.wait(); err != nil {
				t.Fatalf("run = %v, want nil once the root is gone", err)
			}
			got := x.events()
			want := tt.last
			want.Path = root
			if len(got) == 0 || got[len(got)-1] != want {
				t.Errorf("events %+v, want the last to be %+v", got, want)
			}
		})
	}
}

func TestWatchErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "file"), nil, 0o644))
	for _, tt := range []struct {
		path string
		want unix.Errno
	}{
		{filepath.Join(dir, "missing"), unix.ENOENT},
		{filepath.Join(dir, "file"), unix.ENOTDIR},
	} {
		w, err := newWatcher(tt.path, true, asSelf, 16, 64)
		if w != nil {
			w.close()
		}
		var pe *fs.PathError
		if !errors.Is(err, tt.want) || !errors.As(err, &pe) {
			t.Errorf("newWatcher(%s) = %v, want a PathError wrapping %v", tt.path, err, tt.want)
		}
		if r := errResult(err); r.Errno != unix.ErrnoName(tt.want) {
			t.Errorf("errResult(%v).Errno = %q, want %q", err, r.Errno, unix.ErrnoName(tt.want))
		}
	}
	bad := errors.New("no identity")
	if _, err := newWatcher(dir, false, func(func() error) error { return bad }, 16, 64); !errors.Is(err, bad) {
		t.Errorf("newWatcher with a failing identity switch = %v, want its error", err)
	}
}

// TestWatchBounds: past maxDirs directories, and past maxQueue events the
// sender has not taken, the watcher reports an overflow instead of growing.
func TestWatchBounds(t *testing.T) {
	t.Parallel()
	t.Run("directories", func(t *testing.T) {
		t.Parallel()
		root := t.TempDir()
		for _, d := range []string{"a", "b", "c", "d"} {
			must(t, os.Mkdir(filepath.Join(root, d), 0o755))
		}
		// The root and two more.
		x := startWatch(t, root, true, 3, 64)
		if n := len(x.w.dirs); n != 3 {
			t.Errorf("%d directories watched, want 3", n)
		}
		x.waitFor(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: root + "/c"})
		must(t, os.Mkdir(filepath.Join(root, "e"), 0o755))
		x.waitFor(ev("create", root+"/e", true))
		x.waitFor(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: root + "/e"})
	})
	t.Run("queue", func(t *testing.T) {
		t.Parallel()
		const limit = 8
		w := &watcher{root: "/w", q: make(chan execproto.WatchEvent, limit+1), maxQueue: limit}
		for i := range 3 * limit {
			w.push(ev(execproto.WatchCreate, "/w/f"+string(rune('a'+i)), false))
		}
		if len(w.q) != limit+1 {
			t.Fatalf("queue holds %d events, want %d", len(w.q), limit+1)
		}
		var got []execproto.WatchEvent
		for range limit/2 + 1 {
			got = append(got, <-w.q)
		}
		// Drained to half: events are queued again.
		w.push(ev(execproto.WatchCreate, "/w/after", false))
		for len(w.q) > 0 {
			got = append(got, <-w.q)
		}
		if len(got) != limit+2 || got[limit].Op != execproto.WatchOverflow || got[limit+1].Path != "/w/after" {
			t.Errorf("events %+v, want %d creates, an overflow, then /w/after", got, limit)
		}
	})
}

func TestParseInotify(t *testing.T) {
	rec := func(wd int32, mask uint32, name string, pad int) []byte {
		b := make([]byte, unix.SizeofInotifyEvent)
		binary.NativeEndian.PutUint32(b[0:], uint32(wd))
		binary.NativeEndian.PutUint32(b[4:], mask)
		binary.NativeEndian.PutUint32(b[12:], uint32(len(name)+pad))
		return append(append(b, name...), make([]byte, pad)...)
	}
	tests := []struct {
		name    string
		in      []byte
		want    []inotifyEvent
		wantErr bool
	}{
		{"empty", nil, nil, false},
		{"one without a name", rec(1, unix.IN_DELETE_SELF, "", 0), []inotifyEvent{{1, unix.IN_DELETE_SELF, 0, ""}}, false},
		{
			"padded names", append(rec(1, unix.IN_CREATE, "a", 15), rec(2, unix.IN_MODIFY, "bc", 2)...),
			[]inotifyEvent{{1, unix.IN_CREATE, 0, "a"}, {2, unix.IN_MODIFY, 0, "bc"}},
			false,
		},
		{"short header", rec(1, unix.IN_CREATE, "", 0)[:10], nil, true},
		{"name past the end", rec(1, unix.IN_CREATE, "abc", 0)[:unix.SizeofInotifyEvent+2], nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseInotify(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseInotify = %v, want error %t", err, tt.wantErr)
			}
			if err == nil && !slices.Equal(got, tt.want) {
				t.Errorf("parseInotify = %+v, want %+v", got, tt.want)
			}
		})
	}
}

// FuzzParseInotify: the records come from the kernel, but a bad length must
// still be an error, never a panic or a read past the buffer.
func FuzzParseInotify(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		evs, err := parseInotify(b)
		if err == nil && len(b) > 0 && len(evs) == 0 {
			t.Fatalf("parseInotify(% x) = no events and no error", b)
		}
		for _, e := range evs {
			if strings.IndexByte(e.name, 0) >= 0 {
				t.Fatalf("name %q holds a NUL", e.name)
			}
		}
	})
}
