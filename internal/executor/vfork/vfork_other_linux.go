//go:build !amd64

package vfork

import "syscall"

// Supported says that Exec is built for this architecture: not here (its
// clone trampoline is amd64 assembly); callers start executors through
// syscall.ForkExec, which forks.
const Supported = false

// Exec is not built here: it returns ENOSYS.
func Exec(string, []string, []string, []uintptr, uintptr, int, []int, func(int, int) error) (int, int, error) {
	return 0, -1, syscall.ENOSYS
}

// Spawn is not built here: it returns ENOSYS, and callers start commands
// with syscall.ForkExec.
func Spawn(string, []string, []string, *SpawnAttr) (int, int, error) {
	return 0, -1, syscall.ENOSYS
}
