package cgroup

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// killTimeout bounds how long Kill waits for a group to empty.
const killTimeout = 2 * time.Second

// unlimitedV1 is the smallest value v1 reports for "no limit"
// (PAGE_COUNTER_MAX pages, rounded); anything at or above it is unlimited.
const unlimitedV1 = 1 << 62

// Group is the cgroup of one sandbox in every hierarchy. Its methods are
// safe for concurrent use, but CgroupFD must not be used after Close.
type Group struct {
	name    string
	v1      []v1Dir
	v2      string  // cgroup2 directory, "" if none
	v2Ctrls ctrlSet // limit controllers set in v2
	// enforced is set by New and Open, and changed only by SetCPUs; read
	// and changed under mu after that.
	enforced []string
	// freezer is the freezer Freeze uses when the Manager was told one
	// (ManagerOptions.Freezer); "" picks cgroup2's where there is one.
	freezer string

	mu sync.Mutex
	fd int // guarded by mu; O_PATH descriptor of v2, -1 if none or closed
	// counters holds the files Counters reads, opened on first use and
	// read again from offset 0: a command reads them before and after it
	// runs, and opening a cgroup file costs more than reading it. Guarded
	// by mu.
	counters map[string]int
	closed   bool // guarded by mu
}

// v1Dir is the group's directory in one v1 hierarchy.
type v1Dir struct {
	ctrls ctrlSet
	dir   string
}

// Stats is the resource usage of a group and how often it hit its limits.
// A value the kernel does not report is 0.
//
// On v1, MemoryMaxHits is memory.failcnt plus memory.memsw.failcnt. Linux
// 6.18 counts neither when memory+swap is capped at the memory limit, as New
// does, so there it stays 0; OOMKills is the signal to rely on.
type Stats struct {
	MemoryCurrent int64         // bytes charged now
	MemoryPeak    int64         // highest bytes charged so far
	CPU           time.Duration // CPU time (user + system) of all processes, past and present
	Pids          int64         // tasks now
	OOMKills      int64         // processes killed by the OOM killer inside the group
	PidsMaxHits   int64         // forks refused by the pids limit
	MemoryMaxHits int64         // times usage hit the memory limit
}

// Name returns the group name.
func (g *Group) Name() string { return g.name }

// CgroupFD returns a descriptor of the group's cgroup2 directory for
// syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}, which starts a
// process inside the group (CLONE_INTO_CGROUP), or -1 if there is no cgroup2
// directory. The Group owns it: Close closes it.
//
// In hybrid and v1 mode CLONE_INTO_CGROUP covers only the cgroup2 tree; the
// v1 limits apply once AddProc has run, so start the process blocked (for
// example on a pipe) until then. NeedsAddProc reports whether that is needed.
func (g *Group) CgroupFD() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.fd
}

// NeedsAddProc reports whether a process started with CgroupFD still needs
// AddProc for the group's limits to apply to it: true when the group has v1
// directories or no cgroup2 directory.
func (g *Group) NeedsAddProc() bool { return len(g.v1) > 0 || g.v2 == "" }

// AddProc moves the process pid (all its threads) into the group in every
// hierarchy. Processes it has already forked stay where they are, so call it
// before the process starts anything. Moving a process already in a
// directory is a no-op, so it is safe after CLONE_INTO_CGROUP.
func (g *Group) AddProc(pid int) error {
	s := strconv.Itoa(pid)
	// cgroup2 first: once there the process can be killed as part of the
	// group even if a v1 move fails.
	if g.v2 != "" {
		if err := writeFile(g.v2+"/cgroup.procs", s); err != nil {
			return fmt.Errorf("cgroup %s: add pid %d to cgroup2 cgroup.procs: %w", g.name, pid, err)
		}
	}
	return g.addV1(pid, s)
}

// AddClonedProc is AddProc for a process started with CgroupFD
// (CLONE_INTO_CGROUP): the kernel put it in the group's cgroup2 directory
// as it was made, so only the v1 hierarchies are joined, and the cgroup2
// cgroup.procs is not written again (an open, a write of a migration to
// the same directory, a close).
func (g *Group) AddClonedProc(pid int) error {
	if g.v2 == "" {
		return g.AddProc(pid)
	}
	return g.addV1(pid, strconv.Itoa(pid))
}

