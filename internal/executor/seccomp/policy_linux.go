package seccomp

import "golang.org/x/sys/unix"

// This file is the policy as data: which system calls the sandbox may make
// and which argument values are refused. doc.go explains the reasoning;
// program_linux.go turns these tables into BPF.
//
// Names are kernel syscall names. A name that the running architecture does
// not have (open on arm64, say) must be listed in that architecture's absent
// list, so a typo here makes Program fail instead of silently dropping a rule.

// allowed lists the system calls permitted without argument checks. It is
// the unconditional allow list of Docker's default profile (moby/profiles
// seccomp/default.json, a container without extra capabilities), limited to
// the names that exist on amd64 or arm64, less adjtimex, clock_adjtime and
// name_to_handle_at (see denied). Calls with argument checks (clone, socket,
// ioctl, personality) are in the filters below, not here.
var allowed = []string{
	// Process and thread lifetime. Plain fork and vfork cannot create
	// namespaces; clone is argument-checked separately.
	"execve", "execveat", "exit", "exit_group", "fork", "vfork",
	"wait4", "waitid",
	"set_tid_address", "set_robust_list", "get_robust_list", "rseq",
	"restart_syscall", "membarrier",
	"futex", "futex_requeue", "futex_wait", "futex_waitv", "futex_wake",
	"get_thread_area", "set_thread_area",
	"prctl", "seccomp", "capget", "capset",
	"uretprobe",

	// Credentials and process groups. Changing ids only works within what
	// the caller already holds; the user namespace bounds that.
	"getpid", "getppid", "gettid", "getpgid", "getpgrp", "getsid",
	"setpgid", "setsid",
	"getuid", "geteuid", "getresuid", "setuid", "setreuid", "setresuid", "setfsuid",
	"getgid", "getegid", "getresgid", "setgid", "setregid", "setresgid", "setfsgid",
	"getgroups", "setgroups",

	// Signals and process handles.
	"kill", "tkill", "tgkill", "pause",
	"rt_sigaction", "rt_sigpending", "rt_sigprocmask", "rt_sigqueueinfo",
	"rt_sigreturn", "rt_sigsuspend", "rt_sigtimedwait", "rt_tgsigqueueinfo",
	"sigaltstack", "signalfd", "signalfd4",
	"pidfd_open", "pidfd_send_signal",

	// Memory of the calling process.
	"brk", "mmap", "munmap", "mremap", "mprotect", "madvise", "mincore",
	"msync", "remap_file_pages",
	"mlock", "mlock2", "mlockall", "munlock", "munlockall",
	"memfd_create", "memfd_secret", "mseal", "map_shadow_stack",
	"pkey_alloc", "pkey_free", "pkey_mprotect", "process_mrelease",

	// Files and directories by path or descriptor. Which files are reachable
	// is decided by the mount namespace and landlock, not here.
	"open", "openat", "openat2", "creat", "close", "close_range",
	"access", "faccessat", "faccessat2",
	"stat", "lstat", "fstat", "newfstatat", "statx", "statfs", "fstatfs",
	"statmount", "listmount",
	"chdir", "fchdir", "getcwd", "getdents", "getdents64",
	"mkdir", "mkdirat", "mknod", "mknodat", "rmdir",
	"rename", "renameat", "renameat2",
	"link", "linkat", "symlink", "symlinkat", "unlink", "unlinkat",
	"readlink", "readlinkat",
	"chmod", "fchmod", "fchmodat", "fchmodat2",
	"chown", "fchown", "lchown", "fchownat", "umask",
	"truncate", "ftruncate", "fallocate", "fadvise64", "readahead", "cachestat",
	"utime", "utimes", "utimensat", "futimesat",
	"sync", "syncfs", "fsync", "fdatasync", "sync_file_range",
	"flock", "fcntl",

	// Extended attributes.
	"getxattr", "lgetxattr", "fgetxattr", "getxattrat",
	"setxattr", "lsetxattr", "fsetxattr", "setxattrat",
	"listxattr", "llistxattr", "flistxattr", "listxattrat",
	"removexattr", "lremovexattr", "fremovexattr", "removexattrat",

	// Descriptor I/O, pipes, polling and event sources.
	"read", "write", "readv", "writev", "pread64", "pwrite64",
	"preadv", "pwritev", "preadv2", "pwritev2", "lseek",
	"dup", "dup2", "dup3", "pipe", "pipe2",
	"sendfile", "splice", "tee", "vmsplice", "copy_file_range",
	"poll", "ppoll", "select", "pselect6",
	"epoll_create", "epoll_create1", "epoll_ctl", "epoll_ctl_old",
	"epoll_wait", "epoll_wait_old", "epoll_pwait", "epoll_pwait2",
	"eventfd", "eventfd2",
	"inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
	"fanotify_mark",
	"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents",
	"timerfd_create", "timerfd_settime", "timerfd_gettime",

	// Clocks and timers (reading only; setting the clock is denied).
	"clock_gettime", "clock_getres", "clock_nanosleep", "nanosleep",
	"gettimeofday", "time", "times", "alarm", "getitimer", "setitimer",
	"timer_create", "timer_delete", "timer_settime", "timer_gettime", "timer_getoverrun",

	// Scheduling, limits and system information. Limits can only be lowered
	// without privilege, and cgroups cap what the sandbox may use in total.
	"sched_yield", "sched_getaffinity", "sched_setaffinity",
	"sched_getattr", "sched_setattr", "sched_getparam", "sched_setparam",
	"sched_getscheduler", "sched_setscheduler",
	"sched_get_priority_max", "sched_get_priority_min", "sched_rr_get_interval",
	"getpriority", "setpriority", "ioprio_get", "ioprio_set",
	"getrlimit", "setrlimit", "prlimit64", "getrusage",
	"sysinfo", "uname", "getrandom", "getcpu",

	// System V and POSIX IPC, scoped by the IPC namespace.
	"msgget", "msgsnd", "msgrcv", "msgctl",
	"semget", "semop", "semtimedop", "semctl",
	"shmget", "shmat", "shmdt", "shmctl",
	"mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive", "mq_notify", "mq_getsetattr",

	// Sockets once created; socket itself is argument-checked.
	"socketpair", "bind", "listen", "accept", "accept4", "connect",
	"getsockname", "getpeername", "getsockopt", "setsockopt",
	"sendto", "sendmsg", "sendmmsg", "recvfrom", "recvmsg", "recvmmsg", "shutdown",

	// Landlock, so sandboxed programs can restrict themselves further.
	"landlock_create_ruleset", "landlock_add_rule", "landlock_restrict_self",
}

