package cgroup

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestDetect(t *testing.T) {
	md, err := Detect()
	if err != nil {
		t.Fatalf("Detect() = %v", err)
	}
	t.Logf("Detect() = %+v", md)
	// An independent check, the way systemd tells the layouts apart.
	var st unix.Statfs_t
	if err := unix.Statfs("/sys/fs/cgroup", &st); err != nil {
		t.Skipf("no /sys/fs/cgroup: %v", err)
	}
	want := "v1"
	switch {
	case st.Type == unix.CGROUP2_SUPER_MAGIC:
		want = "v2"
	case unix.Statfs("/sys/fs/cgroup/unified", &st) == nil && st.Type == unix.CGROUP2_SUPER_MAGIC:
		want = "hybrid"
	}
	if md.Version != want {
		t.Errorf("Detect().Version = %q, want %q", md.Version, want)
	}
	if again, _ := Detect(); !slices.Equal(again.Controllers, md.Controllers) || again.Version != md.Version {
		t.Errorf("second Detect() = %+v, want %+v", again, md)
	}
	if os.Geteuid() != 0 || want == "v2" {
		return // what v2 offers depends on delegation
	}
	if !slices.Equal(md.Controllers, []string{"memory", "pids", "cpu"}) {
		t.Errorf("Detect().Controllers = %q, want [memory pids cpu]", md.Controllers)
	}
	if want == "hybrid" && md.Unified != "/sys/fs/cgroup/unified" {
		t.Errorf("Detect().Unified = %q, want /sys/fs/cgroup/unified", md.Unified)
	}
}

func TestManagerMode(t *testing.T) {
	m := newTestManager(t)
	md := m.Mode()
	t.Logf("Mode() = %+v", md)
	det, _ := Detect()
	if md.Version == "v2" {
		return // preparing may find that v2 controllers cannot be enabled
	}
	if md.Version != det.Version || !slices.Equal(md.Controllers, det.Controllers) || md.Unified != det.Unified {
		t.Errorf("Mode() = %+v, want what Detect() reports, %+v", md, det)
	}
}

func TestNewLimitsDestroy(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "memory", "pids", "cpu")
	l := Limits{MemoryBytes: 64 << 20, Pids: 20, CPUs: 0.5}
	g := newGroup(t, m, "limits", l)

	want := []string{"memory", "swap", "pids", "cpu"}
	if dir, v2 := g.dirFor(ctrlMemory); !v2 && !exists(dir+"/memory.memsw.limit_in_bytes") ||
		v2 && !exists(dir+"/memory.swap.max") {
		want = slices.DeleteFunc(want, func(s string) bool { return s == "swap" })
	}
	if got := g.Enforced(); !slices.Equal(got, want) {
		t.Errorf("Enforced() = %q, want %q", got, want)
	}

	files := map[string]string{}
	if dir, v2 := g.dirFor(ctrlMemory); v2 {
		files[dir+"/memory.max"] = "67108864"
		files[dir+"/memory.swap.max"] = "0"
	} else {
		files[dir+"/memory.limit_in_bytes"] = "67108864"
		files[dir+"/memory.memsw.limit_in_bytes"] = "67108864"
	}
	dir, _ := g.dirFor(ctrlPids)
	files[dir+"/pids.max"] = "20"
	if dir, v2 := g.dirFor(ctrlCPU); v2 {
		files[dir+"/cpu.max"] = "50000 100000"
	} else {
		files[dir+"/cpu.cfs_quota_us"] = "50000"
		files[dir+"/cpu.cfs_period_us"] = "100000"
	}
	for p, v := range files {
		if !exists(p) && slices.Contains([]string{"memory.memsw.limit_in_bytes", "memory.swap.max"}, filepath.Base(p)) {
			continue
		}
		if got := readTrim(t, p); got != v {
			t.Errorf("%s = %q, want %q", p, got, v)
		}
	}

	if names, err := m.List(); err != nil || !slices.Equal(names, []string{"limits"}) {
		t.Errorf("List() = %q, %v, want [limits]", names, err)
	}
	o, err := m.Open("limits")
	if err != nil {
		t.Fatalf("Open(limits) = %v", err)
	}
	if !slices.Equal(o.Enforced(), g.Enforced()) || !slices.Equal(o.dirs(), g.dirs()) {
		t.Errorf("Open(limits) = %q in %q, want %q in %q", o.Enforced(), o.dirs(), g.Enforced(), g.dirs())
	}
	if (o.CgroupFD() >= 0) != (g.CgroupFD() >= 0) {
		t.Errorf("Open(limits).CgroupFD() = %d, New's = %d", o.CgroupFD(), g.CgroupFD())
	}
	_ = o.Close()
	if _, err := m.Open("nope"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Open(nope) = %v, want fs.ErrNotExist", err)
	}
	if _, err := m.New("limits", l, true); !errors.Is(err, fs.ErrExist) {
		t.Errorf("New(limits) again = %v, want fs.ErrExist", err)
	}
	if !slices.Equal(o.dirs(), g.dirs()) {
		t.Fatalf("the failed New changed the group")
	}

	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	for _, d := range g.dirs() {
		if exists(d) {
			t.Errorf("%s exists after Destroy", d)
		}
	}
	if err := g.Destroy(); err != nil {
		t.Errorf("second Destroy() = %v, want nil", err)
	}
	if names, err := m.List(); err != nil || len(names) != 0 {
		t.Errorf("List() after Destroy = %q, %v, want none", names, err)
	}
}

