package seccomp

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// The end-to-end test runs the test binary again with childEnv set. The
// child installs the filter, runs probes with raw system calls and prints
// one "name<TAB>result" line per probe; the parent checks the results.
const (
	childEnv = "AIRLOCK_SECCOMP_TEST_CHILD"
	int80Env = "AIRLOCK_SECCOMP_TEST_INT80" // path of the int $0x80 probe binary
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

func child() int {
	if os.Getenv(childEnv) == "thread" {
		return threadChild()
	}
	if os.Getenv(childEnv) == "notify" {
		return notifyChild()
	}
	if err := Install(); err != nil {
		fmt.Fprintf(os.Stdout, "install\t%v\n", err)
		return 1
	}
	fmt.Fprintf(os.Stdout, "install\tok\n")
	for _, p := range probes() {
		fmt.Fprintf(os.Stdout, "%s\t%s\n", p.name, strings.ReplaceAll(p.run(), "\n", " | "))
	}
	return 0
}

// threadChild installs the filter with InstallThread on a locked thread
// and reports that thread's status, a child's forked from it (which must
// inherit the filter: unshare refused), and another thread's (which must
// not have it: InstallThread is not TSYNC).
func threadChild() int {
	type report struct{ self, child, unshare string }
	done := make(chan report)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := InstallThread(); err != nil {
			fmt.Fprintf(os.Stdout, "install\t%v\n", err)
			os.Exit(1)
		}
		var r report
		s, err := statusOf("/proc/thread-self/status")
		if err != nil {
			s = err.Error()
		}
		r.self = s
		// exec.Command forks from the calling thread, this locked one.
		out, err := exec.Command("/bin/sh", "-c", "grep -E '^(Seccomp|NoNewPrivs):' /proc/self/status | tr '\\n\\t' '  '").Output()
		r.child = strings.TrimSpace(string(out)) + " " + result(err)
		out, err = exec.Command("/bin/sh", "-c", "unshare -U true").CombinedOutput()
		r.unshare = result(err) + ": " + strings.TrimSpace(string(out))
		done <- r
	}()
	r := <-done
	fmt.Fprintf(os.Stdout, "install\tok\nthread\t%s\nchild\t%s\nunshare\t%s\n", r.self, r.child, r.unshare)
	// Another thread, locked so that it is not the filtered one.
	other := make(chan string)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s, err := statusOf("/proc/thread-self/status")
		if err != nil {
			s = err.Error()
		}
		other <- s
	}()
	fmt.Fprintf(os.Stdout, "other\t%s\n", <-other)
	return 0
}

type probe struct {
	name string
	run  func() string
}

// result renders an error as its errno name, or "ok".
func result(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return err.Error()
}

func raw(nr uintptr, args ...uintptr) func() string {
	return func() string {
		var a [3]uintptr
		copy(a[:], args)
		_, _, errno := unix.Syscall(nr, a[0], a[1], a[2])
		if errno != 0 {
			return result(errno)
		}
		return "ok"
	}
}

func socketProbe(domain, typ, proto int) func() string {
	return func() string {
		fd, err := unix.Socket(domain, typ|unix.SOCK_CLOEXEC, proto)
		if err == nil {
			unix.Close(fd)
		}
		return result(err)
	}
}

