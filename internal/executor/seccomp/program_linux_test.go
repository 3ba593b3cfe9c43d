package seccomp

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// testArch returns the running architecture's tables and its program.
func testArch(t testing.TB) (*arch, []unix.SockFilter) {
	t.Helper()
	a, err := nativeArch()
	if err != nil {
		t.Skipf("no seccomp tables: %v", err)
	}
	prog, err := Program()
	if err != nil {
		t.Fatalf("Program() error: %v", err)
	}
	return a, prog
}

// actionName renders a filter return value for test messages.
func actionName(v uint32) string {
	switch {
	case v == retAllow:
		return "ALLOW"
	case v == retKillProcess:
		return "KILL_PROCESS"
	case v&unix.SECCOMP_RET_ACTION_FULL == unix.SECCOMP_RET_ERRNO:
		return "ERRNO(" + unix.ErrnoName(unix.Errno(v&unix.SECCOMP_RET_DATA)) + ")"
	}
	return fmt.Sprintf("%#x", v)
}

// otherArch is an audit architecture that is not the native one.
func otherArch(a *arch) uint32 {
	if a.audit == unix.AUDIT_ARCH_X86_64 {
		return unix.AUDIT_ARCH_AARCH64
	}
	return unix.AUDIT_ARCH_X86_64
}

const (
	sigchld         = uint64(unix.SIGCHLD)
	addrNoRandomize = 0x0040000 // ADDR_NO_RANDOMIZE from <linux/personality.h>
	readImpliesExec = 0x0400000 // READ_IMPLIES_EXEC
)

