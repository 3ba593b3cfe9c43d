package seccomp

import "golang.org/x/sys/unix"

func nativeArch() (*arch, error) {
	return &arch{
		name:  "arm64",
		audit: unix.AUDIT_ARCH_AARCH64,
		// arm64 uses the generic syscall table, which never had the legacy
		// path-based calls (open, stat, ...) nor the x86-only ones.
		absent: []string{
			"access", "alarm", "arch_prctl", "chmod", "chown", "creat", "dup2",
			"epoll_create", "epoll_ctl_old", "epoll_wait", "epoll_wait_old",
			"eventfd", "fork", "futimesat", "get_thread_area", "getdents",
			"getpgrp", "inotify_init", "ioperm", "iopl", "lchown", "link",
			"lstat", "mkdir", "mknod", "modify_ldt", "open", "pause", "pipe",
			"poll", "readlink", "rename", "rmdir", "select", "set_thread_area",
			"signalfd", "stat", "symlink", "time", "unlink", "uretprobe",
			"utime", "utimes", "vfork",
		},
		numbers: sharedNumbers(),
	}, nil
}