func TestGroupLayout(t *testing.T) {
	m := newTestManager(t)
	g := newGroup(t, m, "layout", Limits{})
	md := m.Mode()
	for _, c := range md.Controllers {
		if dir, _ := g.dirFor(ctrlByName(c)); dir == "" {
			t.Errorf("group has no %s directory though Mode() offers it", c)
		}
	}
	if md.Unified != "" {
		if g.CgroupFD() < 0 || !strings.HasPrefix(g.v2, md.Unified+"/") {
			t.Errorf("CgroupFD() = %d, dir %q, want a descriptor of a directory under %s", g.CgroupFD(), g.v2, md.Unified)
		}
		if g.NeedsAddProc() != (len(g.v1) > 0) {
			t.Errorf("NeedsAddProc() = %v with v1 directories %v", g.NeedsAddProc(), g.v1)
		}
	}
	for _, d := range g.v1 {
		if !strings.HasSuffix(d.dir, "/"+m.parent+"/layout") {
			t.Errorf("v1 directory %s is not <own>/<parent>/<name>", d.dir)
		}
	}
	if len(g.Enforced()) != 0 {
		t.Errorf("Enforced() = %q with no limits, want none", g.Enforced())
	}
}

func TestRequiredLimitFailsCleanly(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "memory", "cpu")
	// The kernel caps the CFS quota far below a billion CPUs.
	l := Limits{MemoryBytes: 64 << 20, CPUs: 1e9}
	_, err := m.New("huge", l, true)
	var le *LimitError
	if !errors.As(err, &le) || le.Controller != "cpu" || !strings.HasPrefix(le.File, "cpu.") {
		t.Fatalf("New(huge, %+v, true) = %v, want a cpu *LimitError", l, err)
	}
	if !strings.Contains(err.Error(), "cgroup huge: set "+le.File+": ") {
		t.Errorf("error %q does not name the group and file", err)
	}
	if names, _ := m.List(); len(names) != 0 {
		t.Errorf("List() after failed New = %q, want none", names)
	}
	for _, h := range m.lay.v1 {
		if d := h.own + "/" + m.parent + "/huge"; exists(d) {
			t.Errorf("%s left behind", d)
		}
	}

	g := newGroup(t, m, "huge-optional", Limits{})
	if err := g.Destroy(); err != nil {
		t.Fatal(err)
	}
	g, err = m.New("huge-optional", l, false)
	if err != nil {
		t.Fatalf("New(huge-optional, %+v, false) = %v", l, err)
	}
	if got := g.Enforced(); slices.Contains(got, "cpu") || !slices.Contains(got, "memory") {
		t.Errorf("Enforced() = %q, want memory but not cpu", got)
	}
}

func TestMissingController(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "memory")
	// A Manager for the same parent that does not see the pids controller;
	// m, which sees everything, cleans up.
	lay := m.lay
	lay.v1 = slices.DeleteFunc(slices.Clone(lay.v1), func(h v1Hier) bool { return h.ctrls&ctrlPids != 0 })
	lay.v2.ctrls &^= ctrlPids
	m = &Manager{parent: m.parent, lay: lay}
	if md := m.Mode(); slices.Contains(md.Controllers, "pids") || !strings.Contains(md.Reason, "pids") {
		t.Errorf("Mode() = %+v, want no pids and a reason", md)
	}
	_, err := m.New("nopids", Limits{MemoryBytes: 64 << 20, Pids: 10}, true)
	var le *LimitError
	if !errors.As(err, &le) || le.Controller != "pids" || !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("New(nopids) = %v, want a pids *LimitError wrapping ErrUnsupported", err)
	}
	if names, _ := m.List(); len(names) != 0 {
		t.Errorf("List() = %q, want none", names)
	}
	g := newGroup(t, m, "memonly", Limits{MemoryBytes: 64 << 20})
	if g.Enforced()[0] != "memory" {
		t.Errorf("Enforced() = %q, want memory", g.Enforced())
	}
}