func TestProgram(t *testing.T) {
	a, prog := testArch(t)
	if err := validate(prog); err != nil {
		t.Fatalf("Program() does not pass the kernel's checks: %v", err)
	}
	t.Logf("%s program: %d instructions", a.name, len(prog))

	allow := retAllow
	eperm := retErrno(unix.EPERM)
	enosys := retErrno(unix.ENOSYS)
	type args = [6]uint64
	type testCase struct {
		name    string
		syscall string // resolved on the running arch; skipped if absent
		nr      uint32 // used when syscall is empty
		arch    uint32 // 0 means native
		args    args
		want    uint32
		amd64   bool // amd64-only case
	}
	tests := []testCase{
		{name: "read", syscall: "read", want: allow},
		{name: "write", syscall: "write", want: allow},
		{name: "execve", syscall: "execve", want: allow},
		{name: "exit_group", syscall: "exit_group", want: allow},
		{name: "futex", syscall: "futex", want: allow},
		{name: "mmap", syscall: "mmap", want: allow},
		{name: "openat", syscall: "openat", want: allow},
		{name: "landlock_restrict_self", syscall: "landlock_restrict_self", want: allow},
		{name: "open (amd64)", syscall: "open", want: allow, amd64: true},
		{name: "arch_prctl (amd64)", syscall: "arch_prctl", want: allow, amd64: true},

		{name: "mount", syscall: "mount", want: eperm},
		{name: "umount2", syscall: "umount2", want: eperm},
		{name: "fsopen", syscall: "fsopen", want: eperm},
		{name: "open_tree", syscall: "open_tree", want: eperm},
		{name: "pivot_root", syscall: "pivot_root", want: eperm},
		{name: "chroot", syscall: "chroot", want: eperm},
		{name: "bpf", syscall: "bpf", want: eperm},
		{name: "unshare", syscall: "unshare", args: args{unix.CLONE_NEWUSER}, want: eperm},
		{name: "setns", syscall: "setns", want: eperm},
		{name: "keyctl", syscall: "keyctl", want: eperm},
		{name: "add_key", syscall: "add_key", want: eperm},
		{name: "io_uring_setup", syscall: "io_uring_setup", want: eperm},
		{name: "ptrace", syscall: "ptrace", want: eperm},
		{name: "process_vm_writev", syscall: "process_vm_writev", want: eperm},
		{name: "perf_event_open", syscall: "perf_event_open", want: eperm},
		{name: "userfaultfd", syscall: "userfaultfd", want: eperm},
		{name: "init_module", syscall: "init_module", want: eperm},
		{name: "kexec_load", syscall: "kexec_load", want: eperm},
		{name: "name_to_handle_at", syscall: "name_to_handle_at", want: eperm},
		{name: "clock_settime", syscall: "clock_settime", want: eperm},
		{name: "iopl (amd64)", syscall: "iopl", want: eperm, amd64: true},
		{name: "unknown number 1000", nr: 1000, want: eperm},
		{name: "unknown number 0x3fffffff", nr: 0x3fffffff, want: eperm},

		{name: "clone thread", syscall: "clone", want: allow, args: args{
			unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND |
				unix.CLONE_SYSVSEM | unix.CLONE_THREAD,
		}},
		{name: "clone os/exec", syscall: "clone", want: allow, args: args{
			unix.CLONE_VFORK | unix.CLONE_VM | unix.CLONE_PIDFD | sigchld,
		}},
		{name: "clone fork", syscall: "clone", args: args{sigchld}, want: allow},
		{name: "clone high word ignored", syscall: "clone", args: args{0xffffffff_00000000 | sigchld}, want: allow},
		{name: "clone CLONE_NEWUSER", syscall: "clone", args: args{unix.CLONE_NEWUSER | sigchld}, want: eperm},
		{name: "clone CLONE_NEWUSER with high word", syscall: "clone", args: args{1<<32 | unix.CLONE_NEWUSER}, want: eperm},
		{name: "clone CLONE_NEWNS", syscall: "clone", args: args{unix.CLONE_NEWNS}, want: eperm},
		{name: "clone CLONE_NEWNET", syscall: "clone", args: args{unix.CLONE_NEWNET | unix.CLONE_VM}, want: eperm},
		{name: "clone CLONE_NEWPID", syscall: "clone", args: args{unix.CLONE_NEWPID}, want: eperm},
		{name: "clone CLONE_NEWCGROUP", syscall: "clone", args: args{unix.CLONE_NEWCGROUP}, want: eperm},
		{name: "clone CLONE_NEWIPC", syscall: "clone", args: args{unix.CLONE_NEWIPC}, want: eperm},
		{name: "clone CLONE_NEWUTS", syscall: "clone", args: args{unix.CLONE_NEWUTS}, want: eperm},
		{name: "clone flags in second arg ignored", syscall: "clone", args: args{sigchld, unix.CLONE_NEWUSER}, want: allow},
		{name: "clone3", syscall: "clone3", want: enosys},
		{name: "clone3 with args", syscall: "clone3", args: args{0x7fff0000, 88}, want: enosys},

		{name: "socket tcp", syscall: "socket", args: args{unix.AF_INET, unix.SOCK_STREAM, 0}, want: allow},
		{name: "socket tcp explicit", syscall: "socket", args: args{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_TCP}, want: allow},
		{name: "socket udp", syscall: "socket", args: args{unix.AF_INET, unix.SOCK_DGRAM | unix.SOCK_CLOEXEC, 0}, want: allow},
		{name: "socket unix", syscall: "socket", args: args{unix.AF_UNIX, unix.SOCK_STREAM, 0}, want: allow},
		{name: "socket netlink route", syscall: "socket", args: args{unix.AF_NETLINK, unix.SOCK_RAW, unix.NETLINK_ROUTE}, want: allow},
		{name: "socket mptcp", syscall: "socket", args: args{unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: retErrno(unix.EPROTONOSUPPORT)},
		{name: "socket mptcp v6", syscall: "socket", args: args{unix.AF_INET6, unix.SOCK_STREAM, unix.IPPROTO_MPTCP}, want: retErrno(unix.EPROTONOSUPPORT)},
		{name: "socket mptcp high word", syscall: "socket", args: args{unix.AF_INET, unix.SOCK_STREAM, 1<<32 | unix.IPPROTO_MPTCP}, want: retErrno(unix.EPROTONOSUPPORT)},
		{name: "socket tcp high word", syscall: "socket", args: args{7<<32 | unix.AF_INET, unix.SOCK_STREAM, 0}, want: allow},
		{name: "socket packet", syscall: "socket", args: args{unix.AF_PACKET, unix.SOCK_RAW, 0x300}, want: retErrno(unix.EAFNOSUPPORT)},
		{name: "socket vsock", syscall: "socket", args: args{unix.AF_VSOCK, unix.SOCK_STREAM, 0}, want: retErrno(unix.EAFNOSUPPORT)},
		{name: "socket alg", syscall: "socket", args: args{unix.AF_ALG, unix.SOCK_SEQPACKET, 0}, want: retErrno(unix.EAFNOSUPPORT)},
		{name: "socket decnet", syscall: "socket", args: args{unix.AF_DECnet, unix.SOCK_STREAM, 0}, want: retErrno(unix.EAFNOSUPPORT)},
		{name: "socket family 46", syscall: "socket", args: args{46, unix.SOCK_STREAM, 0}, want: retErrno(unix.EAFNOSUPPORT)},
		{name: "socket family -1", syscall: "socket", args: args{0xffffffff, unix.SOCK_STREAM, 0}, want: retErrno(unix.EAFNOSUPPORT)},
		{name: "socket mctp", syscall: "socket", args: args{unix.AF_MCTP, unix.SOCK_DGRAM, 0}, want: allow},

		{name: "ioctl TIOCSTI", syscall: "ioctl", args: args{0, unix.TIOCSTI}, want: eperm},
		{name: "ioctl TIOCLINUX", syscall: "ioctl", args: args{0, unix.TIOCLINUX}, want: eperm},
		{name: "ioctl TIOCSTI high word", syscall: "ioctl", args: args{0, 0xffffffff_00000000 | unix.TIOCSTI}, want: eperm},
		{name: "ioctl TCGETS", syscall: "ioctl", args: args{0, unix.TCGETS}, want: allow},
		{name: "ioctl TIOCINQ", syscall: "ioctl", args: args{3, unix.TIOCINQ}, want: allow},
		{name: "ioctl TIOCSTI+1", syscall: "ioctl", args: args{0, unix.TIOCSTI + 1}, want: allow},

		{name: "personality query", syscall: "personality", args: args{0xffffffff}, want: allow},
		{name: "personality PER_LINUX", syscall: "personality", args: args{0}, want: allow},
		{name: "personality PER_LINUX32", syscall: "personality", args: args{8}, want: allow},
		{name: "personality UNAME26", syscall: "personality", args: args{0x20000}, want: allow},
		{name: "personality PER_LINUX32|UNAME26", syscall: "personality", args: args{0x20008}, want: allow},
		{name: "personality ADDR_NO_RANDOMIZE", syscall: "personality", args: args{addrNoRandomize}, want: eperm},
		{name: "personality READ_IMPLIES_EXEC", syscall: "personality", args: args{readImpliesExec}, want: eperm},

		{name: "i386 execve", nr: 11, arch: unix.AUDIT_ARCH_I386, want: retKillProcess},
		{name: "i386 read", nr: 3, arch: unix.AUDIT_ARCH_I386, want: retKillProcess},
		{name: "arm eabi", nr: 0, arch: unix.AUDIT_ARCH_ARM, want: retKillProcess},
		{name: "arch zero", syscall: "read", arch: 0xffffffff, want: retKillProcess},
		{name: "x32 read (amd64)", nr: x32SyscallBit, want: enosys, amd64: true},
		{name: "x32 execve (amd64)", nr: x32SyscallBit | 520, want: enosys, amd64: true},
		{name: "x32 mount (amd64)", nr: x32SyscallBit | 165, want: enosys, amd64: true},
		{name: "number -1 (amd64)", nr: 0xffffffff, want: enosys, amd64: true},
	}
	tests = append(tests, testCase{name: "read from the other 64-bit arch", syscall: "read", arch: otherArch(a), want: retKillProcess})

	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.amd64 && a.name != "amd64" {
				t.Skip("amd64 only")
			}
			d := seccompData{nr: tt.nr, arch: tt.arch, args: tt.args}
			if tt.syscall != "" {
				nr, ok := a.numbers[tt.syscall]
				if !ok {
					t.Skipf("%s has no %s", a.name, tt.syscall)
				}
				d.nr = nr
			}
			if d.arch == 0 {
				d.arch = a.audit
			}
			got, _, err := run(prog, d)
			if err != nil {
				t.Fatalf("run(%+v) error: %v", d, err)
			}
			if got != tt.want {
				t.Errorf("run(%+v) = %s, want %s", d, actionName(got), actionName(tt.want))
			}
		})
	}
}

