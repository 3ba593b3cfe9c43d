package vfork_test

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/seccomp"
	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// spawn runs Spawn of argv on a thread of its own with
// no_new_privs (which ends with the test: it is never unlocked) and
// returns what the child wrote to its standard output and how it ended.
func spawn(t *testing.T, argv []string, attr vfork.SpawnAttr) (string, syscall.WaitStatus, error) {
	t.Helper()
	if !vfork.Supported {
		t.Skip("no vfork start on this architecture")
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	attr.Files = [3]int{int(null.Fd()), int(w.Fd()), int(w.Fd())}
	type result struct {
		pid, pidfd int
		err        error
	}
	done := make(chan result)
	finish := make(chan struct{})
	defer close(finish)
	go func() {
		// Never unlocked: the thread ends with no_new_privs, once the
		// child it is the parent-death signal's parent of has ended.
		runtime.LockOSThread()
		if err := seccomp.NoNewPrivsThread(); err != nil {
			done <- result{err: err}
			return
		}
		pid, pidfd, err := vfork.Spawn(argv[0], argv, []string{"PATH=/usr/bin:/bin"}, &attr)
		done <- result{pid, pidfd, err}
		<-finish
	}()
	res := <-done
	w.Close()
	if res.err != nil {
		return "", 0, res.err
	}
	defer unix.Close(res.pidfd)
	out, ws := readAndWait(t, r, res.pid)
	return out, ws, nil
}

// status returns field's value in a /proc/PID/status dump.
func status(dump, field string) string {
	for _, l := range strings.Split(dump, "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// TestSpawn: the child starts with no signal handler (this process has
// the Go runtime's on every signal), the mask it is given, its own process
// group, the directory, ids and descriptors it is given, no_new_privs, and
// the filter installed on itself.
func TestSpawn(t *testing.T) {
	filter, err := seccomp.ChildFilter()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name   string
		filter bool
	}{{"filter", true}, {"nofilter", false}} {
		t.Run(tc.name, func(t *testing.T) {
			attr := vfork.SpawnAttr{Dir: dir, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), NoSetGroups: os.Getuid() != 0, Setpgid: true, Mask: 1 << (unix.SIGUSR2 - 1)}
			if tc.filter {
				attr.Filter = filter
			}
			// The spawned process's own status: handlers, mask, filter.
			out, ws, err := spawn(t, []string{"/bin/cat", "/proc/self/status"}, attr)
			if err != nil {
				t.Fatal(err)
			}
			if !ws.Exited() || ws.ExitStatus() != 0 {
				t.Fatalf("child ended %v; wrote %q", ws, out)
			}
			if v := status(out, "SigCgt"); strings.Trim(v, "0") != "" {
				t.Errorf("SigCgt %s: the child kept handlers", v)
			}
			if v := status(out, "SigBlk"); v != "0000000000000800" {
				t.Errorf("SigBlk %s, want SIGUSR2's bit alone", v)
			}
			if v := status(out, "NoNewPrivs"); v != "1" {
				t.Errorf("NoNewPrivs %s, want 1", v)
			}
			wantSeccomp := "0"
			if tc.filter {
				wantSeccomp = "2"
			}
			if v := status(out, "Seccomp"); v != wantSeccomp {
				t.Errorf("Seccomp %s, want %s", v, wantSeccomp)
			}
			// Its directory and process group.
			out, _, err = spawn(t, []string{"/bin/sh", "-c", `echo "dir: $(pwd)"; echo "pgrp: $(cut -d' ' -f5 /proc/$$/stat)"; echo "self: $$"`}, attr)
			if err != nil {
				t.Fatal(err)
			}
			if v := status(out, "dir"); v != dir {
				t.Errorf("directory %q, want %q", v, dir)
			}
			if pg, pid := status(out, "pgrp"), status(out, "self"); pg != pid {
				t.Errorf("process group %q, want its own (%s)", pg, pid)
			}
		})
	}
}

// TestSpawnErrors: a missing program fails the spawn with ENOENT, after
// the child was collected; a filter without no_new_privs is refused in
// the child before the exec.
func TestSpawnErrors(t *testing.T) {
	if !vfork.Supported {
		t.Skip("no vfork start on this architecture")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	fd := int(null.Fd())
	attr := &vfork.SpawnAttr{Dir: "/", Files: [3]int{fd, fd, fd}, UID: uint32(os.Getuid()), GID: uint32(os.Getgid()), NoSetGroups: true}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	_, _, err = vfork.Spawn("/nonexistent/prog", []string{"prog"}, nil, attr)
	var serr *vfork.SpawnError
	if !errors.As(err, &serr) || !errors.Is(err, unix.ENOENT) || serr.Step != "exec" {
		t.Errorf("missing program: %v, want the exec's ENOENT", err)
	}
	if os.Getuid() == 0 {
		return // root installs a filter without no_new_privs
	}
	filter, err := seccomp.ChildFilter()
	if err != nil {
		t.Fatal(err)
	}
	attr.Filter = filter
	_, _, err = vfork.Spawn("/bin/true", []string{"true"}, nil, attr)
	if !errors.As(err, &serr) || serr.Step != "seccomp filter" {
		t.Errorf("filter without no_new_privs: %v, want the filter step's error", err)
	}
}