// probes are run by the child after Install. Each one's comment says what
// the kernel would answer without the filter, so a pass cannot come from
// the kernel refusing on its own.
func probes() []probe {
	a, _ := nativeArch()
	devNull := func(f func(fd int) error) func() string {
		return func() string {
			fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return "open /dev/null: " + result(err)
			}
			defer unix.Close(fd)
			return result(f(fd))
		}
	}
	ps := []probe{
		// Unfiltered: ENOENT as root. (Unprivileged it is EPERM anyway, so
		// only the root run tells the filter's answer apart.)
		{"mount", func() string {
			return result(unix.Mount("none", "/nonexistent-airlock", "tmpfs", 0, ""))
		}},
		{"umount2", func() string { return result(unix.Unmount("/nonexistent-airlock", 0)) }},
		// Unfiltered: EINVAL, a multithreaded process cannot enter a new user namespace.
		{"unshare_user", func() string { return result(unix.Unshare(unix.CLONE_NEWUSER)) }},
		// Unfiltered: EFAULT or EINVAL for the NULL attribute.
		{"bpf", raw(unix.SYS_BPF, 0, 0, 0)},
		// Unfiltered: the keyring's serial number.
		{"keyctl", func() string {
			_, err := unix.KeyctlInt(unix.KEYCTL_GET_KEYRING_ID, unix.KEY_SPEC_SESSION_KEYRING, 0, 0, 0)
			return result(err)
		}},
		// Unfiltered: EFAULT for the NULL params.
		{"io_uring_setup", raw(unix.SYS_IO_URING_SETUP, 1, 0, 0)},
		// Unfiltered: ESRCH, the parent is not our tracee.
		{"ptrace", raw(unix.SYS_PTRACE, unix.PTRACE_PEEKDATA, uintptr(os.Getppid()), 0)},
		// Unfiltered: EINVAL, CLONE_THREAD needs CLONE_SIGHAND and excludes
		// CLONE_NEWUSER, so this can never create a process.
		{"clone_newuser", raw(unix.SYS_CLONE, unix.CLONE_NEWUSER|unix.CLONE_THREAD, 0, 0)},
		// Unfiltered: EFAULT or EINVAL for the NULL/zero-size argument.
		{"clone3", raw(unix.SYS_CLONE3, 0, 0, 0)},
		{"socket_mptcp", socketProbe(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_MPTCP)},
		{"socket_tcp", socketProbe(unix.AF_INET, unix.SOCK_STREAM, 0)},
		{"socket_unix", socketProbe(unix.AF_UNIX, unix.SOCK_STREAM, 0)},
		{"socket_packet", socketProbe(unix.AF_PACKET, unix.SOCK_RAW, 0)},
		{"socket_vsock", socketProbe(unix.AF_VSOCK, unix.SOCK_STREAM, 0)},
		// Go tries MPTCP first for listeners and must fall back to TCP.
		{"net_listen", func() string {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err == nil {
				ln.Close()
			}
			return result(err)
		}},
		// Unfiltered: ENOTTY, /dev/null is not a terminal.
		{"ioctl_tiocsti", devNull(func(fd int) error {
			_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TIOCSTI, 0)
			return errnoErr(errno)
		})},
		{"ioctl_tcgets", devNull(func(fd int) error {
			_, err := unix.IoctlGetTermios(fd, unix.TCGETS)
			return err
		})},
		{"personality_query", raw(unix.SYS_PERSONALITY, 0xffffffff)},
		{"personality_no_randomize", raw(unix.SYS_PERSONALITY, addrNoRandomize)},
		{"status", func() string {
			s, err := statusOf("/proc/self/status")
			if err != nil {
				return err.Error()
			}
			return s
		}},
		// TSYNC must have reached every thread the runtime had started.
		{"threads", func() string {
			tasks, err := os.ReadDir("/proc/self/task")
			if err != nil {
				return err.Error()
			}
			for _, task := range tasks {
				s, err := statusOf("/proc/self/task/" + task.Name() + "/status")
				if errors.Is(err, fs.ErrNotExist) {
					continue // the thread exited meanwhile
				}
				if err != nil {
					return err.Error()
				}
				if s != "Seccomp=2 NoNewPrivs=1" {
					return "thread " + task.Name() + ": " + s
				}
			}
			return "ok"
		}},
		{"exec_true", func() string { return result(exec.Command("/bin/true").Run()) }},
		// The filter survives execve into a shell and util-linux unshare.
		{"exec_unshare", func() string {
			out, err := exec.Command("/bin/sh", "-c", "unshare -U true").CombinedOutput()
			return result(err) + ": " + strings.TrimSpace(string(out))
		}},
	}
	if a.x32 {
		// Unfiltered: ENOSYS on kernels without x32, the pid otherwise.
		ps = append(ps, probe{"x32_getpid", raw(uintptr(x32SyscallBit | a.numbers["getpid"]))})
	}
	if path := os.Getenv(int80Env); path != "" {
		ps = append(ps, probe{"int80", func() string { return result(exec.Command(path).Run()) }})
	}
	return ps
}

