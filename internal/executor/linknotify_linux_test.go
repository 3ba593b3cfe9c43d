package executor

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/seccomp"
)

// The link notifier (linknotify_linux.go): commands forked from a thread
// with the link filter, as the executor's are, race the tracker with
// second names; the deltas must still be a whole walk's.

// linkLoopEnv, set in a child's environment, makes this test binary make
// links (linkLoopMain): "mode|dir|count|threads".
const linkLoopEnv = "AIRLOCK_TEST_LINK_LOOP"

// linkLoopMain makes count links in dir on each of threads threads and
// exits: mode "link" links dir/src to a new name and removes it; "git"
// writes a temporary file, links it to its final name and removes the
// temporary one (git's way of storing an object). The first error is
// printed as its errno's number and the exit code is 3.
func linkLoopMain() {
	f := strings.Split(os.Getenv(linkLoopEnv), "|")
	mode, dir := f[0], f[1]
	count, _ := strconv.Atoi(f[2])
	threads, _ := strconv.Atoi(f[3])
	var wg sync.WaitGroup
	errs := make(chan error, threads)
	for th := range threads {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range count {
				name := fmt.Sprintf("%s/o%d-%d-%d", dir, os.Getpid(), th, i)
				var err error
				switch mode {
				case "link":
					if err = unix.Link(dir+"/src", name); err == nil {
						err = unix.Unlink(name)
					}
				case "git":
					tmp := name + ".tmp"
					err = os.WriteFile(tmp, []byte("blob 12\x00hello world\n"), 0o444)
					if err == nil {
						err = unix.Link(tmp, name)
					}
					if err == nil {
						err = unix.Unlink(tmp)
					}
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		var no unix.Errno
		if errors.As(err, &no) {
			fmt.Println(int(no)) //nolint:forbidigo // the child answers its parent on stdout
		} else {
			fmt.Println(err) //nolint:forbidigo // the child answers its parent on stdout
		}
		os.Exit(3)
	}
	os.Exit(0)
}

// commandThread returns a thread that forks commands, as the executor's
// procThread; it ends (with any filter it carries) when the test does.
func commandThread(t testing.TB) *procThread {
	pt, err := newProcThread(false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(pt.ops) })
	return pt
}

// notify starts the link notifier on pt for tr, or skips.
func notify(t testing.TB, pt *procThread, tr *tracker) *linkNotifier {
	t.Helper()
	if err := seccomp.ContinueSupported(); err != nil {
		t.Skipf("no link notifier here: %v", err)
	}
	n, _, err := startLinkNotifier(pt, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.stop)
	return n
}

// start forks argv on pt in dir with env added, its stdout and stderr to
// out.
func start(t testing.TB, pt *procThread, dir string, env []string, out *os.File, argv ...string) int {
	t.Helper()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	pid, err := pt.forkExec(argv[0], argv, &syscall.ProcAttr{Dir: dir, Env: append(os.Environ(), env...), Files: []uintptr{null.Fd(), out.Fd(), out.Fd()}})
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// wait reaps pid and returns its exit code (-1 if killed).
func wait(t testing.TB, pid int) int {
	t.Helper()
	var ws syscall.WaitStatus
	for {
		_, err := syscall.Wait4(pid, &ws, 0, nil)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		return ws.ExitStatus()
	}
}

// run runs argv on pt in dir and returns its exit code and output.
func run(t testing.TB, pt *procThread, dir string, env []string, argv ...string) (int, string) {
	t.Helper()
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	code := wait(t, start(t, pt, dir, env, out, argv...))
	b, err := os.ReadFile(out.Name())
	if err != nil {
		t.Fatal(err)
	}
	return code, string(b)
}

// holdFirst makes tr's notifier, once started, hand the first link it
// notes to trapped and wait for release before it lets it go on.
func holdFirst(tr *tracker) (trapped chan seccomp.Notif, release chan struct{}) {
	trapped, release = make(chan seccomp.Notif), make(chan struct{})
	first := true
	tr.links.hook = func(req seccomp.Notif) {
		if first {
			first = false
			trapped <- req
			<-release
		}
	}
	return trapped, release
}

func linkTree(t *testing.T) string {
	dir := t.TempDir()
	randTree(t, dir, rand.New(rand.NewPCG(7, 7)), 20, 10)
	return dir
}

func names(es []fullEntry) []string {
	var got []string
	for _, e := range es {
		got = append(got, e.name)
	}
	return got
}

// TestLinkRace: a second name made in a directory just made, written
// through and removed while the tracker has not watched that directory
// (held off here): without the notifier the tracked delta misses the
// write (the race, reproduced); with it the link was noted before it
// went on and the delta is the whole walk's.
func TestLinkRace(t *testing.T) {
	for _, notified := range []bool{false, true} {
		t.Run(fmt.Sprintf("notified=%t", notified), func(t *testing.T) {
			dir := linkTree(t)
			tracked, whole, b1, b2 := trackedPair(t, dir)
			pt := commandThread(t)
			if notified {
				notify(t, pt, tracked.track)
			}
			tr := tracked.track
			tr.mu.Lock()
			code, out := run(t, pt, dir, nil, "/bin/sh", "-c", "mkdir d04/new && ln d02/s002/f01 d04/new/l && printf 'through the link' >>d04/new/l && rm d04/new/l")
			tr.mu.Unlock()
			if code != 0 {
				t.Fatalf("the command failed (%d): %s", code, out)
			}
			e1, _ := takeFull(t, tracked, b1)
			e2, _ := takeFull(t, whole, b2)
			missed := !slices.Equal(e1, e2)
			if notified && missed {
				t.Errorf("with the notifier, the tracked delta differs from the whole walk's:\n%s", diffEntries(e1, e2))
			}
			if !notified && !missed {
				t.Errorf("without the notifier, the tracked delta %q is the whole walk's: the race was not reproduced", names(e1))
			}
			if !slices.Contains(names(e2), "d02/s002/f01") {
				t.Errorf("the whole walk's delta = %q, want d02/s002/f01 in it", names(e2))
			}
		})
	}
}

// TestLinkInFlight: a link noted before a checkpoint and still in the
// kernel during it (held here between the note and its going on) lands
// in a directory made after that checkpoint's drain, unwatched; the
// pending set of that checkpoint must then be "everything". Without the
// look at the links in flight the next delta misses the write.
func TestLinkInFlight(t *testing.T) {
	for _, look := range []bool{false, true} {
		t.Run(fmt.Sprintf("look=%t", look), func(t *testing.T) {
			dir := linkTree(t)
			tracked, whole, b1, b2 := trackedPair(t, dir)
			pt := commandThread(t)
			tr := tracked.track
			tr.links.ignoreInflight = !look
			trapped, release := holdFirst(tr)
			notify(t, pt, tr)
			out, err := os.CreateTemp(t.TempDir(), "out")
			if err != nil {
				t.Fatal(err)
			}
			defer out.Close()
			pid := start(t, pt, dir, nil, out, "/bin/sh", "-c", "ln d02/s002/f01 d04/new/l && printf 'through the link' >>d04/new/l && rm d04/new/l")
			req := <-trapped
			s1, s2, _, _ := sameDelta(t, "with the link held", tracked, whole, b1, b2)
			tr.mu.Lock()
			must(t, os.Mkdir(dir+"/d04/new", 0o755))
			close(release)
			code := wait(t, pid)
			tr.mu.Unlock()
			if code != 0 {
				b, _ := os.ReadFile(out.Name())
				t.Fatalf("the command failed (%d): %s", code, b)
			}
			e1, _ := takeFull(t, tracked, s1)
			e2, _ := takeFull(t, whole, s2)
			missed := !slices.Equal(e1, e2)
			if look && missed {
				t.Errorf("the tracked delta differs from the whole walk's:\n%s", diffEntries(e1, e2))
			}
			if !look && !missed {
				t.Errorf("without the look at links in flight, the tracked delta %q is the whole walk's: the race was not reproduced", names(e1))
			}
			if req.Pid == 0 {
				t.Error("the notification has no thread id")
			}
		})
	}
}

// TestLinkAdversarial: what a sandbox process can do around the
// notification.
func TestLinkAdversarial(t *testing.T) {
	loop := func(mode, dir string, count, threads int) []string {
		return []string{fmt.Sprintf("%s=%s|%s|%d|%d", linkLoopEnv, mode, dir, count, threads)}
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	t.Run("KilledWhileHeld", func(t *testing.T) {
		// The caller is killed while its link waits for the answer:
		// the answer finds no call (ENOENT), the notifier goes on,
		// and the dead thread is not kept as in flight.
		dir := linkTree(t)
		tracked, _, _, _ := trackedPair(t, dir)
		pt := commandThread(t)
		tr := tracked.track
		trapped, release := holdFirst(tr)
		notify(t, pt, tr)
		pid := start(t, pt, dir, nil, os.Stderr, "/bin/ln", "d02/s002/f01", "l")
		<-trapped
		must(t, unix.Kill(pid, unix.SIGKILL))
		if code := wait(t, pid); code != -1 {
			t.Errorf("the killed command exited %d", code)
		}
		close(release)
		if _, busy, lost := tr.links.check(); busy || lost {
			t.Errorf("after the caller died: busy %t, lost %t; want neither", busy, lost)
		}
		if _, err := os.Lstat(dir + "/l"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the killed link was made: %v", err)
		}
		if code, out := run(t, pt, dir, nil, "/bin/ln", "d02/s002/f01", "l2"); code != 0 {
			t.Errorf("a link after the kill failed (%d): %s", code, out)
		}
	})
	t.Run("ManyAtOnce", func(t *testing.T) {
		// 8 processes of 4 threads, 250 links each, at once: every
		// link is noted and goes on, and none is in flight after.
		dir := t.TempDir()
		write(t, dir+"/src", "x")
		tr := newTracker(dir, "", ownPids)
		t.Cleanup(tr.close)
		pt := commandThread(t)
		notify(t, pt, tr)
		const procs, threads, count = 8, 4, 250
		var pids []int
		for range procs {
			pids = append(pids, start(t, pt, dir, loop("link", dir, count, threads), os.Stderr, self, "-test.run=^$"))
		}
		for _, pid := range pids {
			if code := wait(t, pid); code != 0 {
				t.Errorf("a linking process exited %d", code)
			}
		}
		gen, busy, lost := tr.links.check()
		if gen < procs*threads*count || busy || lost {
			t.Errorf("after %d links: %d noted, busy %t, lost %t", procs*threads*count, gen, busy, lost)
		}
	})
	t.Run("OutsideWorkspace", func(t *testing.T) {
		// A link in a directory outside the workspace is noted too
		// (the filter cannot read where it goes): the next delta
		// walks the whole tree, and is right.
		dir := linkTree(t)
		other := t.TempDir()
		write(t, other+"/f", "x")
		tracked, whole, b1, b2 := trackedPair(t, dir)
		pt := commandThread(t)
		notify(t, pt, tracked.track)
		if code, out := run(t, pt, other, nil, "/bin/ln", "f", "g"); code != 0 {
			t.Fatalf("ln failed (%d): %s", code, out)
		}
		_, _, w1, w2 := sameDelta(t, "after a link outside", tracked, whole, b1, b2)
		if w1 != w2 {
			t.Errorf("the delta after a link outside walked %d entries, want the whole tree's %d", w1, w2)
		}
	})
	t.Run("FailClosed", func(t *testing.T) {
		// The notifier gone (its listener closed): a link fails with
		// ENOSYS, it never goes on unnoted.
		dir := t.TempDir()
		write(t, dir+"/src", "x")
		tr := newTracker(dir, "", ownPids)
		t.Cleanup(tr.close)
		pt := commandThread(t)
		n := notify(t, pt, tr)
		if code, out := run(t, pt, dir, loop("link", dir, 1, 1), self, "-test.run=^$"); code != 0 {
			t.Fatalf("a link with the notifier failed (%d): %s", code, out)
		}
		n.stop()
		code, out := run(t, pt, dir, loop("link", dir, 1, 1), self, "-test.run=^$")
		if code != 3 || strings.TrimSpace(out) != strconv.Itoa(int(unix.ENOSYS)) {
			t.Errorf("a link after the notifier stopped: exit %d, %q; want exit 3, errno %d (ENOSYS)", code, out, unix.ENOSYS)
		}
		if ents, _ := os.ReadDir(dir); len(ents) != 1 {
			t.Errorf("the directory holds %d entries, want src alone", len(ents))
		}
	})
	t.Run("OwnListenerRefused", func(t *testing.T) {
		// A command cannot stack a filter with a listener of its own
		// (EBUSY), and cannot answer its own links.
		pt := commandThread(t)
		dir := t.TempDir()
		tr := newTracker(dir, "", ownPids)
		t.Cleanup(tr.close)
		notify(t, pt, tr)
		var err error
		pt.do(func() {
			_, err = seccomp.InstallListener([]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}})
		})
		if !errors.Is(err, unix.EBUSY) {
			t.Errorf("a second listener on the command thread: %v, want EBUSY", err)
		}
	})
}

// BenchmarkLinks: a loop of links in a tracked directory, from a command
// thread with and without the link filter; one process makes b.N. "git":
// git's way of storing an object (write a temporary file, link it to its
// name, remove the temporary one); "link": a link and its removal alone.
func BenchmarkLinks(b *testing.B) {
	self, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	for _, mode := range []string{"git", "link"} {
		for _, notified := range []bool{false, true} {
			b.Run(fmt.Sprintf("%s/notified=%t", mode, notified), func(b *testing.B) {
				dir := b.TempDir()
				must(b, os.MkdirAll(filepath.Join(dir, "objects"), 0o755))
				must(b, os.WriteFile(filepath.Join(dir, "objects", "src"), []byte("x"), 0o644))
				tr := newTracker(dir, "", ownPids)
				b.Cleanup(tr.close)
				<-tr.started
				pt := commandThread(b)
				if notified {
					notify(b, pt, tr)
				}
				env := []string{fmt.Sprintf("%s=%s|%s|%d|1", linkLoopEnv, mode, dir+"/objects", b.N)}
				b.ResetTimer()
				code, out := run(b, pt, dir, env, self, "-test.run=^$")
				b.StopTimer()
				if code != 0 {
					b.Fatalf("the loop failed (%d): %s", code, out)
				}
			})
		}
	}
}
