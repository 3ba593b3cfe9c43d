package vfork

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// SpawnAttr is what Spawn starts a command with.
type SpawnAttr struct {
	Dir string
	// Files are the child's descriptors 0, 1 and 2, in that order; every
	// other descriptor must be close-on-exec.
	Files [3]int
	// UID and GID are the command's ids; its supplementary groups are
	// emptied unless NoSetGroups.
	UID, GID    uint32
	NoSetGroups bool
	// Setpgid puts the child in a process group of its own; Setsid in a
	// session of its own, and with Setctty its descriptor 0, a terminal,
	// becomes its controlling terminal.
	Setpgid, Setsid, Setctty bool
	// Filter is a seccomp filter the child installs on itself just before
	// its exec (the calling thread must have no_new_privs set, which the
	// child inherits); nil: none.
	Filter *unix.SockFprog
	// Mask is the signal mask the child execs with (the calling thread's
	// own: runtime_BeforeFork blocks every signal across the clone).
	Mask uint64
}

// SpawnError is a failure of Spawn's child before or at its exec.
type SpawnError struct {
	Step string
	Err  syscall.Errno
}

func (e *SpawnError) Error() string { return "spawn: " + e.Step + ": " + e.Err.Error() }
func (e *SpawnError) Unwrap() error { return e.Err }
