package landlock

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrUnavailable is returned by Restrict when the kernel has no usable
// Landlock (not built in, or disabled at boot). The caller decides whether
// running without this second layer is acceptable.
var ErrUnavailable = errors.New("landlock unavailable")

// ABI returns the Landlock ABI version the kernel supports (0 if Landlock is
// unavailable or disabled).
func ABI() (int, error) {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	switch errno {
	case 0:
		return int(v), nil
	case unix.ENOSYS, unix.EOPNOTSUPP: // not built in; disabled at boot
		return 0, nil
	default:
		return 0, fmt.Errorf("query landlock abi: %w", errno)
	}
}

// Errata returns the kernel's Landlock errata bitmask (bit N-1 set: erratum
// N is fixed), or 0 on kernels that predate the errata interface.
func Errata() uint64 {
	v, _, errno := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
	if errno != 0 {
		return 0
	}
	return uint64(v)
}

// Rules lists what stays allowed. Paths are absolute paths in the caller's
// current root (the executor applies this after pivot_root, so /usr means the
// sandbox's /usr). A rule covers the path and, for a directory, everything
// beneath it. Symlinks are followed: a rule for /lib -> usr/lib covers
// /usr/lib. Paths that do not exist are skipped and reported in
// Status.Skipped, so one list can serve images with and without /lib64.
type Rules struct {
	// ReadOnly paths may be read, executed and listed.
	ReadOnly []string
	// ReadOnlyFDs are open descriptors (O_PATH will do) of directories
	// that may be read and listed, with everything beneath them: trees
	// that have no path in the caller's root, like a directory of a mount
	// detached from it. Restrict does not close them.
	ReadOnlyFDs []int
	// ReadWrite paths get everything a normal user needs: read, execute,
	// list, write, create, remove, rename, link, truncate, make fifos,
	// sockets and symlinks. Device nodes may not be created.
	ReadWrite []string
	// ReadWriteFDs are open descriptors of directories granted as
	// ReadWrite paths are, with everything beneath them: trees with no
	// path in the caller's root, as ReadOnlyFDs. Restrict does not close
	// them.
	ReadWriteFDs []int
	// Devices are character devices (or directories of them, like
	// /dev/pts) that may be opened for reading and writing, with device
	// ioctls allowed (ABI 5 IOCTL_DEV).
	Devices []string
	// SeccompSetsNoNewPrivs says that the caller installs a seccomp filter
	// on every thread with SECCOMP_FILTER_FLAG_TSYNC right after Restrict
	// returns, from a thread that holds no_new_privs: the kernel then sets
	// no_new_privs on every thread it synchronizes (seccomp_sync_threads),
	// so Restrict need not set it on every thread first. Restrict then
	// leaves no_new_privs alone where landlock_restrict_self accepts the
	// call without it, which it does on a thread that holds CAP_SYS_ADMIN
	// in its user namespace (the executor, root of the sandbox's), and
	// sets it as without this field where the kernel refuses (EPERM).
	// Without TSYNC, each no_new_privs set on every thread is a stop of the
	// world and a signal to every other thread (AllThreadsSyscall).
	SeccompSetsNoNewPrivs bool
}

// validate checks what can be checked without touching the filesystem.
func (r Rules) validate() error {
	var errs []error
	for _, paths := range [][]string{r.ReadOnly, r.ReadWrite, r.Devices} {
		for _, p := range paths {
			if !filepath.IsAbs(p) {
				errs = append(errs, fmt.Errorf("path %q is not absolute", p))
			}
		}
	}
	for _, fd := range slices.Concat(r.ReadOnlyFDs, r.ReadWriteFDs) {
		if fd < 0 {
			errs = append(errs, fmt.Errorf("descriptor %d is negative", fd))
		}
	}
	return errors.Join(errs...)
}