// denied lists system calls that must never be in the allow list. They are
// refused by the default action like any unlisted call; naming them lets
// Program and the tests check that no edit lets one slip in. Docker allows
// some of them (ptrace, process_vm_*, name_to_handle_at, adjtimex,
// clock_adjtime); doc.go says why airlock does not.
var denied = []string{
	// Mount table and root directory.
	"mount", "umount2", "pivot_root", "chroot",
	"open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig",
	"fsmount", "fspick", "mount_setattr",
	// Namespaces.
	"unshare", "setns",
	// Large kernel attack surface reachable from a user namespace.
	"bpf", "perf_event_open", "userfaultfd",
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// Kernel keyrings (not namespaced).
	"keyctl", "add_key", "request_key",
	// Kernel code, boot and host-wide switches.
	"kexec_load", "kexec_file_load", "init_module", "finit_module", "delete_module",
	"reboot", "swapon", "swapoff", "acct",
	// Other processes' memory and descriptors.
	"ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd",
	"kcmp", "process_madvise",
	// Host-global state.
	"sethostname", "setdomainname", "syslog", "quotactl", "quotactl_fd",
	"settimeofday", "clock_settime", "adjtimex", "clock_adjtime",
	"vhangup", "nfsservctl", "lookup_dcookie", "fanotify_init",
	// File handles bypass path-based checks.
	"open_by_handle_at", "name_to_handle_at",
	// Raw port I/O (x86 only).
	"iopl", "ioperm",
	// NUMA placement of memory.
	"mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node",
	"move_pages", "migrate_pages",
}

