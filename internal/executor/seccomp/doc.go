// Package seccomp builds and installs the system call filter that every
// process in an airlock sandbox runs under.
//
// The executor (PID 1 of the sandbox) calls [Install] once, after its mount
// and namespace setup and before it runs anything untrusted. The filter then
// covers the executor itself, every thread it has, and everything it starts:
// seccomp filters are inherited across fork and execve and can never be
// removed. [Program] returns the same filter as classic BPF for inspection
// and tests.
//
// The filter is a second wall, not the first. Namespaces, the mount layout,
// landlock and cgroups decide what the sandbox can reach; this filter shrinks
// the kernel interface through which a bug in any of those, or in the kernel
// itself, could be exploited.
//
// # Who may import it
//
// Importers: the in-sandbox side only (internal/executor). It imports nothing but the standard library and golang.org/x/sys/unix, keeps
// unsafe in filter_unsafe.go, and builds on Linux only; amd64 and arm64 have
// syscall tables, and on any other architecture [Program] and [Install]
// return an error rather than run unfiltered.
//
// # Policy, and why
//
// Architecture first. seccomp_data carries the audit architecture of each
// call, and syscall numbers mean different things on different ABIs: on
// x86-64, "int $0x80" enters the i386 table, where number 11 is execve, not
// munmap. The filter kills the process for any architecture other than the
// native one instead of returning an error, because such a call is an
// attempt to get around the filter, not a program that needs a fallback. On
// amd64, x32 calls share the native architecture value and differ only in
// bit 30 of the number; they get ENOSYS, the answer of a kernel without x32.
//
// Default deny. Only listed calls pass; everything else, including calls
// added to future kernels, fails with EPERM. The list is the unconditional
// allow list of Docker's default profile (moby/profiles seccomp/default.json)
// for a container without extra capabilities, which decades of container
// workloads have shown to be enough for ordinary programs, translated to the
// names that exist on amd64 and arm64.
//
// Denied on top of Docker. Sandboxed code may run as root inside a user
// namespace, where capability checks that stop a Docker container can pass;
// so calls Docker gates on capabilities are refused here outright, and a few
// it allows are taken away:
//   - Mount table and root: mount, umount2, pivot_root, chroot and the new
//     mount API (fsopen, fsconfig, fsmount, fspick, open_tree, move_mount,
//     mount_setattr). The executor has built the file system view; nothing
//     inside may change it.
//   - Namespaces: unshare, setns, and clone with namespace flags. A new user
//     namespace hands out fresh capabilities and, with them, kernel code
//     (netfilter, mounts of exotic file systems) behind many privilege
//     escalations. clone3 is refused with ENOSYS because its flags sit in
//     user memory the filter cannot read; glibc then falls back to clone,
//     whose flags it can read. Go uses clone3 only for
//     SysProcAttr.UseCgroupFD (and CLONE_NEWTIME), which cannot work inside
//     the sandbox.
//   - Large, frequently exploited kernel subsystems: bpf, perf_event_open,
//     userfaultfd (makes kernel races easy to win), io_uring (bypasses
//     seccomp for the operations it performs).
//   - Kernel keyrings (keyctl, add_key, request_key): not namespaced, so they
//     could leak or clash with the host's keys.
//   - Other processes: ptrace, process_vm_readv/writev, pidfd_getfd, kcmp,
//     process_madvise. Docker allows ptrace on new kernels; a sandbox has no
//     debugger use case worth the attack surface and escape risk.
//   - Host-wide state and hardware: kexec_*, *_module, reboot, swapon/off,
//     acct, sethostname, setdomainname, syslog, quotactl, setting or
//     adjusting clocks (Docker allows the read-only uses of adjtimex and
//     clock_adjtime; airlock needs neither), vhangup, nfsservctl,
//     lookup_dcookie, fanotify_init, iopl, ioperm, NUMA memory policy.
//   - File handles: open_by_handle_at opens files by inode, skipping path
//     walks and therefore landlock and the mount layout; its counterpart
//     name_to_handle_at is refused with it.
//
// Argument filters:
//   - socket: IPPROTO_MPTCP gets EPROTONOSUPPORT, because landlock's TCP
//     rules do not cover MPTCP on the kernels airlock targets; Go and other
//     runtimes then fall back to TCP. Address families are Docker's list less
//     AF_PACKET (raw packets, a history of escalations and reachable with
//     CAP_NET_RAW over a namespace the sandbox owns); the rest, AF_VSOCK
//     among them, get EAFNOSUPPORT.
//   - ioctl: TIOCSTI (inject keystrokes into a terminal shared with a person)
//     and TIOCLINUX (read the console) get EPERM.
//   - personality: only the values Docker allows; others, such as
//     ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC, would weaken mitigations.
//
// Arguments are compared on their low 32 bits only, because the kernel
// truncates every inspected argument to 32 bits itself.
//
// # The link filter
//
// In an rw workspace the executor stacks a second, tiny filter on the
// thread that forks every command ([LinkNotifyProgram], [InstallListener]):
// link and linkat go to the executor as user notifications, which it
// notes for the workspace's dirty set and lets go on
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE, Linux 5.5; [ContinueSupported] asks the
// kernel on a throwaway thread). notify_linux.go says why, and
// docs/checkpoints.md, "The link notifier", what it closes.
//
// # Shape of the program
//
// The program loads the architecture and the syscall number, then finds the
// number's rule by binary search over ranges of consecutive numbers that
// share a rule, so an allowed call costs about a dozen instructions instead of
// walking a list of three hundred. Branches whose targets are beyond the
// 8-bit reach of a conditional jump go through an unconditional jump, which
// has a 32-bit offset; the assembler refuses to emit an offset that does not
// fit, and the program is checked against the kernel's 4096-instruction
// limit.
//
// On amd64 the assembled program is also compiled into the binary
// (table_linux_amd64.go), so that a sandbox's start does not assemble it
// again; TestBuiltProgram fails when the table and the policy part ways. After
// changing the policy, rewrite the table with
//
//	go test ./internal/executor/seccomp -run TestBuiltProgram -update-table
package seccomp
