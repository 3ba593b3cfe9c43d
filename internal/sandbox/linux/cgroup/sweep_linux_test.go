package cgroup

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"
)

// TestSweep: Sweep removes the empty groups, old enough, of the parents it
// is told about, then those parents once empty; it keeps a group that
// holds a process, a group younger than minAge, and every directory of a
// parent it is not told about.
func TestSweep(t *testing.T) {
	m := newTestManager(t)
	other := newTestManager(t)
	busy := newGroup(t, m, "busy", Limits{})
	sleep := exec.Command("sleep", "600")
	startBlocked(t, busy, sleep)
	empty := newGroup(t, m, "empty", Limits{})
	foreign := newGroup(t, other, "foreign", Limits{})
	match := func(name string) bool { return name == m.parent }
	parents := slices.DeleteFunc(m.ParentDirs(), func(d string) bool { return !exists(d) })
	gone := func(dirs []string) bool {
		for _, d := range dirs {
			if exists(d) {
				return false
			}
		}
		return true
	}
	kept := func(what string, dirs []string) {
		t.Helper()
		for _, d := range dirs {
			if !exists(d) {
				t.Errorf("Sweep removed %s %s", what, d)
			}
		}
	}

	if removed, err := Sweep(match, "", time.Hour); err != nil || len(removed) != 0 {
		t.Errorf("Sweep(minAge 1h) = %q, %v; want nothing removed (every group is younger)", removed, err)
	}
	kept("a young empty group", empty.dirs())

	removed, err := Sweep(match, "", 0)
	if err != nil {
		t.Errorf("Sweep() = %v", err)
	}
	if !gone(empty.dirs()) {
		t.Errorf("Sweep() = %q: the empty group is still there", removed)
	}
	kept("a group that holds a process", busy.dirs())
	kept("the parent of a group that holds a process", parents)
	kept("a group of a parent it was not told about", foreign.dirs())
	if removed, err := Sweep(func(string) bool { return true }, other.parent, 0); err != nil || slices.ContainsFunc(removed, func(d string) bool { return slices.Contains(foreign.dirs(), d) }) {
		t.Errorf("Sweep(skip the other parent) = %q, %v; want the other parent's group kept", removed, err)
	}
	kept("a group of the parent it was told to skip", foreign.dirs())

	if err := busy.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = sleep.Wait()
	if removed, err = Sweep(match, "", 0); err != nil {
		t.Errorf("Sweep() = %v", err)
	}
	if !gone(busy.dirs()) || !gone(m.ParentDirs()) {
		t.Errorf("Sweep() once the process is gone = %q: want its group and the parent removed", removed)
	}
	// The Manager goes on: its next group makes the parent again.
	newGroup(t, m, "again", Limits{})
	kept("a parent made again", parents)
}

// TestRemoveParentIfEmpty: the parent goes once it holds no group, is kept
// while one is left, and a group made afterwards makes it again.
func TestRemoveParentIfEmpty(t *testing.T) {
	m := newTestManager(t)
	g, err := m.New("g", Limits{Pids: 10}, false)
	if err != nil {
		t.Fatal(err)
	}
	if gone, err := m.RemoveParentIfEmpty(); gone || err != nil {
		t.Errorf("RemoveParentIfEmpty() with a group = %v, %v; want false, nil", gone, err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	_ = g.Close()
	if gone, err := m.RemoveParentIfEmpty(); !gone || err != nil {
		t.Errorf("RemoveParentIfEmpty() without a group = %v, %v; want true, nil", gone, err)
	}
	for _, d := range m.ParentDirs() {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("parent %s: Stat() = %v, want it gone", d, err)
		}
	}
	g = newGroup(t, m, "again", Limits{Pids: 10})
	if !slices.Contains(g.Enforced(), "pids") {
		t.Errorf("a group made after its parent went enforces %q, want pids", g.Enforced())
	}
}
