package landlock

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/seccomp"
)

// Restrict cannot be undone, so every test that restricts does it in a
// helper process: this test binary, re-executed with helperModeEnv set.
// TestMain hands such a process to runHelper, which restricts itself,
// probes, and prints a JSON report on stdout for the parent to check.
const (
	helperModeEnv = "AIRLOCK_LANDLOCK_HELPER"
	helperBaseEnv = "AIRLOCK_LANDLOCK_BASE" // dir holding rw/, ro/ and other/
	helperSockEnv = "AIRLOCK_LANDLOCK_SOCK" // abstract socket the parent listens on
)

// Helper modes.
const (
	modeRestrict    = "restrict"     // Restrict, then probe everything
	modeCallingOnly = "calling-only" // negative control: restrict the calling thread only
	modeExec        = "exec"         // Restrict, then execve into modeAfterExec
	modeAfterExec   = "after-exec"   // probe a program exec'd by a restricted one
	modeCgo         = "cgo"          // Restrict in a cgo binary on a kernel without TSYNC
	modeSeccompNNP  = "seccomp-nnp"  // Restrict with SeccompSetsNoNewPrivs, then seccomp.Install
)

const missingPath = "/nonexistent-airlock-landlock-test"

// helperDir holds a cgo-free build of this test binary, when one is needed;
// TestMain creates and removes it.
var helperDir string

func TestMain(m *testing.M) {
	if mode := os.Getenv(helperModeEnv); mode != "" {
		os.Exit(runHelper(mode))
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "landlock-helper-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	helperDir = dir
	return m.Run()
}

// report is what a helper prints.
type report struct {
	Status    Status
	CallerTID int
	Probes    map[string]string // probe name -> "ok", an errno name or "exit N"
	Threads   []threadReport
	Kill      *killReport
	Err       string // Restrict's error, in modeCgo
	// NNPBefore is each worker thread's NoNewPrivs after Restrict and
	// before seccomp.Install, and Tasks every thread's (tid: "Seccomp=N
	// NoNewPrivs=N") after it, in modeSeccompNNP.
	NNPBefore []string
	Tasks     map[string]string
}

// threadReport is what one worker thread could do after Restrict.
type threadReport struct {
	TID        int
	Locked     bool
	NoNewPrivs string // from /proc/thread-self/status
	Write      string // write a file in other/ directly
	Child      string // /bin/sh, started from this thread, writes a file in other/
}

// killReport is the outcome of kill(child, 0), where the child was started by
// worker A, sent from worker A and from worker B (another thread).
type killReport struct {
	TIDA, TIDB int
	FromA      string
	FromB      string
}

// cgoLinked reports whether this binary uses cgo (as -race builds do), in
// which case syscall.AllThreadsSyscall refuses with ENOTSUP.
func cgoLinked() bool {
	_, _, errno := syscall.AllThreadsSyscall(syscall.SYS_GETPID, 0, 0, 0)
	return errno == syscall.ENOTSUP
}

var buildCgoFreeHelper = sync.OnceValues(func() (string, error) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("find go tool: %w", err)
	}
	out := filepath.Join(helperDir, "landlock.test")
	cmd := exec.Command(goTool, "test", "-c", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go test -c: %w\n%s", err, b)
	}
	return out, nil
})