func TestNewRejectsBadInput(t *testing.T) {
	m, err := NewManager("airlock-test-bad")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"", "..", "a/b", "../../etc"} {
		if _, err := m.New(name, Limits{}, false); err == nil {
			t.Errorf("New(%q) = nil error, want one", name)
		}
		if _, err := m.Open(name); err == nil {
			t.Errorf("Open(%q) = nil error, want one", name)
		}
	}
	if _, err := m.New("ok", Limits{Pids: -1}, false); err == nil {
		t.Errorf("New with Pids -1 = nil error, want one")
	}
	if _, err := NewManager("a/b"); err == nil {
		t.Errorf("NewManager(a/b) = nil error, want one")
	}
}

func TestMemoryLimitOOMKill(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "memory")
	g := newGroup(t, m, "oom", Limits{MemoryBytes: 64 << 20})
	cmd := helperCmd(t, "touch")
	startBlocked(t, g, cmd)()
	err := cmd.Wait()
	if !killedBySIGKILL(err) {
		t.Errorf("child touching 256 MiB under a 64 MiB limit: Wait() = %v, want killed by SIGKILL", err)
	}
	st, err := g.Stats()
	if err != nil {
		t.Fatalf("Stats() = %v", err)
	}
	t.Logf("Stats() = %+v", st)
	c, err := g.Counters()
	if err != nil {
		t.Fatalf("Counters() = %v", err)
	}
	if c.OOMKills != st.OOMKills || c.PidsMaxHits != st.PidsMaxHits || c.Pids != st.Pids || c.MemoryPeak != st.MemoryPeak {
		t.Errorf("Counters() = %+v, disagrees with Stats() = %+v on the fields it reads", c, st)
	}
	if st.OOMKills < 1 {
		t.Errorf("Stats().OOMKills = %d, want >= 1", st.OOMKills)
	}
	// Linux 6.18 counts no failures in v1 when memory.memsw.limit_in_bytes
	// equals the memory limit (the memsw counter fails first and does not
	// track them), so MemoryMaxHits is only checked where it is counted.
	if _, v2 := g.dirFor(ctrlMemory); (v2 || !slices.Contains(g.Enforced(), "swap")) && st.MemoryMaxHits < 1 {
		t.Errorf("Stats().MemoryMaxHits = %d, want >= 1", st.MemoryMaxHits)
	}
	// The peak may pass the limit by a few pages: charges are batched per
	// CPU and reclaimed after the fact.
	if st.MemoryPeak != 0 && (st.MemoryPeak < 32<<20 || st.MemoryPeak > 64<<20+1<<20) {
		t.Errorf("Stats().MemoryPeak = %d, want between 32 MiB and the 64 MiB limit (plus 1 MiB of charge slack)", st.MemoryPeak)
	}
}

