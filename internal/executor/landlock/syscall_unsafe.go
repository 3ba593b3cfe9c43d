//go:build linux

package landlock

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// createRuleset calls landlock_create_ruleset(2). withScope says whether the
// kernel knows landlock_ruleset_attr.scoped (ABI >= 6); the size passed
// covers only the fields the kernel needs, because older kernels answer
// E2BIG to a size that includes non-zero fields they do not know.
func createRuleset(handledFS, scoped uint64, withScope bool) (int, error) {
	attr := unix.LandlockRulesetAttr{Handled_access_fs: handledFS, Scoped: scoped}
	size := unsafe.Offsetof(attr.Handled_access_fs) + unsafe.Sizeof(attr.Handled_access_fs)
	if withScope {
		size = unsafe.Offsetof(attr.Scoped) + unsafe.Sizeof(attr.Scoped)
	}
	fd, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET,
		uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(fd), nil
}

// addPathBeneath calls landlock_add_rule(2) with a LANDLOCK_RULE_PATH_BENEATH
// rule granting access beneath the file or directory open as parentFD.
func addPathBeneath(rulesetFD, parentFD int, access uint64) error {
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(parentFD)}
	_, _, errno := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}