// helperBinary returns a build of this test package that Restrict can work
// in: this binary, unless it uses cgo and the kernel has no TSYNC; then a
// copy built with CGO_ENABLED=0, as the executor is.
func helperBinary(t *testing.T, abi int) string {
	t.Helper()
	if abi >= abiTSync || !cgoLinked() {
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		return exe
	}
	t.Log("this test binary uses cgo (-race?) and the kernel has no TSYNC: building a CGO_ENABLED=0 helper")
	exe, err := buildCgoFreeHelper()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

// env is a helper's sandbox: the directories and the parent's socket.
type env struct {
	base, rw, ro, other string
	byFD                string // granted read-only by a descriptor (ReadOnlyFDs)
	rwByFD              string // granted read-write by a descriptor (ReadWriteFDs)
	sock                string
}

func newEnv(t *testing.T) env {
	t.Helper()
	base := t.TempDir()
	e := env{
		base:   base,
		rw:     filepath.Join(base, "rw"),
		ro:     filepath.Join(base, "ro"),
		other:  filepath.Join(base, "other"),
		byFD:   filepath.Join(base, "byfd"),
		rwByFD: filepath.Join(base, "rwbyfd"),
		sock:   fmt.Sprintf("airlock-landlock-test-%d-%d", os.Getpid(), time.Now().UnixNano()),
	}
	for _, dir := range []string{e.rw, e.ro, e.other, e.byFD, e.rwByFD} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "file"), []byte("content"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

func helperEnv() env {
	base := os.Getenv(helperBaseEnv)
	return env{
		base:   base,
		rw:     filepath.Join(base, "rw"),
		ro:     filepath.Join(base, "ro"),
		other:  filepath.Join(base, "other"),
		byFD:   filepath.Join(base, "byfd"),
		rwByFD: filepath.Join(base, "rwbyfd"),
		sock:   os.Getenv(helperSockEnv),
	}
}

// runHelperProcess runs exe in mode and decodes its report.
func runHelperProcess(t *testing.T, exe, mode string, e env) report {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = append(os.Environ(), helperModeEnv+"="+mode, helperBaseEnv+"="+e.base, helperSockEnv+"="+e.sock)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("helper %s: %v\nstdout:\n%s\nstderr:\n%s", mode, err, stdout.Bytes(), stderr.Bytes())
	}
	var r report
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("helper %s: decode report: %v\nstdout:\n%s\nstderr:\n%s", mode, err, stdout.Bytes(), stderr.Bytes())
	}
	t.Logf("helper %s: status %+v, caller thread %d", mode, r.Status, r.CallerTID)
	return r
}

// listenAbstract listens on the abstract unix socket @name, with raw syscalls
// so that the test binary does not link net (which would bring in cgo).
func listenAbstract(name string) (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: "@" + name}); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("bind @%s: %w", name, err)
	}
	if err := unix.Listen(fd, 8); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("listen @%s: %w", name, err)
	}
	return fd, nil
}

func connectAbstract(name string) error {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return unix.Connect(fd, &unix.SockaddrUnix{Name: "@" + name})
}

