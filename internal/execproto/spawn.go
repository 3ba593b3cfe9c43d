package execproto

import (
	"errors"
	"fmt"
	"slices"
)

// The spawner is airlock-exec started on the host as `airlock-exec spawn`:
// a small process that starts the host's sandbox processes (executors,
// id-map helpers) in new namespaces, so that a long-running host with a
// large address space never forks itself. A fork that makes a user
// namespace cannot share the parent's memory (the parent must write the
// child's id maps before it runs on), so it copies the parent's page
// tables, holding the parent's memory map locked while it does: tens of
// milliseconds in which no thread of a busy server can fault in a page.
//
// The host and the spawner talk over a SOCK_SEQPACKET socket pair, one
// message per request and per reply: a Spawn, in JSON, with the descriptors
// it names passed alongside (SCM_RIGHTS); a Spawned in reply, with a pidfd
// of the new process when it started. The spawner serves one request at a
// time and exits when the host closes its end; the processes it started
// die with it (parent-death signal), and it with the host.

// cloneNewUser is CLONE_NEWUSER (linux/sched.h; execproto builds on every
// platform).
const cloneNewUser = 0x10000000

// MaxSpawn bounds a Spawn message, and MaxSpawnFiles its descriptors.
const (
	MaxSpawn      = 64 << 10
	MaxSpawnFiles = 64
)

// Spawn asks the spawner to start a process.
type Spawn struct {
	// Path is the binary to run; Args its argv. The environment is
	// ExecutorEnv.
	Path string   `json:"path"`
	Args []string `json:"args"`
	// Files gives the child descriptor number of each descriptor passed
	// with the request, in order. Descriptors 0-2 not given are /dev/null;
	// no other is open in the child.
	Files []int `json:"files"`
	// CgroupFile, when 0 or more, is the index among the passed
	// descriptors of a cgroup directory to start the child in
	// (CLONE_INTO_CGROUP); it is not given to the child.
	CgroupFile int `json:"cgroup_file"`
	// TasksFiles are the indices among the passed descriptors of cgroup
	// v1 `tasks` files, open for writing, that a LateIDs child writes
	// itself into before its exec (vfork.Exec); they are not given to the
	// child. Spawned.Joined says it was done; a spawner that cannot (no
	// LateIDs clone here) leaves them to the host.
	TasksFiles []int `json:"tasks_files,omitempty"`
	// Cloneflags are the namespaces to make (CLONE_NEW*).
	Cloneflags uintptr `json:"cloneflags"`
	// UIDMap and GIDMap are written for a new user namespace before the
	// child runs on.
	UIDMap []IDMap `json:"uid_map,omitempty"`
	GIDMap []IDMap `json:"gid_map,omitempty"`
	// Setgroups allows setgroups(2) in the new user namespace.
	Setgroups bool `json:"setgroups,omitempty"`
	// Cred, when set, is the child's uid and gid (in its user namespace).
	Cred *Cred `json:"cred,omitempty"`
	// Setsid starts the child in a new session.
	Setsid bool `json:"setsid,omitempty"`
	// LateIDs asks for the child to be started as an executor that takes
	// its ids itself (LateIDs, the argument the spawner then adds to Args):
	// with a clone that shares the spawner's memory, which execs before
	// UIDMap and GIDMap are written, in a new session. Only for a new user
	// namespace, with Cred unset or uid and gid 0. A spawner that cannot
	// (an architecture without the clone) forks as without it.
	LateIDs bool `json:"late_ids,omitempty"`
}

// IDMap is one line of a user namespace's uid_map or gid_map.
type IDMap struct {
	Inside  int `json:"inside"`
	Outside int `json:"outside"`
	Size    int `json:"size"`
}

// Cred is a child's credentials.
type Cred struct {
	UID         uint32 `json:"uid"`
	GID         uint32 `json:"gid"`
	NoSetGroups bool   `json:"no_setgroups,omitempty"`
}

// Spawned answers a Spawn: the child's pid (its pidfd is passed alongside),
// or why it did not start.
type Spawned struct {
	PID   int    `json:"pid,omitempty"`
	Error string `json:"error,omitempty"`
	// Joined: the child wrote itself into every one of TasksFiles before
	// its exec.
	Joined bool `json:"joined,omitempty"`
}

// Validate checks a Spawn against nfiles, the number of descriptors that
// came with it.
func (s *Spawn) Validate(nfiles int) error {
	switch {
	case s.Path == "" || len(s.Args) == 0:
		return errors.New("spawn: no binary or argv")
	case nfiles > MaxSpawnFiles:
		return fmt.Errorf("spawn: %d descriptors, at most %d", nfiles, MaxSpawnFiles)
	case s.CgroupFile >= nfiles:
		return fmt.Errorf("spawn: cgroup descriptor %d of %d", s.CgroupFile, nfiles)
	case s.LateIDs && s.Cloneflags&cloneNewUser == 0:
		return errors.New("spawn: late ids without a new user namespace")
	case s.LateIDs && s.Cred != nil && (s.Cred.UID != 0 || s.Cred.GID != 0):
		return errors.New("spawn: late ids take uid and gid 0, not those asked for")
	}
	want := nfiles
	if s.CgroupFile >= 0 {
		want--
	}
	for i, f := range s.TasksFiles {
		if f < 0 || f >= nfiles || f == s.CgroupFile || slices.Contains(s.TasksFiles[:i], f) {
			return fmt.Errorf("spawn: tasks descriptor %d of %d is out of range or given twice", f, nfiles)
		}
		want--
	}
	if len(s.Files) != want {
		return fmt.Errorf("spawn: %d child descriptors for %d passed", len(s.Files), want)
	}
	for i, fd := range s.Files {
		if fd < 0 || fd >= 3+MaxSpawnFiles || slices.Contains(s.Files[:i], fd) {
			return fmt.Errorf("spawn: child descriptor %d is out of range or given twice", fd)
		}
	}
	return nil
}