// TestAllowlist checks every allowed syscall is allowed and every explicitly
// denied one is refused with EPERM.
func TestAllowlist(t *testing.T) {
	a, prog := testArch(t)
	check := func(names []string, want uint32) {
		for _, name := range names {
			nr, ok := a.numbers[name]
			if !ok {
				if !slices.Contains(a.absent, name) {
					t.Errorf("%s: no number and not declared absent on %s", name, a.name)
				}
				continue
			}
			got, _, err := run(prog, seccompData{nr: nr, arch: a.audit})
			if err != nil {
				t.Fatalf("run(%s) error: %v", name, err)
			}
			if got != want {
				t.Errorf("run(%s) = %s, want %s", name, actionName(got), actionName(want))
			}
		}
	}
	check(allowed, retAllow)
	check(a.extra, retAllow)
	check(denied, retErrno(unix.EPERM))

	for _, name := range denied {
		if slices.Contains(allowed, name) || slices.Contains(a.extra, name) {
			t.Errorf("%s is both allowed and denied", name)
		}
	}
	for _, f := range argFilters {
		if slices.Contains(allowed, f.name) || slices.Contains(denied, f.name) {
			t.Errorf("%s has an argument filter and is also in a plain list", f.name)
		}
	}
}

// TestSocketFamilies checks the family list against Docker's, written out
// by number as default.json has it: below 12, or one of the listed values.
func TestSocketFamilies(t *testing.T) {
	docker := []uint32{13, 14, 15, 16, 17, 18, 21, 22, 24, 26, 27, 28, 29, 30, 31, 32, 33, 35, 36, 39, 41, 42, 43, 44, 45}
	for v := range uint32(64) {
		want := (v < 12 || slices.Contains(docker, v)) && v != unix.AF_PACKET
		if got := slices.Contains(socketFamilies, v); got != want {
			t.Errorf("family %d allowed = %v, want %v", v, got, want)
		}
	}
}

