package cgroup

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// newFreezerManager returns a Manager with a parent of its own whose groups
// freeze with kind, skipping when this machine has no such freezer.
func newFreezerManager(t *testing.T, kind string) *Manager {
	t.Helper()
	requireRoot(t)
	loc, err := located()
	if err != nil {
		t.Skipf("no cgroup hierarchy of this process to freeze in: %v", err)
	}
	switch kind {
	case FreezerV1:
		l := probe(loc)
		if l.v1Ctrls()&ctrlFreezer == 0 {
			t.Skip("no v1 freezer hierarchy here")
		}
	case FreezerV2:
		if loc.v2Dir == "" || !exists(loc.v2Dir+"/cgroup.procs") {
			t.Skip("no cgroup2 tree here")
		}
	}
	m, err := NewManagerWith(fmt.Sprintf("airlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()), ManagerOptions{Freezer: kind})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		names, _ := m.List()
		for _, n := range names {
			if g, err := m.Open(n); err == nil {
				_ = g.Destroy()
				_ = g.Close()
			}
		}
		if err := m.removeParent(); err != nil {
			t.Errorf("remove parent: %v", err)
		}
	})
	return m
}

// readCounter reads the counter file a counting shell writes (0 before its
// first write).
func readCounter(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// waitCounter waits until the counter is over n and returns it.
func waitCounter(t *testing.T, file string, n int) int {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c := readCounter(t, file); c > n {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("counter stayed at %d", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestFreezeThaw(t *testing.T) {
	for _, kind := range []string{FreezerV2, FreezerV1} {
		t.Run(kind, func(t *testing.T) {
			m := newFreezerManager(t, kind)
			g := newGroup(t, m, "freeze", Limits{})
			if got := g.Freezer(); got != kind {
				t.Fatalf("Freezer() = %q, want %q", got, kind)
			}
			file := filepath.Join(t.TempDir(), "counter")
			// A counter the shell keeps in its own memory and writes out.
			cmd := exec.Command("/bin/sh", "-c", `read x; i=0; while :; do i=$((i+1)); echo $i > "$1.tmp"; mv "$1.tmp" "$1"; sleep 0.02; done`, "sh", file)
			startBlocked(t, g, cmd)()
			before := waitCounter(t, file, 2)
			if err := g.Freeze(context.Background()); err != nil {
				t.Fatalf("Freeze() = %v", err)
			}
			if ok, err := g.Frozen(); !ok || err != nil {
				t.Fatalf("Frozen() = %v, %v after Freeze, want true", ok, err)
			}
			// Freezing again is a no-op.
			if err := g.Freeze(context.Background()); err != nil {
				t.Fatalf("second Freeze() = %v", err)
			}
			frozen := readCounter(t, file)
			if frozen < before {
				t.Fatalf("counter went back: %d after %d", frozen, before)
			}
			time.Sleep(300 * time.Millisecond)
			if c := readCounter(t, file); c != frozen {
				t.Fatalf("counter moved from %d to %d while frozen", frozen, c)
			}
			if err := g.Thaw(); err != nil {
				t.Fatalf("Thaw() = %v", err)
			}
			if ok, err := g.Frozen(); ok || err != nil {
				t.Fatalf("Frozen() = %v, %v after Thaw, want false", ok, err)
			}
			// The same process goes on counting from where it stood (a
			// new one would start again at 1).
			waitCounter(t, file, frozen)
			if cmd.ProcessState != nil {
				t.Fatalf("the counting process ended: %v", cmd.ProcessState)
			}
			procs := readTrim(t, g.procsFile())
			if !strings.Contains(procs, strconv.Itoa(cmd.Process.Pid)) {
				t.Errorf("cgroup.procs = %q after thaw, want pid %d", procs, cmd.Process.Pid)
			}
		})
	}
}

// A frozen group is killed and removed as a running one is: v1's frozen
// tasks wait for a thaw to die, which Kill gives them.
func TestKillFrozen(t *testing.T) {
	for _, kind := range []string{FreezerV2, FreezerV1} {
		t.Run(kind, func(t *testing.T) {
			m := newFreezerManager(t, kind)
			g, err := m.New("killfrozen", Limits{}, false)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			cmd := exec.Command("/bin/sh", "-c", "read x; sleep 3600 & sleep 3600")
			startBlocked(t, g, cmd)()
			if err := g.Freeze(context.Background()); err != nil {
				t.Fatalf("Freeze() = %v", err)
			}
			if err := g.Destroy(); err != nil {
				t.Fatalf("Destroy() of a frozen group = %v", err)
			}
			if err := cmd.Wait(); !killedBySIGKILL(err) {
				t.Errorf("Wait() = %v, want killed by SIGKILL", err)
			}
			if g.dirsLeft() {
				t.Errorf("directories left after Destroy: %v", g.dirs())
			}
		})
	}
}

// procsFile is the cgroup.procs the group's freezer reads.
func (g *Group) procsFile() string {
	if g.Freezer() == FreezerV1 {
		dir, _ := g.dirFor(ctrlFreezer)
		return dir + "/cgroup.procs"
	}
	return g.v2 + "/cgroup.procs"
}