// OpenV1Tasks opens the group's `tasks` file in every v1 hierarchy for
// writing, for a child that writes "0" to each before its exec
// (vfork.Exec): a thread that moves itself through `tasks` is the one
// migration the kernel makes without taking cgroup_threadgroup_rwsem for
// writing, whose writer waits for an RCU grace period on a v1 hierarchy
// mounted without favordynmods (5-15 ms a start on Linux 6.18), as every
// write of a pid to cgroup.procs does. intoV2 says the child is cloned into
// the cgroup2 directory (CgroupFD). It returns nil when there is nothing
// for the child to join, or when joining the v1 hierarchies would not be
// all (a cgroup2 directory the clone does not enter): AddProc then. The
// caller closes them (CloseFDs).
func (g *Group) OpenV1Tasks(intoV2 bool) ([]int, error) {
	if len(g.v1) == 0 || (g.v2 != "" && !intoV2) {
		return nil, nil
	}
	fds := make([]int, 0, len(g.v1))
	for _, d := range g.v1 {
		fd, err := unix.Open(d.dir+"/tasks", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			CloseFDs(fds)
			return nil, fmt.Errorf("cgroup %s: open %s tasks: %w", g.name, d.ctrls, err)
		}
		fds = append(fds, fd)
	}
	return fds, nil
}

// CloseFDs closes the descriptors OpenV1Tasks returned.
func CloseFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

func (g *Group) addV1(pid int, s string) error {
	for _, d := range g.v1 {
		if err := writeFile(d.dir+"/cgroup.procs", s); err != nil {
			return fmt.Errorf("cgroup %s: add pid %d to %s cgroup.procs: %w", g.name, pid, d.ctrls, err)
		}
	}
	return nil
}

// Enforced lists the limits in force, in the order memory, swap, pids, cpu.
// "swap" means swap is capped along with memory.
func (g *Group) Enforced() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.enforced)
}

// dirFor returns the directory holding controller c's files and whether it
// is the cgroup2 one, or "" if the group has none.
func (g *Group) dirFor(c ctrlSet) (string, bool) {
	for _, d := range g.v1 {
		if d.ctrls&c != 0 {
			return d.dir, false
		}
	}
	if g.v2Ctrls&c != 0 {
		return g.v2, true
	}
	return "", false
}

// SetLimits writes the limits of l into a group Manager.Make made (New
// does it itself); call it once. Limits that fail are skipped unless
// require is set, in which case the first failure is returned: the group
// then bounds less than l, and the caller ends what it started there.
// Enforced tells afterwards which limits are in force.
func (g *Group) SetLimits(l Limits, require bool) error {
	if err := l.validate(); err != nil {
		return fmt.Errorf("cgroup %s: %w", g.name, err)
	}
	return g.setLimits(l, require)
}

// setLimits writes the limits of l. Limits that fail are skipped unless
// require is set, in which case the first failure is returned.
func (g *Group) setLimits(l Limits, require bool) error {
	// set writes val to file and reports whether it did; with optional, a
	// missing file is skipped silently.
	var err error
	set := func(c ctrlSet, dir, file, val string, optional bool) bool {
		if err != nil {
			return false
		}
		werr := writeFile(dir+"/"+file, val)
		switch {
		case werr == nil:
			return true
		case optional && errors.Is(werr, unix.ENOENT):
		case require:
			err = &LimitError{Group: g.name, Controller: c.String(), File: file, Err: werr}
		}
		return false
	}
	if l.MemoryBytes > 0 {
		if dir, v2 := g.dirFor(ctrlMemory); dir != "" {
			v := strconv.FormatInt(l.MemoryBytes, 10)
			mem, swap := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
			swapVal := v // v1: memory+swap, so the same value means no swap
			if v2 {
				mem, swap, swapVal = "memory.max", "memory.swap.max", "0"
			}
			// The memory limit must be set first: v1 requires memsw >= limit.
			if set(ctrlMemory, dir, mem, v, false) {
				g.enforced = append(g.enforced, "memory")
				if set(ctrlMemory, dir, swap, swapVal, true) {
					g.enforced = append(g.enforced, "swap")
				}
			}
		}
	}
	if l.Pids > 0 {
		if dir, _ := g.dirFor(ctrlPids); dir != "" {
			if set(ctrlPids, dir, "pids.max", strconv.FormatInt(l.Pids, 10), false) {
				g.enforced = append(g.enforced, "pids")
			}
		}
	}
	if l.CPUs > 0 && !l.CPULater {
		if dir, v2 := g.dirFor(ctrlCPU); dir != "" {
			file, val := cpuQuotaFile(v2, l.cpuQuota())
			if set(ctrlCPU, dir, file, val, false) {
				g.enforced = append(g.enforced, "cpu")
			}
		}
	}
	if l.CPUWeight > 0 {
		// A priority, not a limit: a kernel without the cpu controller
		// here runs the group at its default, and nothing is required.
		_ = g.SetCPUWeight(l.CPUWeight)
	}
	return err
}