// TestOnlyListedAllowed walks every syscall number up to well past the
// highest one in use and checks that nothing outside the policy is allowed.
func TestOnlyListedAllowed(t *testing.T) {
	a, prog := testArch(t)
	ok := make(map[uint32]bool)
	for _, list := range [][]string{allowed, a.extra} {
		for _, name := range list {
			if nr, found := a.numbers[name]; found {
				ok[nr] = true
			}
		}
	}
	filtered := make(map[uint32]bool)
	for _, f := range argFilters {
		if nr, found := a.numbers[f.name]; found {
			filtered[nr] = true
		}
	}
	for nr := uint32(0); nr < 2048; nr++ {
		got, _, err := run(prog, seccompData{nr: nr, arch: a.audit})
		if err != nil {
			t.Fatalf("run(nr %d) error: %v", nr, err)
		}
		switch {
		case filtered[nr]:
		case ok[nr] && got != retAllow:
			t.Errorf("run(nr %d) = %s, want ALLOW", nr, actionName(got))
		case !ok[nr] && got != retErrno(unix.EPERM):
			t.Errorf("run(nr %d) = %s, want ERRNO(EPERM)", nr, actionName(got))
		}
	}
}

// TestCost bounds the instructions executed per syscall, so a change that
// turns the binary search into a linear scan fails.
func TestCost(t *testing.T) {
	a, prog := testArch(t)
	var total, most int
	var worst string
	for _, name := range allowed {
		nr, ok := a.numbers[name]
		if !ok {
			continue
		}
		_, steps, err := run(prog, seccompData{nr: nr, arch: a.audit})
		if err != nil {
			t.Fatalf("run(%s) error: %v", name, err)
		}
		total += steps
		if steps > most {
			most, worst = steps, name
		}
	}
	mean := float64(total) / float64(len(allowed))
	t.Logf("%s: %d instructions; allowed syscalls cost %.1f instructions on average, at most %d (%s)",
		a.name, len(prog), mean, most, worst)
	if most > 20 {
		t.Errorf("%s costs %d instructions, want at most 20", worst, most)
	}
}

