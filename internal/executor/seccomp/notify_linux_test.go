package seccomp

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestLinkNotifyProgram: link and linkat of the native ABI go to the
// listener; everything else, another ABI's calls included, is left to the
// sandbox filter under it.
func TestLinkNotifyProgram(t *testing.T) {
	a, _ := testArch(t)
	prog, err := LinkNotifyProgram()
	if err != nil {
		t.Fatal(err)
	}
	if err := validate(prog); err != nil {
		t.Fatalf("LinkNotifyProgram() does not pass the kernel's checks: %v", err)
	}
	notif := uint32(unix.SECCOMP_RET_USER_NOTIF)
	tests := []struct {
		name    string
		syscall string
		nr      uint32
		arch    uint32
		want    uint32
	}{
		{name: "linkat", syscall: "linkat", want: notif},
		{name: "link (amd64)", syscall: "link", want: notif},
		{name: "symlinkat", syscall: "symlinkat", want: retAllow},
		{name: "renameat2", syscall: "renameat2", want: retAllow},
		{name: "openat", syscall: "openat", want: retAllow},
		{name: "mount (the sandbox filter refuses it)", syscall: "mount", want: retAllow},
		{name: "linkat of another ABI (the sandbox filter kills it)", syscall: "linkat", arch: otherArch(a), want: retAllow},
		{name: "x32 linkat (the sandbox filter refuses it)", syscall: "linkat", nr: x32SyscallBit, want: retAllow},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			nr, ok := a.numbers[tc.syscall]
			if !ok {
				t.Skipf("%s has no %s", a.name, tc.syscall)
			}
			arch := a.audit
			if tc.arch != 0 {
				arch = tc.arch
			}
			got, _, err := run(prog, seccompData{nr: nr | tc.nr, arch: arch})
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("%s = %s, want %s", tc.name, actionName(got), actionName(tc.want))
			}
		})
	}
	nrs, err := LinkSyscalls()
	if err != nil || len(nrs) == 0 {
		t.Errorf("LinkSyscalls() = %v, %v", nrs, err)
	}
}

// TestContinueSupported: the probe answers on this kernel, and leaves no
// filter on the calling thread.
func TestContinueSupported(t *testing.T) {
	var uts unix.Utsname
	must(t, unix.Uname(&uts))
	release := unix.ByteSliceToString(uts.Release[:])
	err := ContinueSupported()
	t.Logf("kernel %s: %v", release, err)
	var major, minor int
	if _, serr := fmt.Sscanf(release, "%d.%d", &major, &minor); serr == nil && (major > 5 || major == 5 && minor >= 5) && err != nil {
		t.Errorf("ContinueSupported() on %s = %v, want nil", release, err)
	}
	// The thread ends after the probe returns: look until it has (on a
	// loaded machine it may wait seconds to be scheduled; the bound is on
	// a thread that keeps the filter, not a speed).
	var filtered []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		filtered = nil
		for _, task := range tasks {
			s, err := statusOf("/proc/self/task/" + task.Name() + "/status")
			if err == nil && strings.Contains(s, "Seccomp=2") {
				filtered = append(filtered, task.Name())
			}
		}
		if len(filtered) == 0 {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Errorf("threads %v keep a filter after the probe", filtered)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// notifyChild installs the sandbox filter (Install), then the link filter
// on a locked thread, serves its listener from another thread, and
// reports what commands forked from the filtered thread get: a link goes
// on once noted; what the sandbox filter refuses stays refused; a filter
// with a listener of their own is refused.
func notifyChild() int {
	if err := Install(); err != nil {
		fmt.Fprintf(os.Stdout, "install\t%v\n", err)
		return 1
	}
	prog, err := LinkNotifyProgram()
	if err != nil {
		fmt.Fprintf(os.Stdout, "install\t%v\n", err)
		return 1
	}
	type report struct{ ln, unshare, nested string }
	listener := make(chan int)
	done := make(chan report)
	go func() {
		runtime.LockOSThread() // never unlocked
		fd, err := InstallListener(prog)
		if err != nil {
			fmt.Fprintf(os.Stdout, "install\t%v\n", err)
			os.Exit(1)
		}
		listener <- fd
		dir, _ := os.MkdirTemp("", "notify")
		defer os.RemoveAll(dir)
		_ = os.WriteFile(dir+"/a", nil, 0o644)
		var r report
		out, err := exec.Command("ln", dir+"/a", dir+"/b").CombinedOutput()
		r.ln = result(err) + strings.TrimSpace(string(out))
		out, err = exec.Command("unshare", "-U", "true").CombinedOutput()
		r.unshare = result(err) + ": " + strings.TrimSpace(string(out))
		_, err = InstallListener([]unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: retAllow}})
		r.nested = result(errors.Unwrap(err))
		done <- r
	}()
	fd := <-listener
	noted := make(chan int, 16)
	go func() {
		for {
			var n Notif
			if err := NotifRecv(fd, &n); err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
					continue
				}
				return
			}
			noted <- int(n.Nr)
			_ = NotifContinue(fd, n.ID)
		}
	}()
	r := <-done
	nrs, _ := LinkSyscalls()
	seen := "none"
	select {
	case nr := <-noted:
		seen = "other"
		for _, l := range nrs {
			if nr == int(l) {
				seen = "link"
			}
		}
	default:
	}
	fmt.Fprintf(os.Stdout, "install\tok\nln\t%s\nnoted\t%s\nunshare\t%s\nnested\t%s\n", r.ln, seen, r.unshare, r.nested)
	return 0
}

// TestInstallListener: the link filter stacked on the sandbox filter, as
// the executor does in an rw workspace.
func TestInstallListener(t *testing.T) {
	if _, err := nativeArch(); err != nil {
		t.Skipf("no seccomp tables: %v", err)
	}
	if err := ContinueSupported(); err != nil {
		t.Skipf("no listener here: %v", err)
	}
	for _, bin := range []string{"ln", "unshare"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("no %s binary: %v", bin, err)
		}
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	got := runChild(t, exe, []string{childEnv + "=notify"}, nil)
	want := map[string]string{"install": "ok", "ln": "ok", "noted": "link", "nested": "EBUSY"}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("%s = %q, want %q", name, got[name], w)
		}
	}
	if u := got["unshare"]; !strings.Contains(u, "Operation not permitted") {
		t.Errorf("unshare -U under both filters = %q, want refused (EPERM)", u)
	}
}