// cpuQuotaFile returns the file that holds a group's CPU quota and what to
// write to it for quota µs per period (-1: no limit).
func cpuQuotaFile(v2 bool, quota int64) (file, val string) {
	if v2 {
		if quota < 0 {
			return "cpu.max", "max " + strconv.Itoa(cpuPeriodMicros)
		}
		return "cpu.max", strconv.FormatInt(quota, 10) + " " + strconv.Itoa(cpuPeriodMicros)
	}
	// A new v1 cgroup starts with the default 100 ms period whatever its
	// parent's, so only the quota is written.
	return "cpu.cfs_quota_us", strconv.FormatInt(quota, 10)
}

// SetCPUs caps the group's CPU time at cpus CPUs (Limits.CPUs), or lifts
// the cap with cpus 0: for a group made with Limits.CPULater, once what
// the limit is not for is over. It fails, with a *LimitError, if the
// group has no cpu controller (wrapping errors.ErrUnsupported) or the
// kernel refuses the value (on v1, a quota above its parent's); the group
// is then as it was.
func (g *Group) SetCPUs(cpus float64) error {
	l := Limits{CPUs: cpus}
	if err := l.validate(); err != nil {
		return fmt.Errorf("cgroup %s: %w", g.name, err)
	}
	dir, v2 := g.dirFor(ctrlCPU)
	if dir == "" {
		return &LimitError{Group: g.name, Controller: ctrlCPU.String(), Err: fmt.Errorf("no cpu controller: %w", errors.ErrUnsupported)}
	}
	quota := int64(-1)
	if cpus > 0 {
		quota = l.cpuQuota()
	}
	file, val := cpuQuotaFile(v2, quota)
	if err := writeFile(dir+"/"+file, val); err != nil {
		return &LimitError{Group: g.name, Controller: ctrlCPU.String(), File: file, Err: err}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	i := slices.Index(g.enforced, "cpu")
	switch {
	case cpus > 0 && i < 0:
		g.enforced = append(g.enforced, "cpu")
	case cpus == 0 && i >= 0:
		g.enforced = slices.Delete(g.enforced, i, i+1)
	}
	return nil
}

// CPUDir returns the directory holding the group's cpu controller files
// and whether it is the cgroup2 one, or "" if the group has none.
func (g *Group) CPUDir() (dir string, v2 bool) { return g.dirFor(ctrlCPU) }

// CPUs reads back the group's CPU cap in CPUs (quota / period), 0 when
// there is none.
func (g *Group) CPUs() (float64, error) {
	dir, v2 := g.dirFor(ctrlCPU)
	if dir == "" {
		return 0, fmt.Errorf("cgroup %s: read cpu limit: no cpu controller: %w", g.name, errors.ErrUnsupported)
	}
	var quota, period string
	if v2 {
		b, err := readFile(dir + "/cpu.max")
		if err != nil {
			return 0, fmt.Errorf("cgroup %s: read cpu.max: %w", g.name, err)
		}
		f := bytes.Fields(b)
		if len(f) != 2 {
			return 0, fmt.Errorf("cgroup %s: cpu.max %q: want quota and period", g.name, b)
		}
		quota, period = string(f[0]), string(f[1])
	} else {
		q, err := readFile(dir + "/cpu.cfs_quota_us")
		if err != nil {
			return 0, fmt.Errorf("cgroup %s: read cpu.cfs_quota_us: %w", g.name, err)
		}
		p, err := readFile(dir + "/cpu.cfs_period_us")
		if err != nil {
			return 0, fmt.Errorf("cgroup %s: read cpu.cfs_period_us: %w", g.name, err)
		}
		quota, period = string(bytes.TrimSpace(q)), string(bytes.TrimSpace(p))
	}
	if quota == "max" || quota == "-1" {
		return 0, nil
	}
	q, err := strconv.ParseInt(quota, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: cpu quota %q: %w", g.name, quota, err)
	}
	p, err := strconv.ParseInt(period, 10, 64)
	if err != nil || p <= 0 {
		return 0, fmt.Errorf("cgroup %s: cpu period %q: not a positive number", g.name, period)
	}
	return float64(q) / float64(p), nil
}

// SetCPUWeight sets the group's share of CPU time against its siblings
// (Limits.CPUWeight), in every hierarchy that has the cpu controller.
func (g *Group) SetCPUWeight(w int) error {
	if w < 1 || w > 10000 {
		return fmt.Errorf("cgroup %s: cpu weight %d is out of range 1-10000", g.name, w)
	}
	dir, v2 := g.dirFor(ctrlCPU)
	if dir == "" {
		return fmt.Errorf("cgroup %s: set cpu weight: no cpu controller: %w", g.name, errors.ErrUnsupported)
	}
	file, val := "cpu.weight", strconv.Itoa(w)
	if !v2 {
		file, val = "cpu.shares", strconv.Itoa(max(2, w*1024/DefaultCPUWeight))
	}
	if err := writeFile(dir+"/"+file, val); err != nil {
		return fmt.Errorf("cgroup %s: set %s: %w", g.name, file, err)
	}
	return nil
}

// CPUWeight reads back the group's CPU weight (SetCPUWeight's scale; on
// v1, cpu.shares converted back, rounded up).
func (g *Group) CPUWeight() (int, error) {
	dir, v2 := g.dirFor(ctrlCPU)
	if dir == "" {
		return 0, fmt.Errorf("cgroup %s: read cpu weight: no cpu controller: %w", g.name, errors.ErrUnsupported)
	}
	file := "cpu.weight"
	if !v2 {
		file = "cpu.shares"
	}
	b, err := readFile(dir + "/" + file)
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: read %s: %w", g.name, file, err)
	}
	n, err := strconv.Atoi(string(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("cgroup %s: read %s: %w", g.name, file, err)
	}
	if !v2 {
		n = (n*DefaultCPUWeight + 1023) / 1024
	}
	return n, nil
}

// readEnforced reads back which limits are set, for Open.
func (g *Group) readEnforced() []string {
	var out []string
	limited := func(dir, file string, v1 bool) bool {
		data, err := readFile(dir + "/" + file)
		if err != nil {
			return false
		}
		f := bytes.Fields(data)
		if len(f) == 0 || string(f[0]) == "max" {
			return false
		}
		n, err := strconv.ParseInt(string(f[0]), 10, 64)
		return err == nil && (!v1 || (n >= 0 && n < unlimitedV1))
	}
	if dir, v2 := g.dirFor(ctrlMemory); dir != "" {
		mem, swap := "memory.limit_in_bytes", "memory.memsw.limit_in_bytes"
		if v2 {
			mem, swap = "memory.max", "memory.swap.max"
		}
		if limited(dir, mem, !v2) {
			out = append(out, "memory")
			if limited(dir, swap, !v2) {
				out = append(out, "swap")
			}
		}
	}
	if dir, _ := g.dirFor(ctrlPids); dir != "" && limited(dir, "pids.max", false) {
		out = append(out, "pids")
	}
	if dir, v2 := g.dirFor(ctrlCPU); dir != "" {
		file := "cpu.cfs_quota_us"
		if v2 {
			file = "cpu.max"
		}
		if limited(dir, file, !v2) {
			out = append(out, "cpu")
		}
	}
	return out
}

// Stats returns the group's usage and limit-hit counters.
func (g *Group) Stats() (Stats, error) { return g.stats(false) }

// Counters is Stats limited to what a command's result needs: OOMKills,
// PidsMaxHits, Pids and MemoryPeak (four file reads instead of nine; it
// runs before, during and after every command).
func (g *Group) Counters() (Stats, error) { return g.stats(true) }

// readKept reads path through a descriptor kept open for the next read.
func (g *Group) readKept(path string) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil, fmt.Errorf("cgroup %s: closed", g.name)
	}
	if g.counters == nil {
		g.counters = map[string]int{}
	}
	fd, ok := g.counters[path]
	if !ok {
		var err error
		if fd, err = retryEINTR(func() (int, error) { return unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0) }); err != nil {
			return nil, err
		}
		g.counters[path] = fd
	}
	return preadAll(fd)
}

