package landlock

import (
	"strconv"

	"golang.org/x/sys/unix"
)

// Landlock ABI versions that introduced what this package uses, from
// include/uapi/linux/landlock.h and Documentation/userspace-api/landlock.rst.
// golang.org/x/sys/unix v0.50.0 defines every constant used here, so none is
// redefined locally.
const (
	abiRefer    = 2 // LANDLOCK_ACCESS_FS_REFER
	abiTruncate = 3 // LANDLOCK_ACCESS_FS_TRUNCATE
	abiIoctlDev = 5 // LANDLOCK_ACCESS_FS_IOCTL_DEV
	abiScope    = 6 // landlock_ruleset_attr.scoped: LANDLOCK_SCOPE_*
	abiTSync    = 8 // LANDLOCK_RESTRICT_SELF_TSYNC

	// maxABI is the highest ABI whose features Restrict uses. ABI 9 adds
	// LANDLOCK_ACCESS_FS_RESOLVE_UNIX: handling it would deny connect(2) to
	// every pathname unix socket not covered by a rule, and Rules cannot name
	// the sockets a sandbox must reach (the egress proxy's), so handling it
	// needs an API change, not just a bigger number here.
	maxABI = abiTSync
)

// erratumScopedSignal is erratum 2 (security/landlock/errata/abi-6.h): once
// fixed, threads of one process may always signal each other, even when they
// are in different domains. Without TSYNC every thread gets a domain of its
// own, so on a kernel lacking this fix signal scoping would break the Go
// runtime's own thread-to-thread signals (preemption, AllThreadsSyscall).
const erratumScopedSignal = 2

// Filesystem access rights, grouped the way Rules grants them.
const (
	// accessFSv1 is every filesystem right of ABI 1.
	accessFSv1 = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM

	// accessFile are the rights that make sense on a non-directory; the
	// kernel's ACCESS_FILE (security/landlock/fs.c). A path_beneath rule on
	// a file carrying any other right fails with EINVAL.
	accessFile = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	accessReadOnly = unix.LANDLOCK_ACCESS_FS_EXECUTE |
		unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR

	// accessReadWrite leaves out MAKE_CHAR and MAKE_BLOCK (device nodes are
	// not a normal user's business) and IOCTL_DEV (device ioctls are granted
	// by Devices only). REFER lets files move between directories of the
	// writable trees; without it the kernel refuses every cross-directory
	// rename or link with EXDEV.
	accessReadWrite = accessReadOnly |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_REMOVE_DIR |
		unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_DIR |
		unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_FIFO |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM |
		unix.LANDLOCK_ACCESS_FS_REFER |
		unix.LANDLOCK_ACCESS_FS_TRUNCATE

	// accessDevice needs no TRUNCATE: open(O_TRUNC) ignores O_TRUNC on
	// device files, so "> /dev/null" works without it.
	accessDevice = unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_WRITE_FILE |
		unix.LANDLOCK_ACCESS_FS_IOCTL_DEV

	scopeAll = unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | unix.LANDLOCK_SCOPE_SIGNAL
)

// plan is what Restrict asks of a kernel: pure data derived from the kernel's
// ABI and errata, so it can be tested without restricting anything.
type plan struct {
	abi       int    // ABI used: the kernel's, capped at maxABI
	handledFS uint64 // landlock_ruleset_attr.handled_access_fs
	scoped    uint64 // landlock_ruleset_attr.scoped
	tsync     bool   // one landlock_restrict_self call with TSYNC

	readOnly, readWrite, devices uint64 // rights per Rules field
}

// newPlan returns the plan for a kernel reporting kernelABI (> 0) and the
// errata bitmask from LANDLOCK_CREATE_RULESET_ERRATA.
func newPlan(kernelABI int, errata uint64) plan {
	abi := min(kernelABI, maxABI)
	p := plan{abi: abi, handledFS: handledFS(abi), tsync: abi >= abiTSync}
	if abi >= abiScope {
		p.scoped = scopeAll
		if !p.tsync && errata&(1<<(erratumScopedSignal-1)) == 0 {
			p.scoped &^= unix.LANDLOCK_SCOPE_SIGNAL
		}
	}
	p.readOnly = accessReadOnly & p.handledFS
	p.readWrite = accessReadWrite & p.handledFS
	p.devices = accessDevice & p.handledFS
	return p
}

// handledFS returns every filesystem right that ABI abi knows, so that
// everything not granted by a rule is denied.
func handledFS(abi int) uint64 {
	h := uint64(accessFSv1)
	if abi >= abiRefer {
		h |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= abiTruncate {
		h |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= abiIoctlDev {
		h |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	return h
}

// ruleAccess returns the rights a path_beneath rule may carry: access itself
// on a directory, only the file rights on anything else.
func ruleAccess(access uint64, isDir bool) uint64 {
	if isDir {
		return access
	}
	return access & accessFile
}

// Feature is one thing Restrict enforces where the kernel supports it.
type Feature struct {
	// Name says what the feature restricts, for people.
	Name string
	// ABI is the Landlock ABI that introduced it.
	ABI int
	// Used reports that Restrict enforces it on the kernel Features was
	// asked about.
	Used bool
	// Why says why Used is false: the kernel's ABI is too old, or it
	// lacks a fix Restrict depends on.
	Why string
}

// Features lists what Restrict enforces on a kernel reporting kernelABI
// (0: no Landlock) and the errata bitmask errata (Errata), each feature
// with whether it is used there. It reads the plan Restrict would make,
// so the two cannot disagree.
func Features(kernelABI int, errata uint64) []Feature {
	var p plan
	if kernelABI > 0 {
		p = newPlan(kernelABI, errata)
	}
	needs := func(abi int) string {
		if kernelABI >= abi {
			return ""
		}
		return "needs ABI " + strconv.Itoa(abi)
	}
	signalWhy := needs(abiScope)
	if signalWhy == "" && p.scoped&unix.LANDLOCK_SCOPE_SIGNAL == 0 {
		// Without TSYNC each thread has a domain of its own, and
		// without the fix they could not signal each other.
		signalWhy = "the kernel lacks the fix of Landlock erratum 2"
	}
	fs := []Feature{
		{Name: "file-system rules", ABI: 1, Used: p.handledFS&accessFSv1 != 0, Why: needs(1)},
		{Name: "cross-directory rename and link", ABI: abiRefer, Used: p.handledFS&unix.LANDLOCK_ACCESS_FS_REFER != 0, Why: needs(abiRefer)},
		{Name: "truncate", ABI: abiTruncate, Used: p.handledFS&unix.LANDLOCK_ACCESS_FS_TRUNCATE != 0, Why: needs(abiTruncate)},
		{Name: "device ioctls", ABI: abiIoctlDev, Used: p.handledFS&unix.LANDLOCK_ACCESS_FS_IOCTL_DEV != 0, Why: needs(abiIoctlDev)},
		{Name: "abstract-socket scoping", ABI: abiScope, Used: p.scoped&unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET != 0, Why: needs(abiScope)},
		{Name: "signal scoping", ABI: abiScope, Used: p.scoped&unix.LANDLOCK_SCOPE_SIGNAL != 0, Why: signalWhy},
		{Name: "one domain for all threads", ABI: abiTSync, Used: p.tsync, Why: needs(abiTSync)},
	}
	for i := range fs {
		if fs[i].Used {
			fs[i].Why = ""
		}
	}
	return fs
}

// MaxABI is the highest Landlock ABI whose features Restrict uses; a newer
// kernel is used at this ABI.
const MaxABI = maxABI
