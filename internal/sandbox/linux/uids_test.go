package linux

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

func TestIDLocks(t *testing.T) {
	l := &idLocks{dir: filepath.Join(t.TempDir(), "locks")}
	f, err := l.hold("sb-1")
	if err != nil {
		t.Fatalf("hold: %v", err)
	}
	if _, err := l.hold("sb-1"); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Errorf("second hold of a held id: %v, want it refused as in use", err)
	}
	if live, err := l.live(); err != nil || !live["sb-1"] || len(live) != 1 {
		t.Errorf("live = %v, %v; want sb-1 alone", live, err)
	}
	l.sweep()
	if !l.isLive("sb-1") {
		t.Error("a sweep removed a held lock")
	}
	l.release(f)
	if l.isLive("sb-1") {
		t.Error("released id still live")
	}
	// What a killed sandbox left: the file, unlocked.
	if err := os.WriteFile(filepath.Join(l.dir, "sb-2"), []byte("sb-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	if l.isLive("sb-2") {
		t.Error("an unlocked leftover counts as live")
	}
	f, err = l.hold("sb-2")
	if err != nil {
		t.Fatalf("hold over a leftover: %v", err)
	}
	l.release(f)
	if ents, _ := os.ReadDir(l.dir); len(ents) != 0 {
		t.Errorf("lock files left after release: %v", ents)
	}
}

// TestIDLocksBesideSweep: sweeps and liveness probes (a GC beside a create,
// in this process or another) never make a new sandbox find its own id in
// use, and never remove a held lock.
func TestIDLocksBesideSweep(t *testing.T) {
	l := &idLocks{dir: filepath.Join(t.TempDir(), "locks")}
	if err := os.MkdirAll(l.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l.sweep()
				_, _ = l.live()
			}
		})
	}
	for i := range 2000 {
		id := fmt.Sprintf("sb-%d", i)
		f, err := l.hold(id)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("hold %s beside sweeps: %v", id, err)
		}
		if !l.isLive(id) {
			t.Errorf("%s not live while held", id)
		}
		l.release(f)
	}
	close(stop)
	wg.Wait()
}

// TestUIDSlotReuse: a process takes back the slot it released last, so its
// id-map namespaces stay usable; a slot another process took meanwhile is
// skipped and forgotten.
func TestUIDSlotReuse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "slots")
	a := &uidAllocator{dir: dir}
	other := &uidAllocator{dir: dir} // another airlock process on the machine
	f1, base1, err := a.acquire("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	f2, base2, err := a.acquire("sb-2")
	if err != nil {
		t.Fatal(err)
	}
	if base1 == base2 {
		t.Fatalf("two live sandboxes share the range at %d", base1)
	}
	a.release(f1, base1)
	a.release(f2, base2)
	f3, base3, err := a.acquire("sb-3")
	if err != nil || base3 != base2 {
		t.Fatalf("acquire after releases = %d, %v; want the last released, %d", base3, err, base2)
	}
	// The other process takes base1 before this one asks again.
	var fo *os.File
	k := int(base1-uidBase) / uidRange
	if fo, err = other.take(k, "sb-other"); err != nil || fo == nil {
		t.Fatalf("other process: take slot %d = %v, %v", k, fo, err)
	}
	defer fo.Close()
	f4, base4, err := a.acquire("sb-4")
	if err != nil || base4 == base1 || base4 == base3 {
		t.Fatalf("acquire with the recent slot taken elsewhere = %d, %v; want a free range", base4, err)
	}
	if len(a.recent) != 0 {
		t.Errorf("recent = %v after its slots were taken, want empty", a.recent)
	}
	a.release(f3, base3)
	a.release(f4, base4)
	type held struct {
		f    *os.File
		base uint32
	}
	var all []held
	for i := range recentSlots + 10 {
		f, base, err := a.acquire(fmt.Sprint("sb-x", i))
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, held{f, base})
	}
	for _, h := range all {
		a.release(h.f, h.base)
	}
	if len(a.recent) != recentSlots || a.recent[len(a.recent)-1] != int(all[len(all)-1].base-uidBase)/uidRange {
		t.Errorf("recent holds %d slots, want the last %d released", len(a.recent), recentSlots)
	}
}

