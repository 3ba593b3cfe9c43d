package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// watchLog collects what a watch reports.
type watchLog struct {
	t      *testing.T
	cancel context.CancelFunc
	closed chan struct{} // closed when the watch channel is

	mu  sync.Mutex
	got []sandbox.WatchEvent // guarded by mu
	// wake is signalled when got grows.
	wake chan struct{}
}

// startWatch watches path in sb until the test ends.
func startWatch(t *testing.T, sb sandbox.Sandbox, path string, recursive bool) *watchLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := sb.Watch(ctx, path, recursive)
	if err != nil {
		cancel()
		t.Fatalf("Watch(%s, recursive %t) = %v", path, recursive, err)
	}
	w := &watchLog{t: t, cancel: cancel, closed: make(chan struct{}), wake: make(chan struct{}, 1)}
	go func() {
		defer close(w.closed)
		for ev := range ch {
			w.mu.Lock()
			w.got = append(w.got, ev)
			w.mu.Unlock()
			select {
			case w.wake <- struct{}{}:
			default:
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-w.closed
	})
	return w
}

func (w *watchLog) events() []sandbox.WatchEvent {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.got)
}

// waitFor waits until every event in want has arrived.
func (w *watchLog) waitFor(want ...sandbox.WatchEvent) {
	w.t.Helper()
	deadline := time.After(opTimeout)
	for {
		got := w.events()
		missing := slices.DeleteFunc(slices.Clone(want), func(e sandbox.WatchEvent) bool { return slices.Contains(got, e) })
		if len(missing) == 0 {
			return
		}
		select {
		case <-w.wake:
		case <-w.closed:
			w.t.Fatalf("the watch ended without %+v; got %+v", missing, w.events())
		case <-deadline:
			w.t.Fatalf("no %+v within %v; got %+v", missing, opTimeout, got)
		}
	}
}

// waitClosed waits for the watch channel to be closed.
func (w *watchLog) waitClosed(what string) {
	w.t.Helper()
	select {
	case <-w.closed:
	case <-time.After(opTimeout):
		w.t.Fatalf("the watch channel is still open %v after %s", opTimeout, what)
	}
}

func wev(op sandbox.WatchOp, path string, dir bool) sandbox.WatchEvent {
	return sandbox.WatchEvent{Op: op, Path: path, Dir: dir}
}