// TestRestrict checks files, devices, scopes and, above all, that every
// thread and every child is restricted, whatever thread starts it.
func TestRestrict(t *testing.T) {
	abi := requireLandlock(t)
	exe := helperBinary(t, abi)
	e := newEnv(t)
	lfd, err := listenAbstract(e.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(lfd)

	r := runHelperProcess(t, exe, modeRestrict, e)
	used := min(abi, maxABI)

	if r.Status.ABI != used {
		t.Errorf("Status.ABI = %d, want %d", r.Status.ABI, used)
	}
	signalFix := Errata()&(1<<(erratumScopedSignal-1)) != 0
	if want := used >= abiScope && (used >= abiTSync || signalFix); r.Status.Scoped != want {
		t.Errorf("Status.Scoped = %v, want %v", r.Status.Scoped, want)
	}
	if r.Status.SharedDomain != (used >= abiTSync) {
		t.Errorf("Status.SharedDomain = %v, want %v", r.Status.SharedDomain, used >= abiTSync)
	}
	if !slices.Contains(r.Status.Skipped, missingPath) {
		t.Errorf("Status.Skipped = %q, want it to contain %s", r.Status.Skipped, missingPath)
	}

	// Expected outcome per probe; "" means "not EACCES/EPERM, any other".
	ifABI := func(abi int, yes, no string) string {
		if used >= abi {
			return yes
		}
		return no
	}
	scoped := func(yes, no string) string {
		if r.Status.Scoped {
			return yes
		}
		return no
	}
	want := map[string]string{
		"read_etc":                "ok",
		"read_by_fd":              "ok",
		"list_by_fd":              "ok",
		"write_by_fd":             "EACCES",
		"write_rw_by_fd":          "ok",
		"read_ro":                 "ok",
		"list_ro":                 "ok",
		"exec_sh":                 "ok",
		"write_ro":                "EACCES",
		"truncate_ro":             ifABI(abiTruncate, "EACCES", "ok"),
		"write_other":             "EACCES",
		"read_other":              "EACCES",
		"list_other":              "EACCES",
		"rw_write":                "ok",
		"rw_read":                 "ok",
		"rw_list":                 "ok",
		"rw_mkdir":                "ok",
		"rw_rename_same_dir":      "ok",
		"rw_rename_across_dirs":   ifABI(abiRefer, "ok", "EXDEV"),
		"rw_truncate":             "ok",
		"rw_symlink":              "ok",
		"rw_mkfifo":               "ok",
		"rw_unlink":               "ok",
		"rw_rmdir":                "ok",
		"rename_rw_to_other":      ifABI(abiRefer, "EACCES", "EXDEV"),
		"dev_null_write":          "ok",
		"dev_null_ioctl":          "ENOTTY", // allowed by Landlock, refused by the driver
		"dev_zero_ioctl":          ifABI(abiIoctlDev, "EACCES", "ENOTTY"),
		"kill_self":               "ok",
		"kill_parent":             scoped("EPERM", "ok"),
		"abstract_connect_parent": ifABI(abiScope, "EPERM", "ok"),
		"abstract_connect_own":    "ok",
	}
	if _, err := os.Stat("/root"); err == nil {
		want["list_root"] = "EACCES"
	}
	for name, w := range want {
		got, ok := r.Probes[name]
		if !ok {
			t.Errorf("probe %s: missing from report", name)
			continue
		}
		if got != w {
			t.Errorf("probe %s = %s, want %s", name, got, w)
		}
	}

	// All threads: workers that existed before Restrict, some locked to
	// their own OS thread, wrote directly and through a /bin/sh child.
	lockedTIDs := map[int]bool{}
	for _, th := range r.Threads {
		if th.Locked {
			lockedTIDs[th.TID] = true
		}
		if th.NoNewPrivs != "1" {
			t.Errorf("thread %d (locked %v): NoNewPrivs = %q, want 1", th.TID, th.Locked, th.NoNewPrivs)
		}
		if th.Write != "EACCES" {
			t.Errorf("thread %d (locked %v): direct write to other/ = %s, want EACCES", th.TID, th.Locked, th.Write)
		}
		if !strings.HasPrefix(th.Child, "exit ") {
			t.Errorf("thread %d (locked %v): child writing to other/ = %s, want a non-zero exit", th.TID, th.Locked, th.Child)
		}
	}
	delete(lockedTIDs, r.CallerTID)
	if len(lockedTIDs) < 3 {
		t.Errorf("locked workers ran on %d threads other than the caller's, want at least 3: the test proves nothing", len(lockedTIDs))
	}
	if entries, err := os.ReadDir(e.other); err != nil {
		t.Error(err)
	} else if len(entries) != 1 {
		t.Errorf("other/ holds %d entries after the helper ran, want only the original file", len(entries))
	}

	checkKill(t, r.Kill, r.Status.Scoped && !r.Status.SharedDomain)
}

// TestRestrictCallingThreadOnly is the negative control for TestRestrict's
// thread probe: with landlock_restrict_self on the calling thread alone, the
// same probe must see other threads, and their children, unrestricted.
func TestRestrictCallingThreadOnly(t *testing.T) {
	abi := requireLandlock(t)
	exe := helperBinary(t, abi)
	e := newEnv(t)

	r := runHelperProcess(t, exe, modeCallingOnly, e)
	if got := r.Probes["caller_write_other"]; got != "EACCES" {
		t.Errorf("calling thread: write to other/ = %s, want EACCES", got)
	}
	var locked int
	for _, th := range r.Threads {
		if !th.Locked || th.TID == r.CallerTID {
			continue
		}
		locked++
		if th.Write != "ok" || th.Child != "ok" {
			t.Errorf("thread %d: write = %s, child = %s, want ok, ok (an unrestricted thread)", th.TID, th.Write, th.Child)
		}
	}
	if locked < 3 {
		t.Errorf("%d locked worker threads, want at least 3", locked)
	}
}

// TestRestrictThenExec checks the documented remedy for per-thread domains:
// a program exec'd after Restrict is still restricted, and its threads share
// one domain, so any thread may signal any child.
func TestRestrictThenExec(t *testing.T) {
	abi := requireLandlock(t)
	exe := helperBinary(t, abi)
	e := newEnv(t)

	r := runHelperProcess(t, exe, modeExec, e)
	for name, w := range map[string]string{"write_other": "EACCES", "rw_write": "ok", "no_new_privs": "1"} {
		if got := r.Probes[name]; got != w {
			t.Errorf("after exec: probe %s = %s, want %s", name, got, w)
		}
	}
	checkKill(t, r.Kill, false)
}

// TestRestrictCgo checks that Restrict refuses, and restricts nothing, where
// it cannot cover all threads: a cgo binary on a kernel without TSYNC.
func TestRestrictCgo(t *testing.T) {
	abi := requireLandlock(t)
	if abi >= abiTSync {
		t.Skip("kernel has LANDLOCK_RESTRICT_SELF_TSYNC, which works in cgo binaries too")
	}
	if !cgoLinked() {
		t.Skip("this test binary does not use cgo; run with -race or CGO_ENABLED=1 and a cgo package to cover this")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	e := newEnv(t)

	r := runHelperProcess(t, exe, modeCgo, e)
	if !strings.Contains(r.Err, syscall.ENOTSUP.Error()) {
		t.Errorf("Restrict in a cgo binary: error %q, want one wrapping ENOTSUP", r.Err)
	}
	if got := r.Probes["write_other"]; got != "ok" {
		t.Errorf("after the refused Restrict: write to other/ = %s, want ok (nothing restricted)", got)
	}
}

func checkKill(t *testing.T, k *killReport, wantSiblingDenied bool) {
	t.Helper()
	if k == nil {
		t.Error("kill probe: missing from report")
		return
	}
	if k.TIDA == k.TIDB {
		t.Errorf("kill probe: workers A and B share thread %d", k.TIDA)
	}
	if k.FromA != "ok" {
		t.Errorf("kill(child, 0) from the thread that started it = %s, want ok", k.FromA)
	}
	wantB := "ok"
	if wantSiblingDenied {
		wantB = "EPERM"
	}
	if k.FromB != wantB {
		t.Errorf("kill(child, 0) from another thread = %s, want %s", k.FromB, wantB)
	}
}

// ---- helper process side ----

func runHelper(mode string) int {
	// The caller of Restrict stays on one thread, so that the workers'
	// threads are provably others.
	runtime.LockOSThread()
	r, err := helperMain(mode)
	if err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
		return 2
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		fmt.Fprintf(os.Stderr, "helper %s: %v\n", mode, err)
		return 2
	}
	return 0
}

func helperRules(e env) (Rules, error) {
	exe, err := os.Executable()
	if err != nil {
		return Rules{}, err
	}
	byFD, err := unix.Open(e.byFD, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Rules{}, err
	}
	rwByFD, err := unix.Open(e.rwByFD, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return Rules{}, err
	}
	return Rules{
		// exe and /dev/zero are files: their rules must be masked to file
		// rights. exe lets modeExec execve this binary.
		ReadOnly:     []string{"/usr", "/bin", "/lib", "/lib64", "/etc", "/proc", missingPath, e.ro, exe, "/dev/zero"},
		ReadOnlyFDs:  []int{byFD},
		ReadWriteFDs: []int{rwByFD},
		ReadWrite:    []string{e.rw},
		Devices:      []string{"/dev/null"},
	}, nil
}

func helperMain(mode string) (*report, error) {
	e := helperEnv()
	r := &report{CallerTID: unix.Gettid(), Probes: map[string]string{}}
	rules, err := helperRules(e)
	if err != nil {
		return nil, err
	}

	switch mode {
	case modeRestrict:
		// Threads must exist before Restrict: threads created later are
		// cloned from a restricted one and would prove nothing.
		workers := startWorkers()
		a, b := startWorker(true), startWorker(true)
		if r.Status, err = Restrict(rules); err != nil {
			return nil, err
		}
		probeFiles(r.Probes, e)
		probeScopes(r.Probes, e)
		r.Threads = probeThreads(workers, e)
		r.Kill = probeKill(a, b)
		return r, nil

	case modeCallingOnly:
		workers := startWorkers()
		if err := restrictCallingThread(rules); err != nil {
			return nil, err
		}
		r.Probes["caller_write_other"] = outcome(os.WriteFile(filepath.Join(e.other, "caller"), nil, 0o644))
		r.Threads = probeThreads(workers, e)
		return r, nil

	case modeExec:
		if _, err := Restrict(rules); err != nil {
			return nil, err
		}
		exe, err := os.Executable()
		if err != nil {
			return nil, err
		}
		env := append(slices.DeleteFunc(os.Environ(), func(kv string) bool {
			return strings.HasPrefix(kv, helperModeEnv+"=")
		}), helperModeEnv+"="+modeAfterExec)
		return nil, fmt.Errorf("execve %s: %w", exe, syscall.Exec(exe, []string{exe}, env))

	case modeAfterExec:
		r.Probes["write_other"] = outcome(os.WriteFile(filepath.Join(e.other, "after-exec"), nil, 0o644))
		r.Probes["rw_write"] = outcome(os.WriteFile(filepath.Join(e.rw, "after-exec"), nil, 0o644))
		r.Probes["no_new_privs"] = noNewPrivs("/proc/self/status")
		r.Kill = probeKill(startWorker(true), startWorker(true))
		return r, nil

	case modeSeccompNNP:
		workers := startWorkers()
		rules.SeccompSetsNoNewPrivs = true
		if r.Status, err = Restrict(rules); err != nil {
			return nil, err
		}
		for _, w := range workers {
			w.run(func() { r.NNPBefore = append(r.NNPBefore, noNewPrivs("/proc/thread-self/status")) })
		}
		if err := seccomp.Install(); err != nil {
			return nil, err
		}
		r.Probes["write_other"] = outcome(os.WriteFile(filepath.Join(e.other, "caller"), nil, 0o644))
		r.Threads = probeThreads(workers, e)
		r.Tasks, err = taskStatus()
		return r, err

	case modeCgo:
		if _, err := Restrict(rules); err != nil {
			r.Err = err.Error()
		}
		r.Probes["write_other"] = outcome(os.WriteFile(filepath.Join(e.other, "cgo"), nil, 0o644))
		return r, nil
	}
	return nil, fmt.Errorf("unknown mode %q", mode)
}

// restrictCallingThread is Restrict without the all-threads part: what a
// naive implementation would do. Only the negative control uses it.
func restrictCallingThread(rules Rules) error {
	abi, err := ABI()
	if err != nil {
		return err
	}
	p := newPlan(abi, Errata())
	fd, err := createRuleset(p.handledFS, 0, p.abi >= abiScope)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	for _, path := range rules.ReadOnly {
		if _, err := addPathRule(fd, path, p.readOnly); err != nil {
			return err
		}
	}
	for _, path := range rules.Devices {
		if _, err := addPathRule(fd, path, p.devices); err != nil {
			return err
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	if _, _, errno := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(fd), 0, 0); errno != 0 {
		return errno
	}
	return nil
}

// worker is a goroutine that runs functions for the helper; a locked worker
// runs them on an OS thread of its own.
type worker struct {
	locked bool
	do     chan func()
}

func startWorker(locked bool) *worker {
	w := &worker{locked: locked, do: make(chan func())}
	ready := make(chan struct{})
	go func() {
		if locked {
			// Never unlocked: the thread exits with the helper.
			runtime.LockOSThread()
		}
		close(ready)
		for f := range w.do {
			f()
		}
	}()
	<-ready
	return w
}

func (w *worker) run(f func()) {
	done := make(chan struct{})
	w.do <- func() {
		defer close(done)
		f()
	}
	<-done
}

// startWorkers starts four locked and two unlocked workers.
func startWorkers() []*worker {
	var ws []*worker
	for i := range 6 {
		ws = append(ws, startWorker(i < 4))
	}
	return ws
}

// probeThreads has every worker, concurrently, write into other/ directly
// and through a /bin/sh child that it starts itself.
func probeThreads(workers []*worker, e env) []threadReport {
	reports := make([]threadReport, len(workers))
	var wg sync.WaitGroup
	for i, w := range workers {
		wg.Go(func() {
			w.run(func() {
				reports[i] = threadReport{
					TID:        unix.Gettid(),
					Locked:     w.locked,
					NoNewPrivs: noNewPrivs("/proc/thread-self/status"),
					Write:      outcome(os.WriteFile(filepath.Join(e.other, "direct-"+strconv.Itoa(i)), nil, 0o644)),
					Child: outcome(exec.Command("/bin/sh", "-c",
						"echo x > "+filepath.Join(e.other, "child-"+strconv.Itoa(i))).Run()),
				}
			})
		})
	}
	wg.Wait()
	return reports
}

// probeKill starts a child from worker a and signals it (signal 0) from a
// and from b.
func probeKill(a, b *worker) *killReport {
	k := &killReport{}
	var cmd *exec.Cmd
	var startErr error
	a.run(func() {
		k.TIDA = unix.Gettid()
		cmd = exec.Command("/bin/sleep", "30")
		startErr = cmd.Start()
	})
	if startErr != nil {
		k.FromA, k.FromB = outcome(startErr), outcome(startErr)
		return k
	}
	pid := cmd.Process.Pid
	b.run(func() {
		k.TIDB = unix.Gettid()
		k.FromB = outcome(unix.Kill(pid, 0))
	})
	a.run(func() {
		k.FromA = outcome(unix.Kill(pid, 0))
		if unix.Kill(pid, unix.SIGKILL) == nil {
			_ = cmd.Wait() // killed: the error only says so
		}
	})
	return k
}

func probeFiles(p map[string]string, e env) {
	rw := func(name string) string { return filepath.Join(e.rw, name) }

	p["read_etc"] = outcome(readFile("/etc/hostname", "/etc/passwd"))
	p["read_by_fd"] = outcome(readFile(filepath.Join(e.byFD, "file")))
	p["list_by_fd"] = outcome(readDir(e.byFD))
	p["write_by_fd"] = outcome(os.WriteFile(filepath.Join(e.byFD, "new"), nil, 0o644))
	p["write_rw_by_fd"] = outcome(os.WriteFile(filepath.Join(e.rwByFD, "new"), nil, 0o644))
	p["read_ro"] = outcome(readFile(filepath.Join(e.ro, "file")))
	p["list_ro"] = outcome(readDir(e.ro))
	p["exec_sh"] = outcome(exec.Command("/bin/sh", "-c", "true").Run())
	p["write_ro"] = outcome(os.WriteFile(filepath.Join(e.ro, "new"), nil, 0o644))
	p["truncate_ro"] = outcome(os.Truncate(filepath.Join(e.ro, "file"), 0))
	p["write_other"] = outcome(os.WriteFile(filepath.Join(e.other, "new"), nil, 0o644))
	p["read_other"] = outcome(readFile(filepath.Join(e.other, "file")))
	p["list_other"] = outcome(readDir(e.other))
	if _, err := os.Lstat("/root"); err == nil {
		p["list_root"] = outcome(readDir("/root"))
	}

	p["rw_write"] = outcome(os.WriteFile(rw("a"), []byte("data"), 0o644))
	p["rw_read"] = outcome(readFile(rw("file")))
	p["rw_list"] = outcome(readDir(e.rw))
	p["rw_mkdir"] = outcome(os.Mkdir(rw("d"), 0o755))
	p["rw_rename_same_dir"] = outcome(os.Rename(rw("a"), rw("b")))
	p["rw_rename_across_dirs"] = outcome(os.Rename(rw("b"), rw("d/b")))
	p["rw_truncate"] = outcome(os.Truncate(rw("file"), 1))
	p["rw_symlink"] = outcome(os.Symlink("file", rw("link")))
	p["rw_mkfifo"] = outcome(unix.Mkfifo(rw("fifo"), 0o644))
	p["rw_unlink"] = outcome(errors.Join(os.Remove(rw("link")), os.Remove(rw("fifo")), removeAny(rw("b"), rw("d/b"))))
	p["rw_rmdir"] = outcome(os.Remove(rw("d")))
	p["rename_rw_to_other"] = outcome(os.Rename(rw("file"), filepath.Join(e.other, "moved")))

	p["dev_null_write"] = outcome(writeFile("/dev/null"))
	p["dev_null_ioctl"] = outcome(termiosIoctl("/dev/null", os.O_WRONLY))
	p["dev_zero_ioctl"] = outcome(termiosIoctl("/dev/zero", os.O_RDONLY))
}

func probeScopes(p map[string]string, e env) {
	p["kill_self"] = outcome(unix.Kill(os.Getpid(), 0))
	p["kill_parent"] = outcome(unix.Kill(os.Getppid(), 0))
	p["abstract_connect_parent"] = outcome(connectAbstract(e.sock))
	own := e.sock + "-own"
	fd, err := listenAbstract(own)
	if err != nil {
		p["abstract_connect_own"] = outcome(err)
		return
	}
	defer unix.Close(fd)
	p["abstract_connect_own"] = outcome(connectAbstract(own))
}

// readFile reads the first of paths that exists.
func readFile(paths ...string) error {
	var err error
	for _, path := range paths {
		if _, err = os.ReadFile(path); !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return err
}

func readDir(path string) error {
	_, err := os.ReadDir(path)
	return err
}

func writeFile(path string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString("x")
	return errors.Join(err, f.Close())
}

// removeAny removes the first of paths that exists (a rename may have failed).
func removeAny(paths ...string) error {
	var err error
	for _, path := range paths {
		if err = os.Remove(path); !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return err
}

// termiosIoctl opens a device and issues TCGETS, a device ioctl Landlock
// does not always allow (unlike FIONREAD, FIOCLEX and friends).
func termiosIoctl(path string, flag int) error {
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err
}

func noNewPrivs(statusPath string) string {
	f, err := os.Open(statusPath)
	if err != nil {
		return outcome(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if v, ok := strings.CutPrefix(s.Text(), "NoNewPrivs:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "missing"
}

// outcome names what an operation did: "ok", an errno name, or "exit N".
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		return "exit " + strconv.Itoa(exit.ExitCode())
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		if name := unix.ErrnoName(errno); name != "" {
			return name
		}
	}
	return err.Error()
}

// TestRestrictSeccompSetsNoNewPrivs checks the executor's order natively:
// Restrict with SeccompSetsNoNewPrivs sets no no_new_privs where the caller
// holds CAP_SYS_ADMIN (root here), and seccomp.Install's TSYNC then leaves
// every thread, the runtime's own (sysmon) included, with no_new_privs, the
// filter and the Landlock rules. Without the kernel's copy of no_new_privs
// to the threads TSYNC reaches, the worker threads would end with
// NoNewPrivs 0.
func TestRestrictSeccompSetsNoNewPrivs(t *testing.T) {
	abi := requireLandlock(t)
	exe := helperBinary(t, abi)
	e := newEnv(t)
	r := runHelperProcess(t, exe, modeSeccompNNP, e)

	// As root (CAP_SYS_ADMIN in the user namespace) Restrict leaves
	// no_new_privs to seccomp; otherwise the kernel refused the call
	// without it and Restrict set it first.
	want := "1"
	if os.Geteuid() == 0 {
		want = "0"
	}
	for i, nnp := range r.NNPBefore {
		if nnp != want {
			t.Errorf("worker %d after Restrict, before seccomp: NoNewPrivs = %q, want %q", i, nnp, want)
		}
	}
	if len(r.Tasks) < 5 {
		t.Errorf("%d threads in /proc/self/task, want the caller, sysmon and the workers", len(r.Tasks))
	}
	for tid, st := range r.Tasks {
		if st != "Seccomp=2 NoNewPrivs=1" {
			t.Errorf("thread %s: %s, want Seccomp=2 NoNewPrivs=1", tid, st)
		}
	}
	if got := r.Probes["write_other"]; got != "EACCES" {
		t.Errorf("calling thread: write to other/ = %s, want EACCES", got)
	}
	var locked int
	for _, th := range r.Threads {
		if th.Locked && th.TID != r.CallerTID {
			locked++
		}
		if th.NoNewPrivs != "1" || th.Write != "EACCES" || !strings.HasPrefix(th.Child, "exit ") {
			t.Errorf("thread %d (locked %v): NoNewPrivs %s, write to other/ %s, child's write %s; want 1, EACCES, a non-zero exit",
				th.TID, th.Locked, th.NoNewPrivs, th.Write, th.Child)
		}
	}
	if locked < 3 {
		t.Errorf("locked workers ran on %d threads other than the caller's, want at least 3: the test proves nothing", locked)
	}
}

// taskStatus returns every thread's seccomp mode and no_new_privs, by tid.
func taskStatus() (map[string]string, error) {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return nil, err
	}
	m := map[string]string{}
	for _, task := range tasks {
		data, err := os.ReadFile("/proc/self/task/" + task.Name() + "/status")
		if err != nil {
			return nil, err
		}
		var sc, nnp string
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "Seccomp:"); ok {
				sc = strings.TrimSpace(v)
			}
			if v, ok := strings.CutPrefix(l, "NoNewPrivs:"); ok {
				nnp = strings.TrimSpace(v)
			}
		}
		m[task.Name()] = "Seccomp=" + sc + " NoNewPrivs=" + nnp
	}
	return m, nil
}
