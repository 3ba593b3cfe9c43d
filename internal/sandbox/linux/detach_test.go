package linux_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// TestDestroyDetached holds the front end's teardown (DestroyDetached): when
// it returns, every process of the sandbox has SIGKILL pending or is gone;
// the uid slot records the sandbox's cgroup2 group and is handed to no
// other sandbox while that group holds a process; the next run's Prepare
// removes the group once empty. A sandbox whose id was given is torn down
// as Destroy does: nothing left when it returns.
func TestDestroyDetached(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: uid ranges are root mode's")
	}
	state, slots := t.TempDir(), t.TempDir()
	newBackend := func() *linux.Backend {
		b, err := linux.New(linux.Config{Executor: executorPath, StateDir: state, UIDSlotDir: slots})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	b := newBackend()
	ctx := context.Background()
	sb, err := b.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	s := sb.(*linux.Sandbox)
	dir, slot := linux.CgroupV2Dir(s), linux.SlotFile(s)
	if dir == "" || slot == "" {
		t.Skip("no cgroup2 group or no uid slot: DestroyDetached is Destroy here")
	}
	// Processes besides the executor: a shell and its children, left running.
	if _, err := s.Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "sleep 1000 & sleep 1000 & exec sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	// The executor and three sleeps.
	waitFor(t, "the commands to start", func() bool { return procs(t, dir) >= 4 })
	if rec, err := os.ReadFile(slot); err != nil || !strings.Contains(string(rec), "\n"+dir+"\n") {
		t.Fatalf("slot record %q, %v; want the group %s", rec, err, dir)
	}
	pids := cgroupPIDs(t, dir)
	if err := s.DestroyDetached(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if !killedOrGone(t, pid) {
			status, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
			stat, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			t.Errorf("process %d of the sandbox neither gone nor with SIGKILL pending after DestroyDetached:\n%s\n%s", pid, stat, status)
		}
	}
	select {
	case <-s.Done():
	default:
		t.Error("Done not closed after DestroyDetached")
	}
	// While the group holds a process the slot is taken; once it is
	// empty, free.
	for {
		busy := procs(t, dir) > 0
		free, err := linux.SlotFree(slots, slot)
		if err != nil {
			t.Fatal(err)
		}
		if busy && free {
			// The group may have emptied between the two reads: taken
			// only if it is still populated now.
			if procs(t, dir) > 0 {
				t.Fatal("the uid slot was free while the sandbox's cgroup still held a process")
			}
		}
		if free {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The next run removes the group.
	waitFor(t, "Prepare to remove the group", func() bool {
		newBackend().Prepare()
		_, err := os.Stat(dir)
		return os.IsNotExist(err)
	})

	// An id given by the caller: torn down in full before the return.
	sb, err = b.Create(ctx, sandbox.Spec{ID: "sb-detach-given"})
	if err != nil {
		t.Fatal(err)
	}
	s = sb.(*linux.Sandbox)
	dir = linux.CgroupV2Dir(s)
	if err := s.DestroyDetached(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("group %s of a sandbox with a given id still there after DestroyDetached: %v", dir, err)
	}
}

// procs returns the number of processes in cgroup2 directory dir (0 once
// it is gone).
func procs(t *testing.T, dir string) int { return len(cgroupPIDs(t, dir)) }

// cgroupPIDs returns the processes in cgroup2 directory dir and the groups
// below it.
func cgroupPIDs(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil // a group removed meanwhile holds nothing
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return nil
		}
		for f := range strings.FieldsSeq(string(data)) {
			pid, err := strconv.Atoi(f)
			if err != nil {
				t.Fatal(err)
			}
			pids = append(pids, pid)
		}
		return nil
	})
	return pids
}

// pfExiting is the kernel's PF_EXITING task flag: do_exit has begun.
const pfExiting = 0x4

// killedOrGone reports whether process pid has exited or is exiting
// (PF_EXITING in /proc/PID/stat's flags: a PID 1 killed waits there, in D,
// for the rest of its namespace) or has SIGKILL pending (/proc/PID/status).
func killedOrGone(t *testing.T, pid int) bool {
	t.Helper()
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true // gone
	}
	if i := strings.LastIndexByte(string(stat), ')'); i >= 0 {
		f := strings.Fields(string(stat[i+1:])) // state is f[0], flags f[6]
		if len(f) > 6 {
			if flags, err := strconv.ParseUint(f[6], 10, 64); err == nil && flags&pfExiting != 0 {
				return true
			}
		}
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return true // gone
	}
	for line := range strings.Lines(string(data)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		v = strings.TrimSpace(v)
		switch k {
		case "State":
			if strings.HasPrefix(v, "Z") || strings.HasPrefix(v, "X") {
				return true
			}
		case "SigPnd", "ShdPnd":
			mask, err := strconv.ParseUint(v, 16, 64)
			if err == nil && mask&(1<<(9-1)) != 0 {
				return true
			}
		}
	}
	return false
}

// waitFor polls cond until it holds, failing the test after a bound far
// past any ordinary wait.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