func TestPidsLimit(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "pids")
	g := newGroup(t, m, "pids", Limits{Pids: 20})
	stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	// A bounded fork bomb: 60 five-second sleeps against a limit of 20.
	cmd := exec.Command("/bin/sh", "-c", `read x; i=0; while [ $i -lt 60 ]; do sleep 5 & i=$((i+1)); done; wait`)
	cmd.Stderr = stderr // a file, not a pipe, so Wait does not wait for the sleeps
	release := startBlocked(t, g, cmd)
	// Counters keeps its files open and reads them again: the second read
	// must see what changed since the first.
	c0, err := g.Counters()
	if err != nil || c0.Pids != 1 || c0.PidsMaxHits != 0 {
		t.Fatalf("Counters() before the bomb = %+v, %v; want 1 task, no limit hit", c0, err)
	}
	release()

	var st Stats
	// Bounds on a hang, not a speed: a loaded machine forks slowly.
	ok, err := poll(time.Now().Add(time.Minute), func() (bool, error) {
		var err error
		st, err = g.Stats()
		return st.PidsMaxHits >= 1, err
	})
	if err != nil || !ok {
		t.Fatalf("Stats() = %+v, %v: want PidsMaxHits >= 1 within a minute", st, err)
	}
	if st.Pids > 20 {
		t.Errorf("Stats().Pids = %d, want <= 20", st.Pids)
	}
	if c1, err := g.Counters(); err != nil || c1.PidsMaxHits < 1 || c1.Pids <= c0.Pids {
		t.Errorf("Counters() during the bomb = %+v, %v; want more tasks than %d and a limit hit", c1, err, c0.Pids)
	}
	// The counter moves at the failed fork, the shell reports it just after.
	forkFailed := func() (bool, error) {
		b, err := os.ReadFile(stderr.Name())
		return strings.Contains(string(b), "fork"), err
	}
	if ok, err := poll(time.Now().Add(time.Minute), forkFailed); !ok || err != nil {
		b, _ := os.ReadFile(stderr.Name())
		t.Errorf("shell stderr = %q, %v; want a fork failure", b, err)
	}
	start := time.Now()
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	took := time.Since(start)
	t.Logf("Stats() = %+v; Kill took %v", st, took)
	if took > time.Second {
		t.Errorf("Kill() took %v, want well under a second", took)
	}
	_ = cmd.Wait() // the shell either gave up on fork or was killed
	if busy, err := g.populated(); busy || err != nil {
		t.Errorf("populated() after Kill = %v, %v, want false", busy, err)
	}
	if err := g.Destroy(); err != nil {
		t.Errorf("Destroy() = %v", err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("Close() = %v", err)
	}
	if c, err := g.Counters(); err == nil {
		t.Errorf("Counters() after Close = %+v, nil error; want one", c)
	}
}

func TestCloneIntoCgroupKillsDetachedGrandchild(t *testing.T) {
	m := newTestManager(t)
	g := newGroup(t, m, "clone", Limits{})
	if g.CgroupFD() < 0 {
		t.Skip("no cgroup2 tree")
	}
	// Orphans are re-parented to us, so the grandchild can be reaped and
	// its exit status checked.
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })

	// sh -> setsid sh -> sleep: the middle process exits, so the sleep is a
	// double-forked daemon in a session of its own.
	cmd := exec.Command("/bin/sh", "-c", `setsid /bin/sh -c 'sleep 60 & echo $!'; exec sleep 60`)
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.CgroupFD()}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start with CLONE_INTO_CGROUP: %v", err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read grandchild pid: %v", err)
	}
	gpid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Kill(gpid, unix.SIGKILL) })

	procs := parsePids([]byte(readTrim(t, g.v2+"/cgroup.procs")))
	for _, pid := range []int{cmd.Process.Pid, gpid} {
		if !slices.Contains(procs, pid) {
			t.Errorf("pid %d not in the group's cgroup.procs %v", pid, procs)
		}
	}
	if sid, _ := unix.Getsid(gpid); sid == mustGetsid(t, cmd.Process.Pid) {
		t.Errorf("grandchild session = %d, the child's; want a new one", sid)
	}

	if err := g.Kill(); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Errorf("child Wait() = %v, want killed by SIGKILL", err)
	}
	var ws unix.WaitStatus
	_, err = unix.Wait4(gpid, &ws, 0, nil)
	switch {
	case err == nil:
		if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
			t.Errorf("grandchild wait status = %v, want killed by SIGKILL", ws)
		}
	case errors.Is(err, unix.ECHILD): // re-parented elsewhere: it must be gone or a zombie
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", gpid)); err == nil && !strings.Contains(string(b), ") Z ") {
			t.Errorf("grandchild %d still alive: %s", gpid, b)
		}
	default:
		t.Errorf("Wait4(%d) = %v", gpid, err)
	}
	if busy, err := g.populated(); busy || err != nil {
		t.Errorf("populated() after Kill = %v, %v, want false", busy, err)
	}
}