func (g *Group) stats(countersOnly bool) (Stats, error) {
	var s Stats
	r := &statReader{g: g, kept: countersOnly}
	if dir, v2 := g.dirFor(ctrlMemory); dir != "" && countersOnly {
		if v2 {
			r.value(dir, "memory.peak", &s.MemoryPeak)
			r.keyed(r.read(dir, "memory.events"), "oom_kill", &s.OOMKills)
		} else {
			r.value(dir, "memory.max_usage_in_bytes", &s.MemoryPeak)
			r.keyed(r.read(dir, "memory.oom_control"), "oom_kill", &s.OOMKills)
		}
	} else if dir != "" {
		if v2 {
			r.value(dir, "memory.current", &s.MemoryCurrent)
			r.value(dir, "memory.peak", &s.MemoryPeak)
			ev := r.read(dir, "memory.events")
			r.keyed(ev, "oom_kill", &s.OOMKills)
			r.keyed(ev, "max", &s.MemoryMaxHits)
		} else {
			r.value(dir, "memory.usage_in_bytes", &s.MemoryCurrent)
			r.value(dir, "memory.max_usage_in_bytes", &s.MemoryPeak)
			// With swap capped at the same value, the memory+swap counter
			// is charged first and is the one that fails.
			var memsw int64
			r.value(dir, "memory.failcnt", &s.MemoryMaxHits)
			r.value(dir, "memory.memsw.failcnt", &memsw)
			s.MemoryMaxHits += memsw
			r.keyed(r.read(dir, "memory.oom_control"), "oom_kill", &s.OOMKills)
		}
	}
	if dir, _ := g.dirFor(ctrlPids); dir != "" {
		r.value(dir, "pids.current", &s.Pids)
		r.keyed(r.read(dir, "pids.events"), "max", &s.PidsMaxHits)
	}
	if countersOnly {
		return s, errors.Join(r.errs...)
	}
	s.CPU = r.cpu()
	return s, errors.Join(r.errs...)
}