func errnoErr(errno unix.Errno) error {
	if errno == 0 {
		return nil
	}
	return errno
}

// statusOf returns the seccomp mode and no_new_privs flag from a
// /proc/.../status file.
func statusOf(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var seccomp, nnp string
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok {
			seccomp = strings.TrimSpace(v)
		}
		if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok {
			nnp = strings.TrimSpace(v)
		}
	}
	return "Seccomp=" + seccomp + " NoNewPrivs=" + nnp, nil
}

func TestInstall(t *testing.T) {
	a, err := nativeArch()
	if err != nil {
		t.Skipf("no seccomp tables: %v", err)
	}
	if _, err := os.Stat("/proc/self/status"); err != nil {
		t.Skipf("needs /proc: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}

	// A directory everyone can read, so the child can also run as nobody.
	dir, err := os.MkdirTemp("", "airlock-seccomp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "seccomp.test")
	if err := copyFile(bin, exe); err != nil {
		t.Fatal(err)
	}

	want := map[string]string{
		"install":                  "ok",
		"mount":                    "EPERM",
		"umount2":                  "EPERM",
		"unshare_user":             "EPERM",
		"bpf":                      "EPERM",
		"keyctl":                   "EPERM",
		"io_uring_setup":           "EPERM",
		"ptrace":                   "EPERM",
		"clone_newuser":            "EPERM",
		"clone3":                   "ENOSYS",
		"socket_mptcp":             "EPROTONOSUPPORT",
		"socket_tcp":               "ok",
		"socket_unix":              "ok",
		"socket_packet":            "EAFNOSUPPORT",
		"socket_vsock":             "EAFNOSUPPORT",
		"net_listen":               "ok",
		"ioctl_tiocsti":            "EPERM",
		"ioctl_tcgets":             "ENOTTY",
		"personality_query":        "ok",
		"personality_no_randomize": "EPERM",
		"status":                   "Seccomp=2 NoNewPrivs=1",
		"threads":                  "ok",
		"exec_true":                "ok",
		"exec_unshare":             "exit status 1: unshare: unshare failed: Operation not permitted", // matched loosely below
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Logf("no unshare binary (%v); not checking it", err)
		delete(want, "exec_unshare")
	}
	if a.x32 {
		want["x32_getpid"] = "ENOSYS"
	}
	env := []string{childEnv + "=1"}
	if runtime.GOARCH == "amd64" {
		if path, ok := int80Probe(t, dir); ok {
			env = append(env, int80Env+"="+path)
			want["int80"] = "signal: bad system call"
		}
	}

	check := func(t *testing.T, cred *syscall.Credential) {
		got := runChild(t, bin, env, cred)
		for name, w := range want {
			g, ok := got[name]
			switch {
			case !ok:
				t.Errorf("probe %s did not run", name)
			case name == "exec_unshare":
				// The wording is util-linux's; what matters is the
				// failure and its errno.
				if !strings.HasPrefix(g, "exit status ") || !strings.Contains(g, "Operation not permitted") {
					t.Errorf("probe %s = %q, want like %q", name, g, w)
				}
			case g != w:
				t.Errorf("probe %s = %q, want %q", name, g, w)
			}
		}
	}
	t.Run("as current user", func(t *testing.T) { check(t, nil) })
	t.Run("as nobody", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to switch to nobody; the run above was already unprivileged")
		}
		check(t, &syscall.Credential{Uid: 65534, Gid: 65534})
	})
}

// TestInstallThread: the filter and no_new_privs on the calling thread and
// what it forks, not on the process's other threads.
func TestInstallThread(t *testing.T) {
	if _, err := nativeArch(); err != nil {
		t.Skipf("no seccomp tables: %v", err)
	}
	if _, err := os.Stat("/proc/thread-self/status"); err != nil {
		t.Skipf("needs /proc: %v", err)
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		t.Skipf("no unshare binary: %v", err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got := runChild(t, exe, []string{childEnv + "=thread"}, nil)
	want := map[string]string{
		"install": "ok",
		"thread":  "Seccomp=2 NoNewPrivs=1",
		"child":   "NoNewPrivs: 1 Seccomp: 2 ok",
		"other":   "Seccomp=0 NoNewPrivs=0",
	}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %q, want %q", name, got[name], w)
		}
	}
	if u := got["unshare"]; !strings.HasPrefix(u, "exit status ") || !strings.Contains(u, "Operation not permitted") {
		t.Errorf("unshare -U from the filtered thread's child = %q, want refused (EPERM)", u)
	}
}

// runChild runs the probes in a filtered child and returns their results.
func runChild(t *testing.T, bin string, env []string, cred *syscall.Credential) map[string]string {
	t.Helper()
	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if stderr.Len() > 0 {
		t.Logf("child stderr:\n%s", stderr.String())
	}
	if err != nil {
		t.Fatalf("child: %v\nstdout:\n%s", err, stdout.String())
	}
	got := make(map[string]string)
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		name, res, ok := strings.Cut(sc.Text(), "\t")
		if !ok {
			t.Fatalf("child printed %q", sc.Text())
		}
		got[name] = res
	}
	return got
}

func copyFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	// No fork while the copy is open for writing (a child of a parallel
	// test would hold it until its exec: ETXTBSY when we run it).
	syscall.ForkLock.RLock()
	defer syscall.ForkLock.RUnlock()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// int80Probe writes a minimal static x86-64 ELF that calls the i386 exit(42)
// through "int $0x80" and, should that return, exits with 7 through the
// native syscall. It is run once unfiltered as a control: if it does not
// exit 42 the kernel or VM has no usable i386 entry and there is nothing
// to test.
func int80Probe(t *testing.T, dir string) (string, bool) {
	t.Helper()
	path := filepath.Join(dir, "int80")
	if err := os.WriteFile(path, int80ELF(), 0o755); err != nil {
		t.Fatal(err)
	}
	err := exec.Command(path).Run()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 42 {
		t.Logf("int $0x80 probe does not exit 42 unfiltered (%v): no usable i386 entry on this kernel or VM, skipping it", err)
		return "", false
	}
	return path, true
}

func int80ELF() []byte {
	code := []byte{
		0xb8, 0x01, 0x00, 0x00, 0x00, // mov eax, 1   (i386 exit)
		0xbb, 0x2a, 0x00, 0x00, 0x00, // mov ebx, 42
		0xcd, 0x80, //                   int 0x80
		0xb8, 0x3c, 0x00, 0x00, 0x00, // mov eax, 60  (x86-64 exit)
		0xbf, 0x07, 0x00, 0x00, 0x00, // mov edi, 7
		0x0f, 0x05, //                   syscall
	}
	const (
		base      = 0x400000
		ehdrSize  = 64
		phdrSize  = 56
		codeStart = ehdrSize + phdrSize
	)
	size := uint64(codeStart + len(code))
	var b bytes.Buffer
	w := func(v any) { binary.Write(&b, binary.LittleEndian, v) }
	// ELF header.
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2 /* 64-bit */, 1 /* LE */, 1 /* version */, 0 /* SysV ABI */})
	b.Write(make([]byte, 8))
	w(uint16(2))                // e_type: ET_EXEC
	w(uint16(0x3e))             // e_machine: EM_X86_64
	w(uint32(1))                // e_version
	w(uint64(base + codeStart)) // e_entry
	w(uint64(ehdrSize))         // e_phoff
	w(uint64(0))                // e_shoff
	w(uint32(0))                // e_flags
	w(uint16(ehdrSize))         // e_ehsize
	w(uint16(phdrSize))         // e_phentsize
	w(uint16(1))                // e_phnum
	w(uint16(0))                // e_shentsize
	w(uint16(0))                // e_shnum
	w(uint16(0))                // e_shstrndx
	// Program header: one read+execute PT_LOAD segment holding the file.
	w(uint32(1))      // p_type: PT_LOAD
	w(uint32(5))      // p_flags: PF_R|PF_X
	w(uint64(0))      // p_offset
	w(uint64(base))   // p_vaddr
	w(uint64(base))   // p_paddr
	w(size)           // p_filesz
	w(size)           // p_memsz
	w(uint64(0x1000)) // p_align
	b.Write(code)
	return b.Bytes()
}