// TestAddClonedProc: a process started into the group's cgroup2 directory
// (CLONE_INTO_CGROUP) and then given to AddClonedProc is in the group in
// every hierarchy, the v1 limits' included, as after AddProc.
func TestAddClonedProc(t *testing.T) {
	m := newTestManager(t)
	g := newGroup(t, m, "cloned", Limits{MemoryBytes: 64 << 20, Pids: 32})
	if g.CgroupFD() < 0 {
		t.Skip("no cgroup2 tree")
	}
	cmd := exec.Command("/bin/sleep", "60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.CgroupFD()}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start with CLONE_INTO_CGROUP: %v", err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	if err := g.AddClonedProc(cmd.Process.Pid); err != nil {
		t.Fatalf("AddClonedProc: %v", err)
	}
	dirs := []string{g.v2}
	for _, d := range g.v1 {
		dirs = append(dirs, d.dir)
	}
	for _, d := range dirs {
		if procs := parsePids([]byte(readTrim(t, d+"/cgroup.procs"))); !slices.Contains(procs, cmd.Process.Pid) {
			t.Errorf("pid %d not in %s/cgroup.procs %v", cmd.Process.Pid, d, procs)
		}
	}
	if len(g.v1) == 0 {
		t.Log("no v1 hierarchies here: only the cgroup2 directory checked")
	}
}

// TestV1OnlyKill runs a group the way a machine without cgroup2 gets it:
// v1 directories only, cpuacct for CPU time, and the freezer for Kill.
func TestV1OnlyKill(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "pids")
	lay := m.lay
	lay.version, lay.v2 = "v1", v2Tree{}
	if !slices.ContainsFunc(lay.v1, func(h v1Hier) bool { return h.ctrls&ctrlFreezer != 0 }) {
		t.Skip("no v1 freezer hierarchy")
	}
	// Same parent, so m, which sees every hierarchy, cleans up.
	v1 := &Manager{parent: m.parent, lay: lay}
	if md := v1.Mode(); md.Unified != "" || md.Version != "v1" {
		t.Errorf("Mode() = %+v, want v1 without a cgroup2 tree", md)
	}
	g := newGroup(t, v1, "v1only", Limits{Pids: 50})
	if g.CgroupFD() != -1 || !g.NeedsAddProc() {
		t.Errorf("CgroupFD() = %d, NeedsAddProc() = %v, want -1 and true", g.CgroupFD(), g.NeedsAddProc())
	}
	for _, c := range []ctrlSet{ctrlFreezer, ctrlCPUAcct} {
		if dir, _ := g.dirFor(c); dir == "" {
			t.Fatalf("group has no %s directory", c)
		}
	}

	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	cmd := exec.Command("/bin/sh", "-c", `read x; setsid /bin/sh -c 'sleep 60 & echo $!'; for i in 1 2 3 4 5; do sleep 60 & done; exec sleep 60`)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	startBlocked(t, g, cmd)()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("read grandchild pid: %v", err)
	}
	gpid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	pidsDir, _ := g.dirFor(ctrlPids)
	var procs []int
	ok, _ := poll(time.Now().Add(time.Minute), func() (bool, error) {
		procs = parsePids([]byte(readTrim(t, pidsDir+"/cgroup.procs")))
		return len(procs) >= 7, nil // the shell (now sleep), 5 sleeps, the grandchild
	})
	if !ok || !slices.Contains(procs, gpid) {
		t.Fatalf("cgroup.procs = %v, want 7 processes including the grandchild %d", procs, gpid)
	}
	t.Cleanup(func() {
		for _, p := range procs {
			_ = unix.Kill(p, unix.SIGKILL)
		}
	})

	start := time.Now()
	if err := g.Kill(); err != nil {
		t.Fatalf("Kill() = %v", err)
	}
	t.Logf("Kill with the freezer took %v", time.Since(start))
	if err := cmd.Wait(); !killedBySIGKILL(err) {
		t.Errorf("child Wait() = %v, want killed by SIGKILL", err)
	}
	for _, p := range procs {
		if p == cmd.Process.Pid {
			continue
		}
		var ws unix.WaitStatus
		if _, err := unix.Wait4(p, &ws, 0, nil); err != nil {
			t.Errorf("Wait4(%d) = %v", p, err)
		} else if !ws.Signaled() || ws.Signal() != unix.SIGKILL {
			t.Errorf("pid %d wait status = %v, want killed by SIGKILL", p, ws)
		}
	}
	freezer, _ := g.dirFor(ctrlFreezer)
	if state := readTrim(t, freezer+"/freezer.state"); state != "THAWED" {
		t.Errorf("freezer.state after Kill = %q, want THAWED", state)
	}
	if st, err := g.Stats(); err != nil || st.CPU <= 0 || st.Pids != 0 {
		t.Errorf("Stats() = %+v, %v, want some CPU time from cpuacct and no pids", st, err)
	}
}