// CPU returns the CPU time of every process the group ever held: one file
// read, for callers that need nothing else.
func (g *Group) CPU() (time.Duration, error) {
	r := &statReader{g: g}
	d := r.cpu()
	return d, errors.Join(r.errs...)
}

// Memory returns the bytes charged to the group now (memory.current, or
// memory.usage_in_bytes on v1): one file read. It is 0 without a memory
// controller.
func (g *Group) Memory() (int64, error) {
	r := &statReader{g: g}
	var n int64
	if dir, v2 := g.dirFor(ctrlMemory); dir != "" {
		if v2 {
			r.value(dir, "memory.current", &n)
		} else {
			r.value(dir, "memory.usage_in_bytes", &n)
		}
	}
	return n, errors.Join(r.errs...)
}

// statReader reads a group's files, collecting the errors.
type statReader struct {
	g    *Group
	kept bool // read through the group's kept descriptors
	errs []error
}

func (r *statReader) read(dir, file string) []byte {
	var data []byte
	var err error
	if r.kept {
		data, err = r.g.readKept(dir + "/" + file)
	} else {
		data, err = readFile(dir + "/" + file)
	}
	if err != nil && !errors.Is(err, unix.ENOENT) {
		r.errs = append(r.errs, fmt.Errorf("cgroup %s: read %s: %w", r.g.name, file, err))
	}
	return data
}

func (r *statReader) value(dir, file string, dst *int64) {
	if data := r.read(dir, file); data != nil {
		if n, err := parseInt(data); err == nil {
			*dst = n
		}
	}
}

func (r *statReader) keyed(data []byte, key string, dst *int64) {
	if n, ok := keyedValue(data, key); ok {
		*dst = n
	}
}

// cpu reads the group's CPU time: cgroup2 reports it in every cgroup, with
// or without the cpu controller; v1 needs cpuacct.
func (r *statReader) cpu() time.Duration {
	var usec, nsec int64
	if r.g.v2 != "" {
		r.keyed(r.read(r.g.v2, "cpu.stat"), "usage_usec", &usec)
	}
	if usec == 0 {
		if dir, _ := r.g.dirFor(ctrlCPUAcct); dir != "" {
			r.value(dir, "cpuacct.usage", &nsec)
		}
	}
	return time.Duration(usec)*time.Microsecond + time.Duration(nsec)
}

