//go:build !amd64

package linux

import "syscall"

// vforkSupported says that vforkExec is built for this architecture: not
// here (its clone trampoline is amd64 assembly); executors start through
// syscall.ForkExec, which forks.
const vforkSupported = false

func vforkExec(string, []string, []string, []uintptr, uintptr, int, func(int) error) (int, int, error) {
	return 0, -1, syscall.ENOSYS
}