// TestUIDSlotBoundCgroup holds a uid slot whose lock was dropped to stay
// taken while the cgroup its last sandbox bound to it holds a process (what
// a detached teardown leaves), and to be handed out again once it holds none
// or is gone. cgroup.events is a plain file here: the allocator reads it as
// it reads the kernel's.
func TestUIDSlotBoundCgroup(t *testing.T) {
	tmp := t.TempDir()
	dir := filepath.Join(tmp, "slots")
	cg := filepath.Join(tmp, "cg")
	if err := os.Mkdir(cg, 0o755); err != nil {
		t.Fatal(err)
	}
	events := func(populated int) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(cg, "cgroup.events"), fmt.Appendf(nil, "populated %d\nfrozen 0\n", populated), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	a := &uidAllocator{dir: dir}
	f, base, err := a.acquire("sb-1")
	if err != nil {
		t.Fatal(err)
	}
	k := int(base-uidBase) / uidRange
	if err := a.bind(f, "sb-1", cg); err != nil {
		t.Fatal(err)
	}
	events(1)
	a.release(f, base) // the host exits; the sandbox's processes are dying
	other := &uidAllocator{dir: dir}
	if g, err := other.take(k, "sb-2"); g != nil || err != nil {
		t.Fatalf("take of a slot whose cgroup holds a process = %v, %v; want it refused", g, err)
	}
	// The releasing process itself tries its recent slot first: refused too.
	g, base2, err := a.acquire("sb-3")
	if err != nil || base2 == base {
		t.Fatalf("acquire = %d, %v; want a range other than the dying sandbox's %d", base2, err, base)
	}
	a.release(g, base2)
	// What the allocator cannot read keeps the slot taken.
	for name, bad := range map[string]string{
		"a relative path":       "cg",
		"no populated field":    cg + "/nofield",
		"events not a file":     cg + "/dir",
		"a record without a nl": "",
	} {
		switch name {
		case "no populated field":
			_ = os.Mkdir(bad, 0o755)
			_ = os.WriteFile(bad+"/cgroup.events", []byte("frozen 0\n"), 0o644)
		case "events not a file":
			_ = os.MkdirAll(bad+"/cgroup.events", 0o755)
		}
		if bad == "" {
			continue
		}
		s, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(k)), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := a.bind(s, "sb-1", bad); err != nil {
			t.Fatal(err)
		}
		s.Close()
		if g, err := other.take(k, "sb-2"); g != nil || err != nil {
			t.Errorf("%s: take = %v, %v; want the slot kept", name, g, err)
			if g != nil {
				g.Close()
			}
		}
	}
	s, err := os.OpenFile(filepath.Join(dir, fmt.Sprint(k)), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.bind(s, "sb-1", cg); err != nil {
		t.Fatal(err)
	}
	s.Close()
	events(0) // the last process exited
	g, err = other.take(k, "sb-4")
	if g == nil || err != nil {
		t.Fatalf("take after the cgroup emptied = %v, %v; want the slot", g, err)
	}
	if data, _ := os.ReadFile(g.Name()); string(data) != "sb-4" {
		t.Errorf("slot file = %q after take, want the new id alone", data)
	}
	g.Close()
	// A removed cgroup holds nothing.
	s, _ = os.OpenFile(filepath.Join(dir, fmt.Sprint(k)), os.O_RDWR, 0)
	if err := a.bind(s, "sb-4", filepath.Join(tmp, "removed")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if g, err := other.take(k, "sb-5"); g == nil || err != nil {
		t.Fatalf("take after the cgroup was removed = %v, %v; want the slot", g, err)
	} else {
		g.Close()
	}
	// A record of a cgroup path with a newline cannot be written.
	if err := a.bind(s, "sb-6", "/a\nb"); err == nil {
		t.Error("bind of a path with a newline succeeded")
	}
}

// TestSlotRewrite: a slot's record rewritten shorter or longer is exactly
// the new record, with nothing of the old one after it.
func TestSlotRewrite(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "slot")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, rec := range []string{"sb-1\n/sys/fs/cgroup/unified/airlock-x/sb-1\n", "sb-2", "sb-3\n/a\n", strings.Repeat("x", 9000), "sb-4"} {
		if err := rewrite(f, rec); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(f.Name())
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != rec {
			t.Fatalf("after rewrite to %.20q: file holds %.40q", rec, got)
		}
	}
}