// Return values of the filter. SECCOMP_RET_ERRNO carries the errno in its
// low 16 bits (SECCOMP_RET_DATA).
const (
	retAllow       uint32 = unix.SECCOMP_RET_ALLOW
	retKillProcess uint32 = unix.SECCOMP_RET_KILL_PROCESS
)

func retErrno(errno unix.Errno) uint32 {
	return unix.SECCOMP_RET_ERRNO | uint32(errno)&unix.SECCOMP_RET_DATA
}

// defaultErrno is returned for every system call that is not allowed. EPERM,
// as in Docker's profile: programs treat it as "not permitted here" and most
// carry on.
const defaultErrno = unix.EPERM

// namespaceFlags are the clone flags that create namespaces. User namespaces
// in particular give "root" over fresh namespaces and expose kernel code
// that otherwise needs real privilege; the sandbox gets all the namespaces it
// needs from the executor. CLONE_NEWTIME shares its bit with the exit-signal
// byte of clone(2); a signal number of 128 or more is invalid anyway, so
// including it refuses nothing that could succeed.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC |
	unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET |
	unix.CLONE_NEWCGROUP | unix.CLONE_NEWTIME

// socketFamilies are the address families socket(2) may create: Docker's
// list (every family below 12, then the ones it names one by one) without
// AF_PACKET. Docker keeps AF_PACKET because a container without CAP_NET_RAW
// cannot use it, but code that runs as root in a user namespace owning its
// network namespace does hold CAP_NET_RAW there, and packet sockets have a
// long history of kernel privilege escalations. Docker's list already
// leaves out AF_VSOCK (a path to the hypervisor), AF_ALG, AF_DECnet and
// other rarely used, rarely audited families.
var socketFamilies = []uint32{
	unix.AF_UNSPEC, unix.AF_UNIX, unix.AF_INET, unix.AF_AX25, unix.AF_IPX,
	unix.AF_APPLETALK, unix.AF_NETROM, unix.AF_BRIDGE, unix.AF_ATMPVC,
	unix.AF_X25, unix.AF_INET6, unix.AF_ROSE,
	unix.AF_NETBEUI, unix.AF_SECURITY, unix.AF_KEY, unix.AF_NETLINK,
	unix.AF_ASH, unix.AF_RDS, unix.AF_SNA,
	unix.AF_PPPOX, unix.AF_LLC, unix.AF_IB, unix.AF_MPLS, unix.AF_CAN,
	unix.AF_TIPC, unix.AF_BLUETOOTH, unix.AF_IUCV, unix.AF_RXRPC,
	unix.AF_PHONET, unix.AF_IEEE802154, unix.AF_NFC,
	unix.AF_KCM, unix.AF_QIPCRTR, unix.AF_SMC, unix.AF_XDP, unix.AF_MCTP,
}

// socketFamilyErrno is returned for a refused family. EAFNOSUPPORT is what a
// kernel built without the family answers, so callers fall back cleanly.
const socketFamilyErrno = unix.EAFNOSUPPORT

// mptcpErrno is returned for socket(..., IPPROTO_MPTCP). Landlock's TCP rules
// do not apply to MPTCP sockets on the kernels airlock targets, so MPTCP
// would bypass the network policy. EPROTONOSUPPORT is the answer of a kernel
// without MPTCP, and Go's net package (which tries MPTCP first for
// listeners) then falls back to plain TCP.
const mptcpErrno = unix.EPROTONOSUPPORT

// deniedIoctls are ioctl requests refused with EPERM. TIOCSTI pushes bytes
// into a terminal's input queue, so sandboxed code sharing a terminal with a
// person could type commands into the person's shell. TIOCLINUX can read the
// virtual console's screen and selection. The kernel compares the request as
// a 32-bit unsigned int.
var deniedIoctls = []uint32{unix.TIOCSTI, unix.TIOCLINUX}

// personalities are the only personality(2) arguments allowed, as in Docker:
// PER_LINUX (0), PER_LINUX32 (8), UNAME26 (0x20000), PER_LINUX32|UNAME26
// (0x20008) and 0xffffffff, which only queries. Everything else, notably
// ADDR_NO_RANDOMIZE and READ_IMPLIES_EXEC, weakens exploit mitigations.
var personalities = []uint32{0x0, 0x8, 0x20000, 0x20008, 0xffffffff}