func TestCPUStatsAndQuota(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "cpu")
	// The kernel's smallest quota, 1 ms a 100 ms period: even a spinner
	// the machine's load starves runs a time slice longer than that in
	// some period of its 300 ms, so it is throttled whatever the load (at
	// 20 % a starved one never reached its quota; the CI's flake).
	g := newGroup(t, m, "cpu", Limits{CPUs: 0.01})
	before, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	cmd := helperCmd(t, "busy")
	startBlocked(t, g, cmd)()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("busy child: %v", err)
	}
	after, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CPU before %v, after %v", before.CPU, after.CPU)
	if after.CPU <= before.CPU || after.CPU < time.Millisecond {
		t.Errorf("Stats().CPU = %v after a 300 ms busy loop (was %v), want it to grow", after.CPU, before.CPU)
	}
	// At 1 % of a CPU, 300 ms of spinning cannot fit in the quota.
	dir, _ := g.dirFor(ctrlCPU)
	b, err := os.ReadFile(dir + "/cpu.stat")
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := keyedValue(b, "nr_throttled"); n < 1 {
		t.Errorf("cpu.stat nr_throttled = %d, want >= 1:\n%s", n, b)
	}
}

// TestCPULater: a group made with CPULater has no CPU limit in its file
// and does not list one as enforced; SetCPUs applies it (read back from
// the file, then listed), lifts it with 0, and refuses what no kernel
// takes, leaving the group as it was.
func TestCPULater(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "cpu")
	g := newGroup(t, m, "later", Limits{Pids: 20, CPUs: 0.5, CPULater: true})
	check := func(when string, want float64) {
		t.Helper()
		got, err := g.CPUs()
		if err != nil || got != want {
			t.Errorf("%s: CPUs() = %v, %v; want %v", when, got, err, want)
		}
		if has := slices.Contains(g.Enforced(), "cpu"); has != (want > 0) {
			t.Errorf("%s: Enforced() = %v, want cpu listed: %v", when, g.Enforced(), want > 0)
		}
	}
	check("after New", 0)
	for _, tt := range []struct {
		set  float64
		want float64
	}{{0.5, 0.5}, {1.25, 1.25}, {0, 0}, {0.001, 0.01}} { // the kernel's minimum quota is 1 ms
		if err := g.SetCPUs(tt.set); err != nil {
			t.Fatalf("SetCPUs(%v) = %v", tt.set, err)
		}
		check(fmt.Sprintf("after SetCPUs(%v)", tt.set), tt.want)
	}
	for _, bad := range []float64{-1, math.NaN()} {
		if err := g.SetCPUs(bad); err == nil {
			t.Errorf("SetCPUs(%v) = nil, want an error", bad)
		}
	}
	check("after refused values", 0.01)
}

func TestKillAndDestroyEmpty(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "pids")
	g := newGroup(t, m, "empty", Limits{Pids: 5})
	if err := g.Kill(); err != nil {
		t.Errorf("Kill() on an empty group = %v", err)
	}
	if err := g.Destroy(); err != nil {
		t.Fatalf("Destroy() = %v", err)
	}
	if err := g.Kill(); err != nil {
		t.Errorf("Kill() after Destroy = %v, want nil", err)
	}
	if _, err := g.Stats(); err != nil {
		t.Errorf("Stats() after Destroy = %v, want zero stats", err)
	}
}

func TestRootless(t *testing.T) {
	requireRoot(t) // to switch to an unprivileged user
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The build directory is private to root; copy the binary somewhere
	// nobody can run it.
	dir, err := os.MkdirTemp("", "airlock-cgroup-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cgroup.test")
	src, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	// No fork while the copy is open for writing (a child of a parallel
	// test would hold it until its exec: ETXTBSY when we run it).
	syscall.ForkLock.RLock()
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err == nil {
		_, err = io.Copy(dst, src)
		if cerr := dst.Close(); err == nil {
			err = cerr
		}
	}
	syscall.ForkLock.RUnlock()
	if err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(bin, "-test.run=^$")
	cmd.Dir = dir
	cmd.Env = []string{helperEnv + "=rootless", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("rootless helper: %v", err)
	}
	var r rootlessResult
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("rootless helper output %q: %v", out, err)
	}
	t.Logf("as nobody: %+v", r)
	if r.Mode.Version != "v2" {
		// On v1 and hybrid an unprivileged user owns no cgroup.
		if len(r.Mode.Controllers) != 0 || r.Mode.Reason == "" {
			t.Errorf("Mode() as nobody = %+v, want no controllers and a reason", r.Mode)
		}
		if !r.IsLimitError || !r.IsUnsupported {
			t.Errorf("New(required) as nobody = %q, want a *LimitError wrapping ErrUnsupported", r.RequiredErr)
		}
		if r.OptionalErr != "" || len(r.OptionalEnf) != 0 || r.OptionalDstErr != "" {
			t.Errorf("New(optional) as nobody = %q, enforced %q, destroy %q; want a group enforcing nothing", r.OptionalErr, r.OptionalEnf, r.OptionalDstErr)
		}
	}
}

