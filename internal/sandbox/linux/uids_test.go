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
