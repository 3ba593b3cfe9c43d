package linux

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// poolFiles returns the names in l's pool.
func poolFiles(t *testing.T, l *idLocks) []string {
	t.Helper()
	ents, err := os.ReadDir(l.pool())
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// idNames returns the names in l's id directory.
func idNames(t *testing.T, l *idLocks) []string {
	t.Helper()
	ents, err := os.ReadDir(l.dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

func inode(t *testing.T, f *os.File) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// TestIDLockPoolReuse: the lock files are reused, not made anew per
// sandbox: the same file serves sandbox after sandbox, two held ids never
// share one, a sweep leaves pool files alone, and beyond the pool a new
// file is made and removed again.
func TestIDLockPoolReuse(t *testing.T) {
	l := &idLocks{dir: filepath.Join(t.TempDir(), "ids")}
	a, err := l.hold("sb-a")
	if err != nil {
		t.Fatal(err)
	}
	ino := inode(t, a.f)
	l.release(a)
	for i := range 20 {
		h, err := l.hold(fmt.Sprint("sb-n", i))
		if err != nil {
			t.Fatal(err)
		}
		if got := inode(t, h.f); got != ino {
			t.Fatalf("sandbox %d got file %d, want the released %d again", i, got, ino)
		}
		l.release(h)
	}
	// Another process (no memory of this one's releases) takes it too.
	other := &idLocks{dir: l.dir}
	h, err := other.hold("sb-b")
	if err != nil || inode(t, h.f) != ino {
		t.Fatalf("another process: hold = %v; want the pool's free file", err)
	}
	other.release(h)
	// Held at once: distinct files; more than the pool: new ones.
	seen := map[uint64]string{}
	var held []*heldID
	for i := range idPoolMax + 3 {
		id := fmt.Sprint("sb-x", i)
		h, err := l.hold(id)
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[inode(t, h.f)]; ok {
			t.Fatalf("%s and %s hold one lock file", prev, id)
		}
		seen[inode(t, h.f)] = id
		held = append(held, h)
		if !l.isLive(id) {
			t.Errorf("%s not live while held", id)
		}
	}
	if n := len(poolFiles(t, l)); n != idPoolMax {
		t.Errorf("pool holds %d files, want %d", n, idPoolMax)
	}
	l.sweep()
	if n := len(idNames(t, l)); n != idPoolMax+3 {
		t.Errorf("after a sweep beside %d held ids: %d names", idPoolMax+3, n)
	}
	for _, h := range held {
		l.release(h)
	}
	if names := idNames(t, l); len(names) != 0 {
		t.Errorf("names left after release: %v", names)
	}
	if n := len(poolFiles(t, l)); n != idPoolMax {
		t.Errorf("pool holds %d files after release, want %d", n, idPoolMax)
	}
	l.forget()
	if _, err := os.Stat(l.pool()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("forget left the pool (stat: %v)", err)
	}
}

// TestIDLockDiedAtEachStep: a holder killed between any two steps of hold
// leaves nothing that looks live, nothing a new holder of the same id or
// another trips on, and nothing a sweep does not clear. What a kill leaves
// is what died leaves: the files closed (the kernel drops the flock),
// nothing undone.
func TestIDLockDiedAtEachStep(t *testing.T) {
	for _, tt := range []struct {
		step   string
		noPool bool
		// stale: the id keeps a name (unlocked) until a sweep.
		stale bool
	}{
		{step: "opened"},
		{step: "locked"},
		{step: "linked", stale: true},
		{step: "fresh-locked", noPool: true},
		{step: "fresh-linked", noPool: true, stale: true},
	} {
		t.Run(tt.step, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "ids")
			dead := &idLocks{dir: dir, noPool: tt.noPool, died: func(s string) bool { return s == tt.step }}
			if _, err := dead.hold("sb-dead"); !errors.Is(err, errDied) {
				t.Fatalf("hold = %v, want it to die at %s", err, tt.step)
			}
			l := &idLocks{dir: dir} // a later process
			if l.isLive("sb-dead") {
				t.Error("the dead holder's id is live")
			}
			if live, err := l.live(); err != nil || len(live) != 0 {
				t.Errorf("live = %v, %v; want none", live, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "sb-dead")); (err == nil) != tt.stale {
				t.Errorf("the dead id's name exists: %v, want %v", err == nil, tt.stale)
			}
			// Another sandbox: never the stale file, and the dead id does
			// not become live.
			h, err := l.hold("sb-next")
			if err != nil {
				t.Fatal(err)
			}
			if l.isLive("sb-dead") {
				t.Error("the dead id is live beside a new holder")
			}
			if tt.stale {
				if old, err := os.Open(filepath.Join(dir, "sb-dead")); err == nil {
					if inode(t, old) == inode(t, h.f) {
						t.Error("a new sandbox took the file the dead id still names")
					}
					old.Close()
				}
			}
			// The same id again, over what was left.
			again, err := l.hold("sb-dead")
			if err != nil {
				t.Fatalf("hold of the dead id again: %v", err)
			}
			if !l.isLive("sb-dead") {
				t.Error("the id held again is not live")
			}
			l.release(again)
			l.release(h)
			// A sweep after a death at the same step.
			dead2 := &idLocks{dir: dir, noPool: tt.noPool, died: dead.died}
			if _, err := dead2.hold("sb-dead2"); !errors.Is(err, errDied) {
				t.Fatalf("second hold = %v, want it to die", err)
			}
			l.sweep()
			if names := idNames(t, l); len(names) != 0 {
				t.Errorf("names left after a sweep: %v", names)
			}
			// Every pool file is free again.
			var all []*heldID
			for range len(poolFiles(t, l)) {
				h, err := (&idLocks{dir: dir}).hold(fmt.Sprint("sb-p", len(all)))
				if err != nil {
					t.Fatal(err)
				}
				if h.k < 0 {
					t.Errorf("a new file with %d pool files and %d held", len(poolFiles(t, l)), len(all))
				}
				all = append(all, h)
			}
			for _, h := range all {
				l.release(h)
			}
		})
	}
}

// TestIDLockProbeOfReusedFile: a liveness probe or a sweep that opened an
// id's file before its holder released it, when another sandbox has taken
// the file since (or the same id is held again on another file), neither
// calls the released id live nor removes the new holder's name. Without
// the name check (sameFile) both would: the file is locked, for the other.
func TestIDLockProbeOfReusedFile(t *testing.T) {
	l := &idLocks{dir: filepath.Join(t.TempDir(), "ids")}
	x, err := l.hold("sb-x")
	if err != nil {
		t.Fatal(err)
	}
	name := filepath.Join(l.dir, "sb-x")
	probe, err := os.Open(name) // a probe's open, before the release
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	l.release(x)
	other := &idLocks{dir: l.dir}
	y, err := other.hold("sb-y")
	if err != nil {
		t.Fatal(err)
	}
	if inode(t, y.f) != inode(t, probe) {
		t.Fatal("control: sb-y did not reuse sb-x's file")
	}
	if lockedAs(probe, name) {
		t.Error("the released sb-x is live through the file sb-y took")
	}
	// sb-x held again, on another file; the file the sweep opened is free.
	x2, err := other.hold("sb-x")
	if err != nil {
		t.Fatal(err)
	}
	other.release(y)
	sweepOne(probe, name)
	if !l.isLive("sb-x") {
		t.Error("a sweep removed the name of sb-x held again")
	}
	other.release(x2)
}

// TestIDLockOneHolder: processes racing for one id (a caller-given id) with
// sweeps and probes beside them: at most one holds it at any time, and
// while it does, it is live.
func TestIDLockOneHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ids")
	var holders, held, refused atomic.Int64
	stop := make(chan struct{})
	var bg sync.WaitGroup
	for range 2 {
		bg.Go(func() {
			p := &idLocks{dir: dir}
			for {
				select {
				case <-stop:
					return
				default:
				}
				p.sweep()
				_, _ = p.live()
			}
		})
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			p := &idLocks{dir: dir} // a process of its own
			for i := range 300 {
				id := "sb-same"
				if i%2 == 1 {
					id = fmt.Sprintf("sb-w%d-%d", w, i) // other sandboxes beside it
				}
				h, err := p.hold(id)
				if err != nil {
					if !strings.Contains(err.Error(), "in use") || id != "sb-same" {
						t.Errorf("hold %s: %v", id, err)
					}
					refused.Add(1)
					continue
				}
				if id == "sb-same" {
					if n := holders.Add(1); n != 1 {
						t.Errorf("%d holders of one id at once", n)
					}
					held.Add(1)
				}
				if !p.isLive(id) {
					t.Errorf("%s not live while held", id)
				}
				if id == "sb-same" {
					holders.Add(-1)
				}
				p.release(h)
			}
		})
	}
	wg.Wait()
	close(stop)
	bg.Wait()
	t.Logf("sb-same held %d times, refused %d", held.Load(), refused.Load())
	if held.Load() == 0 {
		t.Error("sb-same was never held")
	}
	l := &idLocks{dir: dir}
	l.sweep()
	if names := idNames(t, l); len(names) != 0 {
		t.Errorf("names left: %v", names)
	}
}

