// Package vfork starts a sandbox's executor with a clone that shares the
// caller's memory (CLONE_VM|CLONE_VFORK) into a new user namespace, whose
// id maps the caller writes after the exec (see Exec). Both starters of
// executors use it: the sandbox backend's direct start (the CLI) and the
// spawner (the daemon's and serve's pools), so it is held to the
// executor's rules: the standard library and golang.org/x/sys/unix only.
//
// It also starts the gvisor executor's commands (Spawn): a clone3 that
// clears the child's signal handlers, the child installing the commands'
// seccomp filter on itself before its exec.
//
// Importers: internal/sandbox/linux, internal/executor/spawn,
// internal/executor.
package vfork