func (s *suite) testWatch(t *testing.T) {
	sb := s.create(t, sandbox.Spec{})

	t.Run("Events", func(t *testing.T) {
		// Commands and the file API both show up, one level deep only.
		t.Parallel()
		mustSh(t, sb, "mkdir -p /workspace/ev/old")
		w := startWatch(t, sb, "/workspace/ev", false)
		mustSh(t, sb, "cd /workspace/ev && echo a > f && echo b >> f && chmod 600 f && mv f g && rm g && mkdir d && echo x > old/deep")
		if err := sb.WriteFile(opCtx(t), "/workspace/ev/api.txt", strings.NewReader("x"), 0o644); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		w.waitFor(
			wev(sandbox.WatchCreate, "/workspace/ev/f", false),
			wev(sandbox.WatchWrite, "/workspace/ev/f", false),
			wev(sandbox.WatchChmod, "/workspace/ev/f", false),
			wev(sandbox.WatchRename, "/workspace/ev/f", false),
			wev(sandbox.WatchCreate, "/workspace/ev/g", false),
			wev(sandbox.WatchRemove, "/workspace/ev/g", false),
			wev(sandbox.WatchCreate, "/workspace/ev/d", true),
			wev(sandbox.WatchCreate, "/workspace/ev/api.txt", false),
			wev(sandbox.WatchWrite, "/workspace/ev/api.txt", false),
		)
		got := w.events()
		if i, j := slices.Index(got, wev(sandbox.WatchCreate, "/workspace/ev/f", false)), slices.Index(got, wev(sandbox.WatchRemove, "/workspace/ev/g", false)); i > j {
			t.Errorf("events out of order: %+v", got)
		}
		for _, e := range got {
			if strings.Contains(e.Path, "old/") {
				t.Errorf("a watch that is not recursive reported %+v", e)
			}
		}
	})

	t.Run("Recursive", func(t *testing.T) {
		t.Parallel()
		mustSh(t, sb, "mkdir -p /workspace/rec/x/y")
		w := startWatch(t, sb, "/workspace/rec", true)
		mustSh(t, sb, "cd /workspace/rec && echo 1 > x/y/old && mkdir -p new/a/b && echo 2 > new/a/b/f && mv new/a/b/f new/a/b/g && rm -r x")
		w.waitFor(
			wev(sandbox.WatchCreate, "/workspace/rec/x/y/old", false),
			wev(sandbox.WatchCreate, "/workspace/rec/new", true),
			wev(sandbox.WatchCreate, "/workspace/rec/new/a/b/g", false),
			wev(sandbox.WatchRemove, "/workspace/rec/x/y/old", false),
			wev(sandbox.WatchRemove, "/workspace/rec/x", true),
		)
		// New directories are watched from then on.
		if err := sb.WriteFile(opCtx(t), "/workspace/rec/new/a/b/api", strings.NewReader("x"), 0o644); err != nil {
			t.Fatalf("WriteFile = %v", err)
		}
		w.waitFor(wev(sandbox.WatchWrite, "/workspace/rec/new/a/b/api", false))
	})

	t.Run("Cancel", func(t *testing.T) {
		t.Parallel()
		mustSh(t, sb, "mkdir -p /workspace/cancel")
		w := startWatch(t, sb, "/workspace/cancel", true)
		w.cancel()
		w.waitClosed("its context ended")
		// The sandbox still works, and so does a new watch.
		w = startWatch(t, sb, "/workspace/cancel", true)
		mustSh(t, sb, "touch /workspace/cancel/again")
		w.waitFor(wev(sandbox.WatchCreate, "/workspace/cancel/again", false))
	})

	t.Run("RootRemoved", func(t *testing.T) {
		t.Parallel()
		mustSh(t, sb, "mkdir -p /workspace/doomed")
		w := startWatch(t, sb, "/workspace/doomed", false)
		mustSh(t, sb, "rmdir /workspace/doomed")
		w.waitFor(wev(sandbox.WatchRemove, "/workspace/doomed", true))
		w.waitClosed("the watched directory was removed")
	})

	t.Run("Errors", func(t *testing.T) {
		t.Parallel()
		if _, err := sb.Watch(opCtx(t), "/workspace/no-such-dir", true); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("Watch(missing) = %v, want fs.ErrNotExist", err)
		}
		mustSh(t, sb, "echo x > /workspace/not-a-dir")
		if _, err := sb.Watch(opCtx(t), "/workspace/not-a-dir", false); err == nil || !strings.Contains(err.Error(), "ENOTDIR") && !strings.Contains(err.Error(), "not a directory") {
			t.Errorf("Watch(a file) = %v, want a not-a-directory error", err)
		}
		if _, err := sb.Watch(opCtx(t), "relative", false); err == nil {
			t.Errorf("Watch(relative) = nil error, want one")
		}
		// A directory the sandbox user may not read cannot be watched
		// (rootless sandboxes have only root).
		if mustSh(t, sb, "id -u") == "0\n" {
			return
		}
		private := "/tmp/private-" + unique()
		_, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"mkdir", "-m", "700", private}, User: "root"})
		wantExit(t, "mkdir as root", r, 0, errOut)
		if _, err := sb.Watch(opCtx(t), private, false); !errors.Is(err, fs.ErrPermission) {
			t.Errorf("Watch(a root-only directory) = %v, want fs.ErrPermission", err)
		}
	})

	t.Run("PathTricks", func(t *testing.T) {
		// Links and ".." resolve inside the sandbox, as for every file
		// operation; links below a recursive watch are not followed.
		t.Parallel()
		mustSh(t, sb, "mkdir -p /workspace/tricks && ln -s / /workspace/tricks/esc && ln -s ../../../../ /workspace/tricks/up")
		for _, p := range []string{"/workspace/tricks/esc/tmp", "/workspace/tricks/up/tmp", "/workspace/../../tmp"} {
			w := startWatch(t, sb, p, false)
			name := "airlock-watch-" + unique()
			host := "/tmp/" + name + "-host"
			if err := os.WriteFile(host, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.Remove(host) })
			mustSh(t, sb, "touch /tmp/"+name)
			w.waitFor(wev(sandbox.WatchCreate, p+"/"+name, false))
			for _, e := range w.events() {
				if strings.Contains(e.Path, name+"-host") {
					t.Errorf("Watch(%s) reported the host's file: %+v", p, e)
				}
			}
		}
		w := startWatch(t, sb, "/workspace/tricks", true)
		name := "airlock-watch-" + unique()
		mustSh(t, sb, "touch /tmp/"+name+" /workspace/tricks/"+name)
		w.waitFor(wev(sandbox.WatchCreate, "/workspace/tricks/"+name, false))
		for _, e := range w.events() {
			if strings.Contains(e.Path, "esc/") || strings.Contains(e.Path, "up/") {
				t.Errorf("a recursive watch followed a symlink: %+v", e)
			}
		}
	})

	t.Run("Destroy", func(t *testing.T) {
		t.Parallel()
		other := s.create(t, sandbox.Spec{})
		w := startWatch(t, other, "/workspace", true)
		if err := other.Destroy(opCtx(t)); err != nil {
			t.Fatalf("Destroy = %v", err)
		}
		w.waitClosed("the sandbox was destroyed")
		if _, err := other.Watch(opCtx(t), "/workspace", false); err == nil {
			t.Errorf("Watch on a destroyed sandbox = nil error, want one")
		}
	})

	t.Run("Disk", func(t *testing.T) {
		t.Parallel()
		dm, ok := sb.(sandbox.DiskMeasurer)
		if !ok {
			t.Skip("the backend does not measure disk use")
		}
		before, err := dm.MeasureDisk(opCtx(t))
		if err != nil {
			t.Fatalf("MeasureDisk = %v", err)
		}
		if before.Total <= 0 || before.Used < 0 || before.Used > before.Total {
			t.Fatalf("MeasureDisk = %+v, want 0 <= used <= total, total > 0", before)
		}
		// A pod's /tmp is on the node's disk, which other work (the
		// suite's other cases) writes and frees at the same time: a
		// measure that grew less than the file is tried again with
		// another file, and one that grew by it passes.
		t.Cleanup(func() { mustSh(t, sb, "rm -f /tmp/disk-probe-*") })
		first := before
		var seen []string
		for i := range 5 {
			mustSh(t, sb, fmt.Sprintf("head -c 4194304 /dev/zero > /tmp/disk-probe-%d", i))
			after, err := dm.MeasureDisk(opCtx(t))
			if err != nil {
				t.Fatalf("MeasureDisk = %v", err)
			}
			if after.Used >= before.Used+3<<20 {
				return
			}
			seen = append(seen, fmt.Sprintf("%+v after %d MiB", after, 4*(i+1)))
			before = after
		}
		t.Errorf("MeasureDisk never grew by 3 MiB over a write of 4 MiB to /tmp: first %+v, then %s", first, strings.Join(seen, ", "))
	})
}