// TestIDLockNoLinks: where the file system refuses a hard link, each
// sandbox gets a new file, as before the pool.
func TestIDLockNoLinks(t *testing.T) {
	l := &idLocks{dir: filepath.Join(t.TempDir(), "ids"), noPool: true}
	h, err := l.hold("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	if h.k >= 0 || !l.isLive("sb-1") {
		t.Errorf("held = pool file %d, live %v; want a new file, live", h.k, l.isLive("sb-1"))
	}
	l.release(h)
	if names := poolFiles(t, l); len(names) != 0 {
		t.Errorf("pool files made without links: %v", names)
	}
	if names := idNames(t, l); len(names) != 0 {
		t.Errorf("names left: %v", names)
	}
}

// TestIDLockKilledHolder: a process killed with SIGKILL while it holds an
// id: the kernel drops its lock, the id is not live, its pool file is not
// handed out while the stale name is there, and a sweep frees both.
func TestIDLockKilledHolder(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ids")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self, "-test.run=^TestIDLockHelper$", "-test.count=1", "-test.timeout=2m")
	cmd.Env = append(os.Environ(), "AIRLOCK_IDLOCK_HELPER="+dir, "AIRLOCK_TEST_EXECUTOR=/bin/true")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	sc := bufio.NewScanner(out)
	for sc.Scan() && sc.Text() != "held" {
	}
	l := &idLocks{dir: dir}
	if !l.isLive("sb-killed") {
		t.Fatal("control: the helper's id is not live")
	}
	if h, err := l.hold("sb-killed"); err == nil {
		l.release(h)
		t.Fatal("an id held by another process was given again")
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if l.isLive("sb-killed") {
		t.Error("the killed process's id is live")
	}
	h, err := l.hold("sb-next")
	if err != nil {
		t.Fatal(err)
	}
	if h.k == 0 {
		t.Error("the killed process's pool file, still named sb-killed, was handed out")
	}
	l.release(h)
	l.sweep()
	if names := idNames(t, l); len(names) != 0 {
		t.Errorf("names left after a sweep: %v", names)
	}
	h, err = (&idLocks{dir: dir}).hold("sb-killed") // a process without recent files
	if err != nil || h.k != 0 {
		t.Fatalf("hold after the sweep = %v (pool file %d); want pool file 0 free again", err, h.k)
	}
	l.release(h)
}

// TestIDLockHelper is TestIDLockKilledHolder's holder process.
func TestIDLockHelper(t *testing.T) {
	dir := os.Getenv("AIRLOCK_IDLOCK_HELPER")
	if dir == "" {
		t.Skip("helper process of TestIDLockKilledHolder")
	}
	l := &idLocks{dir: dir}
	if _, err := l.hold("sb-killed"); err != nil {
		t.Fatal(err)
	}
	fmt.Println("held") //nolint:forbidigo // the helper answers its parent on stdout
	select {}
}

// TestUIDSlotDirRemoved: the slot directory is made when a take finds it
// missing (it is not looked up before every acquire).
func TestUIDSlotDirRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	a := &uidAllocator{dir: dir}
	for range 2 {
		f, base, err := a.acquire("sb-1")
		if err != nil {
			t.Fatal(err)
		}
		a.release(f, base)
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
}