// TestV2EnableMovesOnlyTheCaller checks the "no internal processes"
// handling with a real cgroup2 controller. It needs one enabled in the test
// process's own cgroup2 cgroup.subtree_control: on a hybrid machine, for
// example, hugetlb enabled at the root of the unified tree.
func TestV2EnableMovesOnlyTheCaller(t *testing.T) {
	requireRoot(t)
	loc, err := located()
	if err != nil || loc.v2Dir == "" {
		t.Skip("no cgroup2 tree")
	}
	enabled := strings.Fields(readTrim(t, loc.v2Dir+"/cgroup.subtree_control"))
	if len(enabled) == 0 {
		t.Skipf("no controller enabled in %s/cgroup.subtree_control to test delegation with", loc.v2Dir)
	}
	ctrl := enabled[0]

	// own returns a fresh cgroup standing in for the caller's own cgroup.
	own := func(t *testing.T) string {
		dir := fmt.Sprintf("%s/airlock-test-own-%d-%d", loc.v2Dir, os.Getpid(), time.Now().UnixNano())
		if err := unix.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			for _, d := range []string{dir + "/airlock", dir + "/airlock-host", dir} {
				if err := rmdir(d); err != nil {
					t.Errorf("remove %s: %v", d, err)
				}
			}
		})
		return dir
	}
	// startIn starts cmd inside the cgroup dir.
	startIn := func(t *testing.T, dir string, cmd *exec.Cmd) {
		fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
	}
	run := func(t *testing.T, dir string) enableResult {
		cmd := helperCmd(t, "enable")
		cmd.Env = append(cmd.Env, "AIRLOCK_CGROUP_TEST_OWN="+dir, "AIRLOCK_CGROUP_TEST_CTRL="+ctrl)
		var out strings.Builder
		cmd.Stdout = &out
		startIn(t, dir, cmd)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("enable helper: %v", err)
		}
		var r enableResult
		if err := json.Unmarshal([]byte(out.String()), &r); err != nil {
			t.Fatalf("enable helper output %q: %v", out.String(), err)
		}
		return r
	}
	rel := func(dir string) string { return strings.TrimPrefix(dir, strings.TrimSuffix(loc.v2Mount, "/")) }

	t.Run("alone", func(t *testing.T) {
		dir := own(t)
		r := run(t, dir)
		if r.Err != "" || r.Cgroup != rel(dir)+"/airlock-host" {
			t.Errorf("enable as the only process = %+v, want no error and cgroup %s/airlock-host", r, rel(dir))
		}
		for _, d := range []string{dir, dir + "/airlock"} {
			if got := readTrim(t, d+"/cgroup.subtree_control"); !slices.Contains(strings.Fields(got), ctrl) {
				t.Errorf("%s/cgroup.subtree_control = %q, want %s", d, got, ctrl)
			}
		}
		if got := hostLeafParent(r.Cgroup, "airlock"); got != rel(dir) {
			t.Errorf("hostLeafParent(%q) = %q, want %q", r.Cgroup, got, rel(dir))
		}
	})
	t.Run("shared", func(t *testing.T) {
		dir := own(t)
		other := exec.Command("sleep", "30")
		startIn(t, dir, other)
		t.Cleanup(func() {
			_ = other.Process.Kill()
			_ = other.Wait()
		})
		r := run(t, dir)
		if !strings.Contains(r.Err, "other processes") || r.Cgroup != rel(dir) {
			t.Errorf("enable beside another process = %+v, want an error about other processes and cgroup %s", r, rel(dir))
		}
		if exists(dir + "/airlock-host") {
			t.Errorf("%s/airlock-host created though nobody moved", dir)
		}
		if procs := parsePids([]byte(readTrim(t, dir+"/cgroup.procs"))); !slices.Equal(procs, []int{other.Process.Pid}) {
			t.Errorf("%s/cgroup.procs = %v, want only the other process %d", dir, procs, other.Process.Pid)
		}
	})
}

func BenchmarkNewDestroy(b *testing.B) {
	m := newTestManager(b)
	requireControllers(b, m, "memory", "pids", "cpu")
	l := Limits{MemoryBytes: 256 << 20, Pids: 128, CPUs: 1}
	b.ReportAllocs()
	for b.Loop() {
		g, err := m.New("bench", l, true)
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Destroy(); err != nil {
			b.Fatal(err)
		}
		if err := g.Close(); err != nil {
			b.Fatal(err)
		}
	}
}