// TestLongBranches builds searches large enough that branches need the long
// (BPF_JA) form and checks every value still lands in its interval.
func TestLongBranches(t *testing.T) {
	for _, n := range []int{1, 2, 3, 255, 256, 257, 600, 1000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			rules := make(map[uint32]leaf)
			for i := range n {
				// Even values get their own leaf; odd ones fall to def.
				v := uint32(2 * i)
				rules[v] = leaf{fmt.Sprint(v), ret(v)}
			}
			b, err := search(partition(rules, leaf{"def", ret(0xdead)}))
			if err != nil {
				t.Fatalf("search() error: %v", err)
			}
			prog := concat(block{load(offsetNr)}, b)
			if err := validate(prog); err != nil {
				t.Fatalf("validate() error: %v", err)
			}
			hasJA := slices.ContainsFunc(prog, func(ins unix.SockFilter) bool {
				return ins.Code == unix.BPF_JMP|unix.BPF_JA
			})
			if wantJA := len(prog) > 2*maxJump; wantJA && !hasJA {
				t.Errorf("%d-instruction search has no long jump", len(prog))
			}
			for v := uint32(0); v < uint32(2*n+3); v++ {
				want := uint32(0xdead)
				if v%2 == 0 && v < uint32(2*n) {
					want = v
				}
				got, _, err := run(prog, seccompData{nr: v})
				if err != nil {
					t.Fatalf("run(%d) error: %v", v, err)
				}
				if got != want {
					t.Fatalf("run(%d) = %#x, want %#x", v, got, want)
				}
			}
			if got, _, _ := run(prog, seccompData{nr: 0xffffffff}); got != 0xdead {
				t.Errorf("run(0xffffffff) = %#x, want 0xdead", got)
			}
		})
	}
}

func TestJumpRange(t *testing.T) {
	if _, err := jump(unix.BPF_JEQ, 0, maxJump, maxJump); err != nil {
		t.Errorf("jump(%d, %d) error: %v", maxJump, maxJump, err)
	}
	if _, err := jump(unix.BPF_JEQ, 0, maxJump+1, 0); err == nil {
		t.Errorf("jump(%d, 0) succeeded, want an error", maxJump+1)
	}
	if _, err := jump(unix.BPF_JEQ, 0, 0, -1); err == nil {
		t.Error("jump(0, -1) succeeded, want an error")
	}
	if _, err := jumpAlways(unix.BPF_MAXINSNS); err == nil {
		t.Errorf("jumpAlways(%d) succeeded, want an error", unix.BPF_MAXINSNS)
	}
	if _, err := search(nil); err == nil {
		t.Error("search(nil) succeeded, want an error")
	}
	if _, err := search([]interval{{lo: 0}, {lo: 0}}); err == nil {
		t.Error("search(unsorted) succeeded, want an error")
	}
}

func TestTableErrors(t *testing.T) {
	a, _ := testArch(t)
	broken := *a
	broken.extra = append(slices.Clone(a.extra), "no_such_syscall")
	if _, err := broken.program(); err == nil || !strings.Contains(err.Error(), "no_such_syscall") {
		t.Errorf("program() with an unknown name: error %v, want one naming it", err)
	}
	broken = *a
	broken.extra = append(slices.Clone(a.extra), "mount")
	if _, err := broken.program(); err == nil || !strings.Contains(err.Error(), "both denied and allowed") {
		t.Errorf("program() allowing mount: error %v, want a conflict", err)
	}
	broken = *a
	broken.extra = append(slices.Clone(a.extra), "read")
	if _, err := broken.program(); err == nil || !strings.Contains(err.Error(), "two rules") {
		t.Errorf("program() allowing read twice: error %v, want a duplicate", err)
	}
}