// Status says what Restrict enforced.
type Status struct {
	// ABI is the ABI used: the kernel's, capped at the highest this package
	// knows (8).
	ABI int
	// Scoped reports that signal and abstract-unix-socket scoping (ABI >= 6)
	// are both in force.
	Scoped bool
	// SharedDomain reports that every thread was put into one domain with
	// LANDLOCK_RESTRICT_SELF_TSYNC (ABI >= 8). When false, each thread got a
	// domain of its own with the same rules; see Restrict.
	SharedDomain bool
	// Skipped lists the paths from Rules that did not exist and got no rule.
	Skipped []string
}

// Restrict sets no_new_privs (but see Rules.SeccompSetsNoNewPrivs) and
// restricts the calling process, all of its threads and all its future
// children to r. It cannot be undone; calling it
// again stacks a further restriction.
//
// It is best effort over ABI versions: it handles every filesystem right the
// kernel knows (up to ABI 8), so anything not granted by r is denied, and
// grants each right only where r says. What each ABI adds:
//   - ABI 1: no REFER, so the kernel refuses every rename or link into
//     another directory with EXDEV, even inside ReadWrite (mv falls back to
//     copy and delete). From ABI 2 ReadWrite grants REFER.
//   - ABI 3: truncate(2) becomes controllable; before, it is always allowed.
//   - ABI 5: ioctl on devices is allowed only on Devices.
//   - ABI 6: the domain is scoped: no signals to, and no connects to
//     abstract unix sockets of, processes outside it (Status.Scoped).
//   - ABI 8: all threads are restricted atomically (Status.SharedDomain).
//
// Network (TCP) rights are not handled: the network namespace is the network
// boundary.
//
// Threads: landlock_restrict_self only restricts the calling thread unless
// the kernel has LANDLOCK_RESTRICT_SELF_TSYNC (ABI 8), and a Go program forks
// children from arbitrary threads. With TSYNC, Restrict makes one call that
// puts every thread into the same domain. Without it, Restrict uses
// syscall.AllThreadsSyscall, which stops the world and runs prctl and
// landlock_restrict_self on every thread the Go runtime has; threads created
// later are cloned from a restricted thread. Every thread then has the same
// rules, so every file access and every child is restricted whatever thread
// it comes from, but each thread's domain is a distinct kernel object. With
// Scoped, a child started from one thread is therefore outside the domain of
// the other threads, and signalling it from another thread fails with EPERM
// (threads of this process can still signal each other, kernel erratum 2;
// on a kernel without that fix Restrict does not scope signals and reports
// Scoped false). A caller that must signal its children should execve right
// after Restrict, as the executor's init helper does: the new program starts
// with a single thread and so with one domain that all its threads share.
// AllThreadsSyscall is unavailable in binaries that use cgo (including
// -race builds), so there, on kernels without TSYNC, Restrict fails with an
// error wrapping ENOTSUP before restricting anything; the executor is built
// with CGO_ENABLED=0.
//
// Processes started before Restrict is called stay unrestricted.
//
// Restrict returns ErrUnavailable if the kernel has no Landlock, and an error
// if a path in r is not absolute or exists but cannot be opened. A failure
// after no_new_privs was set leaves no_new_privs set.
func Restrict(r Rules) (Status, error) {
	if err := r.validate(); err != nil {
		return Status{}, fmt.Errorf("landlock rules: %w", err)
	}
	kernelABI, err := ABI()
	if err != nil {
		return Status{}, err
	}
	if kernelABI == 0 {
		return Status{}, ErrUnavailable
	}
	p := newPlan(kernelABI, Errata())

	rulesetFD, err := createRuleset(p.handledFS, p.scoped, p.abi >= abiScope)
	if err != nil {
		return Status{}, fmt.Errorf("create landlock ruleset: %w", err)
	}
	defer unix.Close(rulesetFD)

	st := Status{ABI: p.abi, Scoped: p.scoped == scopeAll, SharedDomain: p.tsync}
	groups := []struct {
		paths  []string
		access uint64
	}{
		{r.ReadOnly, p.readOnly},
		{r.ReadWrite, p.readWrite},
		{r.Devices, p.devices},
	}
	for _, g := range groups {
		for _, path := range g.paths {
			added, err := addPathRule(rulesetFD, path, g.access)
			if err != nil {
				return Status{}, err
			}
			if !added {
				st.Skipped = append(st.Skipped, path)
			}
		}
	}
	for _, fd := range r.ReadOnlyFDs {
		if err := addFDRule(rulesetFD, fd, p.readOnly); err != nil {
			return Status{}, err
		}
	}
	for _, fd := range r.ReadWriteFDs {
		if err := addFDRule(rulesetFD, fd, p.readWrite); err != nil {
			return Status{}, err
		}
	}

	if err := restrictAllThreads(rulesetFD, p.tsync, r.SeccompSetsNoNewPrivs); err != nil {
		return Status{}, err
	}
	return st, nil
}