// Kill sends SIGKILL to every process in the group and waits, for at most 2
// seconds, until the group is empty. With cgroup.kill (cgroup2, Linux 5.14)
// the kernel kills the whole subtree atomically, so nothing escapes by
// forking. Otherwise Kill freezes the group (v1 freezer), signals every
// process listed in cgroup.procs, thaws it so the signals land, and repeats
// until it is empty. Without a freezer a process that exits between the read
// and the signal may, in theory, have its pid reused by then.
func (g *Group) Kill() error {
	deadline := time.Now().Add(killTimeout)
	var rest []string // directories still to empty by signalling
	if g.v2 != "" {
		err := writeFile(g.v2+"/cgroup.kill", "1")
		switch {
		case err == nil:
			// A task the v1 freezer holds dies only once thawed: the
			// signal is pending now, so it runs no more of its code.
			if dir, _ := g.dirFor(ctrlFreezer); dir != "" {
				_ = writeFile(dir+"/freezer.state", "THAWED")
			}
			ok, err := poll(deadline, func() (bool, error) {
				p, err := g.v2Populated()
				return !p, err
			})
			if err != nil {
				return fmt.Errorf("cgroup %s: read cgroup.events: %w", g.name, err)
			}
			if !ok {
				return fmt.Errorf("cgroup %s: still populated %v after cgroup.kill", g.name, killTimeout)
			}
		case errors.Is(err, unix.ENOENT) && exists(g.v2):
			rest = append(rest, g.v2) // a kernel without cgroup.kill
		case errors.Is(err, unix.ENOENT):
			// Already removed.
		default:
			return fmt.Errorf("cgroup %s: write cgroup.kill: %w", g.name, err)
		}
	}
	// In hybrid mode the v1 directories are empty by now unless a process
	// was moved into them but not into cgroup2; checking costs a read each.
	for _, d := range g.v1 {
		rest = append(rest, d.dir)
	}
	if len(rest) == 0 {
		return nil
	}
	return g.killProcs(rest, deadline)
}

// KillNoWait is Kill's first step alone, for a group whose host will not
// wait for it to empty: it writes cgroup.kill, which signals every process
// in the cgroup2 subtree before the write returns, and thaws the v1
// freezer so the signals land. It fails, having killed nothing it can
// vouch for, when the group has no cgroup2 directory or the kernel no
// cgroup.kill; the caller then kills and waits as Destroy does.
func (g *Group) KillNoWait() error {
	if g.v2 == "" {
		return fmt.Errorf("cgroup %s: no cgroup2 directory: %w", g.name, errors.ErrUnsupported)
	}
	if err := writeFile(g.v2+"/cgroup.kill", "1"); err != nil {
		return fmt.Errorf("cgroup %s: write cgroup.kill: %w", g.name, err)
	}
	if dir, _ := g.dirFor(ctrlFreezer); dir != "" {
		_ = writeFile(dir+"/freezer.state", "THAWED")
	}
	return nil
}

// V2Dir returns the group's cgroup2 directory, "" when it has none.
func (g *Group) V2Dir() string { return g.v2 }

// Populated reports whether any process is in the group (or in a group
// below it, on cgroup2).
func (g *Group) Populated() (bool, error) { return g.populated() }

// v2Populated reads "populated" from cgroup.events. A removed group is not
// populated.
func (g *Group) v2Populated() (bool, error) { return DirPopulated(g.v2) }

// DirPopulated reports whether the cgroup2 directory dir, or a group below
// it, holds a process, from its cgroup.events. A directory that does not
// exist holds none; any other error is returned (callers that guard
// something with the answer treat it as populated).
func DirPopulated(dir string) (bool, error) {
	data, err := readFile(dir + "/cgroup.events")
	if errors.Is(err, unix.ENOENT) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	n, ok := keyedValue(data, "populated")
	if !ok {
		return false, fmt.Errorf("%s/cgroup.events: no populated field", dir)
	}
	return n != 0, nil
}