// TestCPUWeight: Limits.CPUWeight is the new group's share of CPU against
// its siblings (cpu.weight on v2, cpu.shares on v1), SetCPUWeight changes
// it, and weights outside 1-10000 are refused.
func TestCPUWeight(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "cpu")
	g := newGroup(t, m, "weighted", Limits{CPUWeight: 1})
	dir, v2 := g.dirFor(ctrlCPU)
	file, low, normal := "cpu.shares", "10", "1024"
	if v2 {
		file, low, normal = "cpu.weight", "1", "100"
	}
	if got := readTrim(t, dir+"/"+file); got != low {
		t.Errorf("%s of a group made with CPUWeight 1 = %s, want %s", file, got, low)
	}
	if w, err := g.CPUWeight(); err != nil || w != 1 {
		t.Errorf("CPUWeight() = %d, %v; want 1", w, err)
	}
	if err := g.SetCPUWeight(DefaultCPUWeight); err != nil {
		t.Fatalf("SetCPUWeight(%d) = %v", DefaultCPUWeight, err)
	}
	if w, err := g.CPUWeight(); err != nil || w != DefaultCPUWeight {
		t.Errorf("CPUWeight() after SetCPUWeight(%d) = %d, %v", DefaultCPUWeight, w, err)
	}
	if got := readTrim(t, dir+"/"+file); got != normal {
		t.Errorf("%s after SetCPUWeight(%d) = %s, want %s", file, DefaultCPUWeight, got, normal)
	}
	for _, w := range []int{0, -1, 10001} {
		if err := g.SetCPUWeight(w); err == nil {
			t.Errorf("SetCPUWeight(%d) = nil, want an error", w)
		}
	}
	if _, err := m.New("overweight", Limits{CPUWeight: 10001}, false); err == nil {
		t.Errorf("New with CPUWeight 10001 = nil error, want one")
	}
	plain, _ := newGroup(t, m, "plain", Limits{}).dirFor(ctrlCPU)
	if got := readTrim(t, plain+"/"+file); got != normal {
		t.Errorf("%s of a group made without CPUWeight = %s, want the default %s", file, got, normal)
	}
}

// TestRemoveIfEmpty: a group that holds a process is left whole; once it
// is empty every directory of it goes; a group that is gone already is
// gone. ListUnified finds what List finds of groups with a cgroup2
// directory.
func TestRemoveIfEmpty(t *testing.T) {
	m := newTestManager(t)
	requireControllers(t, m, "pids")
	// The helper is a Go (race-enabled under CI) test binary: its runtime
	// starts threads as it likes, and each counts against pids.max. Too
	// low a limit fails its thread creation (a fatal runtime error), which
	// is not what this test is about.
	g, err := m.New("reap", Limits{Pids: 64, MemoryBytes: 256 << 20}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	dirs := g.dirs()
	if len(dirs) == 0 {
		t.Fatal("the group has no directory")
	}
	names, err := m.ListUnified()
	if err != nil || !slices.Equal(names, []string{"reap"}) {
		t.Fatalf("ListUnified() = %q, %v; want [reap]", names, err)
	}
	cmd := helperCmd(t, "busy")
	release := startBlocked(t, g, cmd)
	gone, err := m.RemoveIfEmpty("reap")
	if err != nil || gone {
		t.Fatalf("RemoveIfEmpty with a process inside = %v, %v; want false, nil", gone, err)
	}
	for _, d := range dirs {
		if !exists(d) {
			t.Fatalf("%s removed while the group holds a process", d)
		}
	}
	release()
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	// The exited process leaves cgroup.events a moment after its wait (a
	// long moment on a loaded machine: the bound is on a hang).
	deadline := time.Now().Add(time.Minute)
	for {
		gone, err = m.RemoveIfEmpty("reap")
		if err != nil {
			t.Fatalf("RemoveIfEmpty of an empty group = %v", err)
		}
		if gone || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !gone {
		t.Fatal("RemoveIfEmpty never removed the emptied group")
	}
	for _, d := range dirs {
		if exists(d) {
			t.Errorf("%s left after RemoveIfEmpty reported the group gone", d)
		}
	}
	if gone, err := m.RemoveIfEmpty("reap"); err != nil || !gone {
		t.Errorf("RemoveIfEmpty of a removed group = %v, %v; want true, nil", gone, err)
	}
	if _, err := m.RemoveIfEmpty("../x"); err == nil {
		t.Error("RemoveIfEmpty accepted a path")
	}
}