// addPathRule adds a rule granting access beneath path, masked to the file
// rights if path is not a directory. It reports false, and no error, if path
// does not exist.
func addPathRule(rulesetFD int, path string, access uint64) (bool, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("open %s for landlock rule: %w", path, err)
	}
	defer unix.Close(fd)

	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return false, fmt.Errorf("stat %s for landlock rule: %w", path, err)
	}
	isDir := st.Mode&unix.S_IFMT == unix.S_IFDIR
	if err := addPathBeneath(rulesetFD, fd, ruleAccess(access, isDir)); err != nil {
		return false, fmt.Errorf("add landlock rule for %s: %w", path, err)
	}
	return true, nil
}

// addFDRule adds a rule granting access beneath the directory open at fd.
func addFDRule(rulesetFD, fd int, access uint64) error {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat descriptor %d for landlock rule: %w", fd, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return fmt.Errorf("landlock rule for descriptor %d: not a directory", fd)
	}
	if err := addPathBeneath(rulesetFD, fd, access); err != nil {
		return fmt.Errorf("add landlock rule for descriptor %d: %w", fd, err)
	}
	return nil
}

// restrictAllThreads sets no_new_privs (which landlock_restrict_self requires
// of unprivileged callers, and which keeps set-uid binaries from shedding the
// domain's intent) and enforces the ruleset on every thread. With
// seccompNNP (Rules.SeccompSetsNoNewPrivs) and without TSYNC, it first
// tries the restriction alone: AllThreadsSyscall makes the call on its own
// thread first and returns that thread's error before it touches another,
// so a refusal (EPERM: no CAP_SYS_ADMIN in the user namespace) changed
// nothing, and the usual order follows.
func restrictAllThreads(rulesetFD int, tsync, seccompNNP bool) error {
	if tsync {
		// no_new_privs and the restriction are per thread: both calls must
		// run on the same one. TSYNC copies both to the sibling threads.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return fmt.Errorf("set no_new_privs: %w", err)
		}
		_, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), unix.LANDLOCK_RESTRICT_SELF_TSYNC, 0)
		if errno != 0 {
			return fmt.Errorf("landlock_restrict_self with tsync: %w", errno)
		}
		return nil
	}

	if seccompNNP {
		_, _, errno := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), 0, 0)
		switch errno {
		case 0:
			return nil
		case syscall.ENOTSUP:
			return fmt.Errorf("landlock_restrict_self on all threads (cgo binary and kernel without landlock abi %d): %w", abiTSync, errno)
		case syscall.EPERM:
			// Not privileged in the user namespace: no_new_privs first.
		default:
			return fmt.Errorf("landlock_restrict_self on all threads: %w", errno)
		}
	}
	// AllThreadsSyscall returns ENOTSUP in cgo binaries before doing
	// anything, so the first call is also the cgo check.
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_NO_NEW_PRIVS, 1, 0); errno != 0 {
		if errno == syscall.ENOTSUP {
			return fmt.Errorf("set no_new_privs on all threads (cgo binary and kernel without landlock abi %d): %w", abiTSync, errno)
		}
		return fmt.Errorf("set no_new_privs on all threads: %w", errno)
	}
	if _, _, errno := syscall.AllThreadsSyscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rulesetFD), 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self on all threads: %w", errno)
	}
	return nil
}
