package executor

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// absorbChild, set in a child's environment, makes this test binary an init
// that absorbs signals (see TestAbsorbSignals).
const absorbChild = "AIRLOCK_TEST_ABSORB_CHILD"

// absorbBenchChild, set in a child's environment, makes this test binary
// print how long absorbing took, in ns, and exit (BenchmarkAbsorbSignals).
const absorbBenchChild = "AIRLOCK_TEST_ABSORB_BENCH_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(environChild) != "" {
		environChildMain()
	}
	if os.Getenv(linkLoopEnv) != "" {
		linkLoopMain()
	}
	if mode := os.Getenv(absorbBenchChild); mode != "" {
		t0 := time.Now()
		if mode == "native" {
			absorbSignalsInit()
		} else {
			absorbSignals(false)
		}
		fmt.Println(time.Since(t0).Nanoseconds()) //nolint:forbidigo // the child process answers its parent on stdout
		os.Exit(0)
	}
	if mode := os.Getenv(absorbChild); mode != "" {
		resetIgnoredSignals()
		if mode == "native" {
			absorbSignalsInit()
		} else {
			absorbSignals(mode == "gvisor")
		}
		// What a command started now inherits as ignored: nothing.
		fmt.Println("ready", commandSigIgn()) //nolint:forbidigo // the child process answers its parent on stdout
		// Echo each line back: an answer proves the process lives.
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			fmt.Println(sc.Text()) //nolint:forbidigo // the child process answers its parent on stdout
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestAbsorbSignals: the executor, as init of its PID namespace, outlives
// every signal but SIGKILL. In a sandbox, Landlock's signal scope already
// keeps commands from signalling it where the kernel has one; this is the
// layer under it. A signal from the parent namespace is delivered to init by
// the same rules as one from inside for everything but SIGKILL and SIGSTOP.
//
// Under gVisor its kernel applies default actions to PID 1 as to any
// process: the "gvisor, not init" case runs absorbSignals(true) in a
// process that is no init, where the host's kernel does the same. There
// 32-34 are left out: the runtime keeps them for libc and cannot ask for
// them (their default action ends the process); the executor under gVisor
// is out of kill's reach for them (and every other) once set up.
func TestAbsorbSignals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   string // native: absorbSignalsInit; pod, gvisor: absorbSignals
		gvisor bool
		init   bool
	}{
		{"native, init", "native", false, true},
		{"pod, init", "pod", false, true},
		{"gvisor, not init", "gvisor", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mode := tc.mode
			cmd := exec.Command(os.Args[0], "-test.run=^$")
			cmd.Env = append(os.Environ(), absorbChild+"="+mode)
			cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if tc.init {
				cmd.SysProcAttr.Cloneflags = syscall.CLONE_NEWUSER | syscall.CLONE_NEWPID
				cmd.SysProcAttr.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
				cmd.SysProcAttr.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
			}
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Skipf("cannot start a process in new user and PID namespaces here: %v", err)
			}
			defer func() {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}()
			lines := bufio.NewScanner(stdout)
			if !lines.Scan() || lines.Text() != "ready SigIgn:\t0000000000000000" {
				t.Fatalf("child did not start: %q %v", lines.Text(), lines.Err())
			}
			for sig := unix.Signal(1); sig <= 64; sig++ {
				if sig == unix.SIGKILL || sig == unix.SIGSTOP || sig == 32 || sig == 33 {
					continue // SIGKILL and SIGSTOP are forced; 32 and 33 belong to libc
				}
				if sig == 34 && !tc.init {
					continue // the runtime's too: out of kill's reach under gVisor
				}
				if err := cmd.Process.Signal(sig); err != nil {
					t.Fatalf("send %v: %v", sig, err)
				}
				// The process handles a signal before it runs on: an echo
				// after the signal was sent proves it survived it (a
				// stopped process would not answer).
				if _, err := io.WriteString(stdin, sig.String()+"\n"); err != nil {
					t.Fatalf("the child is gone, ended by %v (%d) or a signal before it: %v", sig, sig, err)
				}
				// A stopped child never answers: bounded, not timed.
				_ = stdout.(*os.File).SetReadDeadline(time.Now().Add(20 * time.Second))
				if !lines.Scan() || lines.Text() != sig.String() {
					t.Fatalf("the child is gone or stopped, by %v (%d) or a signal before it (read %q, %v)", sig, sig, lines.Text(), lines.Err())
				}
			}
		})
	}
}

// commandSigIgn is the SigIgn line of /proc/self/status in a command this
// process starts.
func commandSigIgn() string {
	out, err := exec.Command("/bin/cat", "/proc/self/status").Output()
	if err != nil {
		return err.Error()
	}
	for _, l := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(l, "SigIgn:") {
			return l
		}
	}
	return "no SigIgn"
}

// BenchmarkAbsorbSignals: what absorbing the signals costs a fresh process
// (it is paid once, at the executor's start), as absorbSignalsInit does
// natively and as absorbSignals does (under gVisor, in a pod, and natively
// before cold29c). Its metric is the absorb's own time, ns/absorb; ns/op
// includes the child's start.
func BenchmarkAbsorbSignals(b *testing.B) {
	for _, mode := range []string{"native", "notify"} {
		b.Run(mode, func(b *testing.B) {
			var total int64
			for b.Loop() {
				cmd := exec.Command(os.Args[0], "-test.run=^$")
				cmd.Env = append(os.Environ(), absorbBenchChild+"="+mode)
				out, err := cmd.Output()
				if err != nil {
					b.Fatal(err)
				}
				ns, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += ns
			}
			b.ReportMetric(float64(total)/float64(b.N), "ns/absorb")
		})
	}
}
