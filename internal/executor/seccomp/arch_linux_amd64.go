package seccomp

import "golang.org/x/sys/unix"

func nativeArch() (*arch, error) {
	return &arch{
		name:  "amd64",
		audit: unix.AUDIT_ARCH_X86_64,
		x32:   true,
		// arch_prctl sets the TLS base (the Go runtime and glibc need it);
		// modify_ldt is allowed on x86 by Docker's profile for 16-bit and
		// Wine-style code.
		extra:   []string{"arch_prctl", "modify_ldt"},
		numbers: amd64Numbers(),
	}, nil
}

// amd64Numbers maps every name the policy uses to its amd64 number: the
// shared names and the x86 ones arm64 never had (legacy path calls,
// arch_prctl, ...). A function, not a variable: the map is built only when
// a filter is assembled, not at every start of the executor.
func amd64Numbers() map[string]uint32 {
	m := sharedNumbers()
	for name, nr := range map[string]uint32{
		"access":          unix.SYS_ACCESS,
		"alarm":           unix.SYS_ALARM,
		"arch_prctl":      unix.SYS_ARCH_PRCTL,
		"chmod":           unix.SYS_CHMOD,
		"chown":           unix.SYS_CHOWN,
		"creat":           unix.SYS_CREAT,
		"dup2":            unix.SYS_DUP2,
		"epoll_create":    unix.SYS_EPOLL_CREATE,
		"epoll_ctl_old":   unix.SYS_EPOLL_CTL_OLD,
		"epoll_wait":      unix.SYS_EPOLL_WAIT,
		"epoll_wait_old":  unix.SYS_EPOLL_WAIT_OLD,
		"eventfd":         unix.SYS_EVENTFD,
		"fork":            unix.SYS_FORK,
		"futimesat":       unix.SYS_FUTIMESAT,
		"get_thread_area": unix.SYS_GET_THREAD_AREA,
		"getdents":        unix.SYS_GETDENTS,
		"getpgrp":         unix.SYS_GETPGRP,
		"inotify_init":    unix.SYS_INOTIFY_INIT,
		"ioperm":          unix.SYS_IOPERM,
		"iopl":            unix.SYS_IOPL,
		"lchown":          unix.SYS_LCHOWN,
		"link":            unix.SYS_LINK,
		"lstat":           unix.SYS_LSTAT,
		"mkdir":           unix.SYS_MKDIR,
		"mknod":           unix.SYS_MKNOD,
		"modify_ldt":      unix.SYS_MODIFY_LDT,
		"open":            unix.SYS_OPEN,
		"pause":           unix.SYS_PAUSE,
		"pipe":            unix.SYS_PIPE,
		"poll":            unix.SYS_POLL,
		"readlink":        unix.SYS_READLINK,
		"rename":          unix.SYS_RENAME,
		"rmdir":           unix.SYS_RMDIR,
		"select":          unix.SYS_SELECT,
		"set_thread_area": unix.SYS_SET_THREAD_AREA,
		"signalfd":        unix.SYS_SIGNALFD,
		"stat":            unix.SYS_STAT,
		"symlink":         unix.SYS_SYMLINK,
		"time":            unix.SYS_TIME,
		"unlink":          unix.SYS_UNLINK,
		"uretprobe":       unix.SYS_URETPROBE,
		"utime":           unix.SYS_UTIME,
		"utimes":          unix.SYS_UTIMES,
		"vfork":           unix.SYS_VFORK,
	} {
		m[name] = nr
	}
	return m
}