// reference is the policy written as plain Go, independent of the BPF
// assembly. FuzzProgram checks the program agrees with it everywhere.
func reference(a *arch, d seccompData) uint32 {
	if d.arch != a.audit {
		return retKillProcess
	}
	if a.x32 && d.nr&x32SyscallBit != 0 {
		return retErrno(unix.ENOSYS)
	}
	name := ""
	for n, nr := range a.numbers {
		if nr == d.nr {
			name = n
			break
		}
	}
	low := func(i int) uint32 { return uint32(d.args[i]) }
	switch {
	case name == "":
		return retErrno(unix.EPERM)
	case name == "clone":
		if low(0)&namespaceFlags != 0 {
			return retErrno(unix.EPERM)
		}
		return retAllow
	case name == "clone3":
		return retErrno(unix.ENOSYS)
	case name == "socket":
		if low(2) == unix.IPPROTO_MPTCP {
			return retErrno(unix.EPROTONOSUPPORT)
		}
		if !slices.Contains(socketFamilies, low(0)) {
			return retErrno(unix.EAFNOSUPPORT)
		}
		return retAllow
	case name == "ioctl":
		if slices.Contains(deniedIoctls, low(1)) {
			return retErrno(unix.EPERM)
		}
		return retAllow
	case name == "personality":
		if slices.Contains(personalities, low(0)) {
			return retAllow
		}
		return retErrno(unix.EPERM)
	case slices.Contains(allowed, name), slices.Contains(a.extra, name):
		return retAllow
	}
	return retErrno(unix.EPERM)
}

func FuzzProgram(f *testing.F) {
	a, prog := testArch(f)
	valid := []uint32{
		retAllow, retKillProcess,
		retErrno(unix.EPERM), retErrno(unix.ENOSYS),
		retErrno(unix.EPROTONOSUPPORT), retErrno(unix.EAFNOSUPPORT),
	}
	f.Fuzz(func(t *testing.T, nr, archv uint32, ip, a0, a1, a2, a3, a4, a5 uint64) {
		d := seccompData{nr: nr, arch: archv, ip: ip, args: [6]uint64{a0, a1, a2, a3, a4, a5}}
		got, steps, err := run(prog, d)
		if err != nil {
			t.Fatalf("run(%+v) error after %d steps: %v", d, steps, err)
		}
		if !slices.Contains(valid, got) {
			t.Fatalf("run(%+v) = %#x, not an action the policy uses", d, got)
		}
		if want := reference(a, d); got != want {
			t.Fatalf("run(%+v) = %s, reference says %s", d, actionName(got), actionName(want))
		}
	})
}

func BenchmarkProgram(b *testing.B) {
	a, prog := testArch(b)
	cases := []struct {
		name string
		args [6]uint64
	}{
		{name: "read"},
		{name: "write"},
		{name: "futex"},
		{name: "epoll_pwait"},
		{name: "mmap"},
		{name: "openat"},
		{name: "close"},
		{name: "clone", args: [6]uint64{unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES |
			unix.CLONE_SIGHAND | unix.CLONE_SYSVSEM | unix.CLONE_THREAD}},
		{name: "socket", args: [6]uint64{unix.AF_INET, unix.SOCK_STREAM, 0}},
		{name: "ioctl", args: [6]uint64{1, unix.TCGETS}},
	}
	for _, c := range cases {
		d := seccompData{nr: a.numbers[c.name], arch: a.audit, args: c.args}
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			var steps int
			for b.Loop() {
				var err error
				if _, steps, err = run(prog, d); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(steps), "insns/op")
		})
	}
}