// killProcs signals the processes in dirs until none is left.
func (g *Group) killProcs(dirs []string, deadline time.Time) error {
	freezer, _ := g.dirFor(ctrlFreezer)
	self := os.Getpid()
	ok, err := poll(deadline, func() (bool, error) {
		if freezer != "" {
			g.freeze(freezer, deadline)
		}
		n := 0
		var err error
		for _, d := range dirs {
			data, rerr := readFile(d + "/cgroup.procs")
			if errors.Is(rerr, unix.ENOENT) {
				continue
			}
			if rerr != nil {
				err = fmt.Errorf("cgroup %s: read %s/cgroup.procs: %w", g.name, d, rerr)
				break
			}
			for _, pid := range parsePids(data) {
				if pid == self {
					err = fmt.Errorf("cgroup %s: holds the calling process %d, not killing it", g.name, pid)
					break
				}
				n++
				_ = unix.Kill(pid, unix.SIGKILL) // ESRCH: it is gone already
			}
		}
		if freezer != "" {
			_ = writeFile(freezer+"/freezer.state", "THAWED") // if this fails, the next round retries
		}
		return n == 0, err
	})
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("cgroup %s: still populated after %v of SIGKILL", g.name, killTimeout)
	}
	return nil
}

// freeze freezes the v1 freezer directory dir and waits briefly until the
// kernel reports FROZEN. A task stuck in the kernel can keep it FREEZING; the
// caller then signals anyway.
func (g *Group) freeze(dir string, deadline time.Time) {
	if writeFile(dir+"/freezer.state", "FROZEN") != nil {
		return
	}
	until := time.Now().Add(100 * time.Millisecond)
	if deadline.Before(until) {
		until = deadline
	}
	_, _ = poll(until, func() (bool, error) {
		data, err := readFile(dir + "/freezer.state")
		return err != nil || bytes.Equal(bytes.TrimSpace(data), []byte("FROZEN")), nil
	})
}

// populated reports whether any process is in the group: from cgroup.events
// when there is a cgroup2 directory, else from the v1 cgroup.procs files.
func (g *Group) populated() (bool, error) {
	if g.v2 != "" {
		return g.v2Populated()
	}
	for _, d := range g.v1 {
		data, err := readFile(d.dir + "/cgroup.procs")
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return false, err
		}
		if len(bytes.TrimSpace(data)) > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Destroy kills the group's processes if there are any and removes all its
// directories. Destroying a destroyed group does nothing. Destroy does not
// close the descriptor; Close does.
func (g *Group) Destroy() error {
	busy, err := g.populated()
	if err != nil {
		return fmt.Errorf("cgroup %s: %w", g.name, err)
	}
	if busy {
		if err := g.Kill(); err != nil {
			return err
		}
	}
	err = g.removeDirs()
	if !errors.Is(err, unix.EBUSY) {
		return err
	}
	// A process is left in some directory (one only partly added, or one
	// that just exited and is still being released): kill and retry.
	if err := g.Kill(); err != nil {
		return err
	}
	deadline := time.Now().Add(killTimeout)
	_, err = poll(deadline, func() (bool, error) {
		err := g.removeDirs()
		if errors.Is(err, unix.EBUSY) {
			return false, nil
		}
		return true, err
	})
	if err == nil && g.dirsLeft() {
		err = fmt.Errorf("cgroup %s: remove: %w", g.name, unix.EBUSY)
	}
	return err
}

// removeDirs removes every directory of the group that exists.
func (g *Group) removeDirs() error {
	var first error
	rm := func(dir string) {
		if err := rmdir(dir); err != nil && first == nil {
			first = fmt.Errorf("cgroup %s: remove %s: %w", g.name, dir, err)
		}
	}
	if g.v2 != "" {
		rm(g.v2)
	}
	for _, d := range g.v1 {
		rm(d.dir)
	}
	return first
}

// dirsLeft reports whether any directory of the group still exists.
func (g *Group) dirsLeft() bool {
	if g.v2 != "" && exists(g.v2) {
		return true
	}
	for _, d := range g.v1 {
		if exists(d.dir) {
			return true
		}
	}
	return false
}

// Close releases the descriptor returned by CgroupFD and those Counters
// keeps; Counters fails afterwards. It does not remove the group. Closing
// twice is fine.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, fd := range g.counters {
		unix.Close(fd)
	}
	g.counters, g.closed = nil, true
	if g.fd < 0 {
		return nil
	}
	err := unix.Close(g.fd)
	g.fd = -1
	if err != nil {
		return fmt.Errorf("cgroup %s: close: %w", g.name, err)
	}
	return nil
}
