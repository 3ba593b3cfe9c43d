package seccomp

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// x32SyscallBit marks x32 ABI system calls on x86-64. They carry the same
// AUDIT_ARCH_X86_64 as native calls; only this bit of the number differs.
const x32SyscallBit = 0x40000000

// arch describes how the running architecture tags and numbers system calls.
type arch struct {
	name  string // GOARCH, for error messages
	audit uint32 // AUDIT_ARCH_* of native system calls
	x32   bool   // refuse numbers with x32SyscallBit set

	numbers map[string]uint32 // syscall name -> number
	absent  []string          // policy names this architecture does not have
	extra   []string          // allowed on this architecture only
}

// Program returns the sandbox filter as classic BPF for the running architecture.
func Program() ([]unix.SockFilter, error) {
	a, err := nativeArch()
	if err != nil {
		return nil, err
	}
	prog, err := a.program()
	if err != nil {
		return nil, fmt.Errorf("assemble %s filter: %w", a.name, err)
	}
	return prog, nil
}

// program assembles:
//
//	load arch; if arch != native: kill process
//	load nr;   if nr has the x32 bit (amd64): ENOSYS
//	binary search over syscall number ranges, each leaf a return or an
//	argument filter; numbers without a rule get EPERM
func (a *arch) program() ([]unix.SockFilter, error) {
	rules, err := a.rules()
	if err != nil {
		return nil, err
	}
	dispatch, err := search(partition(rules, leaf{"deny", ret(retErrno(defaultErrno))}))
	if err != nil {
		return nil, fmt.Errorf("syscall table: %w", err)
	}
	if a.x32 {
		// An x32 kernel would run these as a second, separately numbered
		// ABI; refuse them all rather than keep a second table. ENOSYS is
		// what a kernel without x32 support answers.
		if dispatch, err = branch(unix.BPF_JSET, x32SyscallBit, ret(retErrno(unix.ENOSYS)), dispatch); err != nil {
			return nil, err
		}
	}
	body := concat(block{load(offsetNr)}, dispatch)

	// The numbers above mean something only for the native ABI: on x86-64,
	// "int $0x80" enters the i386 table, where 11 is execve rather than
	// munmap. Any other architecture value is an attempt to step around
	// the table, so the whole process dies instead of getting an errno.
	prog, err := branch(unix.BPF_JEQ, a.audit, body, ret(retKillProcess))
	if err != nil {
		return nil, err
	}
	prog = concat(block{load(offsetArch)}, prog)
	if len(prog) > unix.BPF_MAXINSNS {
		return nil, fmt.Errorf("program has %d instructions, the kernel accepts at most %d", len(prog), unix.BPF_MAXINSNS)
	}
	return prog, nil
}

// rules maps each system call number with a rule to its leaf: plain allows
// and the argument filters. Every other number is denied.
func (a *arch) rules() (map[uint32]leaf, error) {
	absent := make(map[string]bool, len(a.absent))
	for _, name := range a.absent {
		absent[name] = true
	}
	// lookup reports whether name exists here. A name that is neither
	// numbered nor declared absent is a mistake in the tables.
	lookup := func(name string) (uint32, bool, error) {
		if nr, ok := a.numbers[name]; ok {
			return nr, true, nil
		}
		if absent[name] {
			return 0, false, nil
		}
		return 0, false, fmt.Errorf("syscall %q has no number on %s", name, a.name)
	}

	rules := make(map[uint32]leaf)
	add := func(name string, l leaf) error {
		nr, ok, err := lookup(name)
		if err != nil || !ok {
			return err
		}
		if _, dup := rules[nr]; dup {
			return fmt.Errorf("syscall %q (%d) has two rules", name, nr)
		}
		rules[nr] = l
		return nil
	}

	allow := leaf{"allow", ret(retAllow)}
	for _, list := range [][]string{allowed, a.extra} {
		for _, name := range list {
			if err := add(name, allow); err != nil {
				return nil, err
			}
		}
	}
	for _, f := range argFilters {
		code, err := f.build()
		if err != nil {
			return nil, fmt.Errorf("%s filter: %w", f.name, err)
		}
		if err := add(f.name, leaf{f.name, code}); err != nil {
			return nil, err
		}
	}
	for _, name := range denied {
		nr, ok, err := lookup(name)
		if err != nil {
			return nil, err
		}
		if _, dup := rules[nr]; ok && dup {
			return nil, fmt.Errorf("syscall %q is both denied and allowed", name)
		}
	}
	return rules, nil
}

// argFilters are the system calls whose fate depends on their arguments.
var argFilters = []struct {
	name  string
	build func() (block, error)
}{
	{"clone", cloneFilter},
	{"clone3", clone3Filter},
	{"socket", socketFilter},
	{"ioctl", ioctlFilter},
	{"personality", personalityFilter},
}

// cloneFilter refuses clone with any namespace flag. The flags are the
// first argument on amd64 and arm64 (s390 swaps the first two).
func cloneFilter() (block, error) {
	b, err := branch(unix.BPF_JSET, namespaceFlags, ret(retErrno(unix.EPERM)), ret(retAllow))
	if err != nil {
		return nil, err
	}
	return concat(block{loadArgLow(0)}, b), nil
}

// clone3Filter refuses clone3 outright: its flags live in a struct in user
// memory, which a seccomp filter cannot read. ENOSYS is what older kernels
// answer, so glibc falls back to clone, whose flags the filter can check.
// (Go's os/exec uses plain clone unless SysProcAttr.UseCgroupFD is set.)
func clone3Filter() (block, error) {
	return ret(retErrno(unix.ENOSYS)), nil
}

// socketFilter refuses MPTCP (protocol, third argument) and the address
// families not in socketFamilies (domain, first argument).
func socketFilter() (block, error) {
	families := make(map[uint32]leaf, len(socketFamilies))
	for _, f := range socketFamilies {
		families[f] = leaf{"allow", ret(retAllow)}
	}
	byFamily, err := search(partition(families, leaf{"deny", ret(retErrno(socketFamilyErrno))}))
	if err != nil {
		return nil, err
	}
	b, err := branch(unix.BPF_JEQ, unix.IPPROTO_MPTCP,
		ret(retErrno(mptcpErrno)),
		concat(block{loadArgLow(0)}, byFamily))
	if err != nil {
		return nil, err
	}
	return concat(block{loadArgLow(2)}, b), nil
}

// ioctlFilter refuses the requests in deniedIoctls (second argument).
func ioctlFilter() (block, error) {
	b, err := oneOf(deniedIoctls, ret(retErrno(unix.EPERM)), ret(retAllow))
	if err != nil {
		return nil, err
	}
	return concat(block{loadArgLow(1)}, b), nil
}

// personalityFilter allows only the personalities listed in personalities.
func personalityFilter() (block, error) {
	b, err := oneOf(personalities, ret(retAllow), ret(retErrno(unix.EPERM)))
	if err != nil {
		return nil, err
	}
	return concat(block{loadArgLow(0)}, b), nil
}
