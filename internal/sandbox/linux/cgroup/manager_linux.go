package cgroup

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// cpuPeriodMicros is the CFS period used for CPU quotas: 100 ms, the kernel
// default.
const cpuPeriodMicros = 100_000

// Limits are the resource limits of one group. A zero field means no limit.
type Limits struct {
	// MemoryBytes caps memory use. Swap is capped too where the kernel
	// supports it (v1 memory.memsw.limit_in_bytes set to the same value, v2
	// memory.swap.max set to 0), so the limit cannot be escaped by swapping.
	MemoryBytes int64
	// Pids caps the number of tasks (processes and threads).
	Pids int64
	// CPUs caps CPU time: CPUs * 100 ms per 100 ms period.
	CPUs float64
	// CPUWeight, when not 0, is the group's share of CPU time against its
	// siblings when they compete, from 1 to 10000 (v2 cpu.weight; the
	// kernel's default is 100; v1 cpu.shares of CPUWeight*1024/100). It
	// is a priority, not a limit: never required, never in Enforced.
	CPUWeight int
	// CPULater makes New leave the group's CPU time unlimited though
	// CPUs is set, for a start that is the runtime's and not the work the
	// limit is for (a gVisor sandbox's boot, which runs runsc, its gofer
	// and sentry side by side): Group.SetCPUs applies CPUs once that is
	// over. New still checks, with requireLimits, that the CPU limit can
	// be enforced; Enforced lists "cpu" only once SetCPUs has applied it.
	CPULater bool
}

// DefaultCPUWeight is the kernel's cpu.weight of a new group.
const DefaultCPUWeight = 100

// validate rejects values no kernel would take.
func (l Limits) validate() error {
	var errs []error
	if l.MemoryBytes < 0 {
		errs = append(errs, fmt.Errorf("memory limit %d is negative", l.MemoryBytes))
	}
	if l.Pids < 0 {
		errs = append(errs, fmt.Errorf("pids limit %d is negative", l.Pids))
	}
	if l.CPUs < 0 || math.IsNaN(l.CPUs) || l.CPUs*cpuPeriodMicros >= math.MaxInt64 {
		errs = append(errs, fmt.Errorf("cpu limit %v is out of range", l.CPUs))
	}
	if l.CPUWeight < 0 || l.CPUWeight > 10000 {
		errs = append(errs, fmt.Errorf("cpu weight %d is out of range 1-10000", l.CPUWeight))
	}
	return errors.Join(errs...)
}

// cpuQuota returns the CFS quota in microseconds for l.CPUs, at least the
// kernel's minimum of 1 ms.
func (l Limits) cpuQuota() int64 {
	return max(int64(math.Ceil(l.CPUs*cpuPeriodMicros)), 1000)
}

// LimitError reports a requested limit that could not be enforced. New
// returns it only when requireLimits is set. When the controller itself is
// missing, File is empty and Err wraps errors.ErrUnsupported.
type LimitError struct {
	Group      string // group name
	Controller string // "memory", "pids" or "cpu"
	File       string // control file whose write failed, e.g. "memory.limit_in_bytes"
	Err        error  // the cause
}

func (e *LimitError) Error() string {
	if e.File == "" {
		return "cgroup " + e.Group + ": " + e.Controller + " limit: " + e.Err.Error()
	}
	return "cgroup " + e.Group + ": set " + e.File + ": " + e.Err.Error()
}

func (e *LimitError) Unwrap() error { return e.Err }

// Manager creates and finds groups under a parent cgroup nested in the
// calling process's own cgroup in every hierarchy. It is safe for concurrent
// use.
type Manager struct {
	parent string
	lay    layout
	opts   ManagerOptions

	mu sync.Mutex
	// plan is what New creates groups with, set on first use; guarded by mu.
	plan *plan
}

// plan is the outcome of preparing the parent directories.
type plan struct {
	mode    Mode
	v1      []v1Parent
	v2      string  // cgroup2 parent directory, "" if none
	v2Ctrls ctrlSet // limit controllers enabled for groups in the cgroup2 tree
	reasons []string
	pureV2  bool // every limit depends on the cgroup2 tree
}

// v1Parent is the parent directory in one v1 hierarchy.
type v1Parent struct {
	ctrls ctrlSet // controllers New uses in this hierarchy
	dir   string
}

// ManagerOptions tune a Manager.
type ManagerOptions struct {
	// Freezer forces the freezer its groups' Freeze uses: FreezerV2
	// (cgroup.freeze) or FreezerV1 (the v1 freezer controller, whose
	// directory every group then gets). "" uses cgroup2's where the
	// cgroup2 tree has cgroup.freeze, else v1's.
	Freezer string
}

// NewManager returns a Manager for groups under parentName (for example
// "airlock"). It reads the caller's cgroups but creates nothing: the parent
// directories are created on first use by New or Mode, and existing ones are
// reused.
func NewManager(parentName string) (*Manager, error) {
	return NewManagerWith(parentName, ManagerOptions{})
}

// NewManagerWith is NewManager with options.
func NewManagerWith(parentName string, opts ManagerOptions) (*Manager, error) {
	switch opts.Freezer {
	case "", FreezerV1, FreezerV2:
	default:
		return nil, fmt.Errorf("cgroup freezer %q: want %q, %q or empty", opts.Freezer, FreezerV1, FreezerV2)
	}
	if err := validName(parentName); err != nil {
		return nil, fmt.Errorf("cgroup parent: %w", err)
	}
	loc, err := located()
	if err != nil {
		return nil, err
	}
	if loc.v2Dir != "" {
		// A host that moved itself into <own>/<parent>-host, or a process it
		// started, keeps finding the groups under <own>/<parent>.
		loc.v2Dir = hostLeafParent(loc.v2Dir, parentName)
	}
	return &Manager{parent: parentName, lay: probe(loc), opts: opts}, nil
}

// Mode reports what groups of this Manager get: the controllers limits can be
// set with and whether a cgroup2 tree tracks them. On first use it prepares
// the parent directories (see New), so that it reports what New will
// actually enforce.
func (m *Manager) Mode() Mode {
	md := m.prepare().mode
	md.Controllers = slices.Clone(md.Controllers)
	return md
}

// prepare creates the parent directories, enabling v2 controllers on the way,
// once. Anything that fails makes the affected controllers unavailable and is
// recorded in the mode's Reason; it is not retried.
func (m *Manager) prepare() *plan {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.plan != nil {
		return m.plan
	}
	p := &plan{reasons: slices.Clone(m.lay.reasons), pureV2: m.lay.version == "v2"}
	// cgroup2 first: what it offers decides which v1 hierarchies are needed.
	v2Kill, v2CPUStat, v2Freeze := false, false, false
	if t := m.lay.v2; t.mount != "" {
		dir := t.own + "/" + m.parent
		if _, err := mkdir(dir); err != nil {
			p.reasons = append(p.reasons, fmt.Sprintf("cgroup2: create %s: %v", dir, err))
		} else {
			p.v2 = dir
			v2Kill = exists(dir + "/cgroup.kill")
			v2CPUStat = exists(dir + "/cpu.stat")
			v2Freeze = exists(dir + "/cgroup.freeze")
			if t.ctrls != 0 {
				if err := m.enableV2(t.own, dir, t.ctrls.names()); err != nil {
					p.reasons = append(p.reasons, err.Error())
				} else {
					p.v2Ctrls = t.ctrls
				}
			}
		}
	}
	want := limitCtrls
	if !v2CPUStat {
		want |= ctrlCPUAcct // CPU time comes from cpuacct.usage instead
	}
	if !v2Kill || !v2Freeze && m.opts.Freezer != FreezerV2 || m.opts.Freezer == FreezerV1 {
		// Kill freezes before signalling instead, or Freeze freezes
		// with v1's.
		want |= ctrlFreezer
	}
	for _, h := range m.lay.v1 {
		use := h.ctrls & want
		if use == 0 {
			continue
		}
		dir := h.own + "/" + m.parent
		if _, err := mkdir(dir); err != nil {
			p.reasons = append(p.reasons, fmt.Sprintf("%s: create %s: %v", use, dir, err))
			continue
		}
		p.v1 = append(p.v1, v1Parent{ctrls: use, dir: dir})
	}
	var have ctrlSet
	for _, v := range p.v1 {
		have |= v.ctrls
	}
	have = (have | p.v2Ctrls) & limitCtrls
	p.reasons = noteMissing(p.reasons, have, p.pureV2)
	p.mode = Mode{Version: m.lay.version, Controllers: have.names(), Reason: strings.Join(p.reasons, "; ")}
	if p.v2 != "" {
		p.mode.Unified = m.lay.v2.mount
	}
	m.plan = p
	return p
}

// can reports whether limits can be set with controller c.
func (p *plan) can(c ctrlSet) bool {
	if p.v2Ctrls&c != 0 {
		return true
	}
	for _, v := range p.v1 {
		if v.ctrls&c != 0 {
			return true
		}
	}
	return false
}

// why explains why controller c is unavailable.
func (p *plan) why(c ctrlSet) string {
	if r := reasonsFor(p.reasons, c, p.pureV2); len(r) > 0 {
		return strings.Join(r, "; ")
	}
	return p.mode.Reason
}

// enableV2 enables the controllers named in ctrls for the children of own
// and of parent, its child.
func (m *Manager) enableV2(own, parent string, ctrls []string) error {
	err := enableControllers(own, ctrls)
	if errors.Is(err, unix.EBUSY) {
		err = m.moveSelfAndEnable(own, ctrls)
	}
	if err != nil {
		return fmt.Errorf("%s: enable in %s/cgroup.subtree_control: %w", strings.Join(ctrls, ","), own, err)
	}
	if err := enableControllers(parent, ctrls); err != nil {
		return fmt.Errorf("%s: enable in %s/cgroup.subtree_control: %w", strings.Join(ctrls, ","), parent, err)
	}
	return nil
}

// moveSelfAndEnable deals with the "no internal processes" rule: a cgroup
// with processes cannot enable controllers for its children. If the caller is
// the only process in own, it moves itself (the whole thread group) into the
// leaf <own>/<parent>-host, which changes nothing for any other process and
// keeps every limit on own in force, and retries. Other processes are never
// moved: they are not ours to move.
func (m *Manager) moveSelfAndEnable(own string, ctrls []string) error {
	data, err := readFile(own + "/cgroup.procs")
	if err != nil {
		return err
	}
	self := os.Getpid()
	if pids := parsePids(data); len(pids) != 1 || pids[0] != self {
		return fmt.Errorf("other processes share the caller's cgroup, run airlock in a cgroup of its own: %w", unix.EBUSY)
	}
	leaf := own + "/" + m.parent + "-host"
	if _, err := mkdir(leaf); err != nil {
		return fmt.Errorf("create %s: %w", leaf, err)
	}
	if err := writeFile(leaf+"/cgroup.procs", strconv.Itoa(self)); err != nil {
		_ = rmdir(leaf) // best effort: it is empty
		return fmt.Errorf("move the caller into %s: %w", leaf, err)
	}
	if err := enableControllers(own, ctrls); err != nil {
		// Go back to where we were; if that fails we stay in the leaf, which
		// is harmless.
		if writeFile(own+"/cgroup.procs", strconv.Itoa(self)) == nil {
			_ = rmdir(leaf)
		}
		return err
	}
	return nil
}

// enableControllers writes the controllers in ctrls that are not yet enabled
// to dir/cgroup.subtree_control, in one write so that it is all or nothing.
func enableControllers(dir string, ctrls []string) error {
	data, err := readFile(dir + "/cgroup.subtree_control")
	if err != nil {
		return err
	}
	on := strings.Fields(string(data))
	var missing []string
	for _, c := range ctrls {
		if !slices.Contains(on, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return writeFile(dir+"/cgroup.subtree_control", "+"+strings.Join(missing, " +"))
}

// New creates the group name with limits l. The parent directories are
// created first if needed (see Mode).
//
// If requireLimits is set, every nonzero limit must be enforced: New fails
// with a *LimitError naming the controller otherwise, and leaves no directory
// behind. If it is not set, limits that cannot be enforced are skipped;
// Group.Enforced tells which are in force.
//
// New fails with an error matching fs.ErrExist if the group exists.
func (m *Manager) New(name string, l Limits, requireLimits bool) (*Group, error) {
	g, err := m.Make(name, l, requireLimits)
	if err != nil {
		return nil, err
	}
	if err := g.SetLimits(l, requireLimits); err != nil {
		_ = g.removeDirs() // only what Make created; empty, so rmdir works
		_ = g.Close()
		return nil, err
	}
	return g, nil
}

// Make is New without the limits written: the group's directories are
// made, and with requireLimits it fails as New does when a limit of l
// cannot be enforced here, but nothing bounds the group until SetLimits
// writes l. A caller that starts a process of its own in the group before
// then (a sandbox's executor, whose start the writes then do not delay)
// must write them before anything runs there that they are to bound.
func (m *Manager) Make(name string, l Limits, requireLimits bool) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("cgroup %q: %w", name, err)
	}
	if err := l.validate(); err != nil {
		return nil, fmt.Errorf("cgroup %s: %w", name, err)
	}
	p := m.prepare()
	if requireLimits {
		for _, r := range []struct {
			c   ctrlSet
			set bool
		}{{ctrlMemory, l.MemoryBytes > 0}, {ctrlPids, l.Pids > 0}, {ctrlCPU, l.CPUs > 0}} {
			if r.set && !p.can(r.c) {
				return nil, &LimitError{Group: name, Controller: r.c.String(), Err: fmt.Errorf("%s: %w", p.why(r.c), errors.ErrUnsupported)}
			}
		}
	}

	g := &Group{name: name, fd: -1, v2Ctrls: p.v2Ctrls, freezer: m.opts.Freezer}
	ok := false
	defer func() {
		if !ok {
			_ = g.removeDirs() // only what this call created; empty, so rmdir works
			_ = g.Close()
		}
	}()
	if p.v2 != "" {
		dir := p.v2 + "/" + name
		if err := mkdirGroup(p.v2, dir, p.v2Ctrls); err != nil {
			return nil, fmt.Errorf("cgroup %s: create %s: %w", name, dir, err)
		}
		g.v2 = dir
		fd, err := retryEINTR(func() (int, error) {
			return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		})
		if err != nil {
			return nil, fmt.Errorf("cgroup %s: open %s: %w", name, dir, err)
		}
		g.fd = fd
	}
	for _, v := range p.v1 {
		dir := v.dir + "/" + name
		if err := mkdirGroup(v.dir, dir, 0); err != nil {
			return nil, fmt.Errorf("cgroup %s: create %s: %w", name, dir, err)
		}
		g.v1 = append(g.v1, v1Dir{ctrls: v.ctrls, dir: dir})
	}
	ok = true
	return g, nil
}

// mkdirGroupTries bounds how often mkdirGroup re-creates a parent that
// keeps being removed under it.
const mkdirGroupTries = 100

// mkdirGroup creates the group directory dir in parent, re-creating parent
// if something removed it since prepare: RemoveParentIfEmpty, in this
// process or another one using the same parent, once its last group was
// gone. A re-created cgroup2 parent gets ctrls enabled again for its
// groups, as prepare did. The parent can be removed again between its
// mkdir and the group's, so this is a loop.
func mkdirGroup(parent, dir string, ctrls ctrlSet) error {
	var err error
	for range mkdirGroupTries {
		err = unix.Mkdir(dir, 0o755)
		if !errors.Is(err, unix.ENOENT) {
			return err
		}
		if _, err := mkdir(parent); err != nil {
			return err
		}
		if ctrls != 0 {
			if err := enableControllers(parent, ctrls.names()); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%s: enable in %s/cgroup.subtree_control: %w", strings.Join(ctrls.names(), ","), parent, err)
			}
		}
	}
	return err
}

// Open returns the existing group name, for example to garbage-collect it or
// to watch it from another process. It fails with an error matching
// fs.ErrNotExist if no directory of the group exists. Open does not create
// the parent directories.
func (m *Manager) Open(name string) (*Group, error) {
	if err := validName(name); err != nil {
		return nil, fmt.Errorf("cgroup %q: %w", name, err)
	}
	g := &Group{name: name, fd: -1, freezer: m.opts.Freezer}
	for _, h := range m.lay.v1 {
		dir := h.own + "/" + m.parent + "/" + name
		if exists(dir) {
			g.v1 = append(g.v1, v1Dir{ctrls: h.ctrls, dir: dir})
		}
	}
	if t := m.lay.v2; t.mount != "" {
		dir := t.own + "/" + m.parent + "/" + name
		fd, err := retryEINTR(func() (int, error) {
			return unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		})
		switch {
		case err == nil:
			g.v2, g.fd = dir, fd
			for _, c := range []ctrlSet{ctrlMemory, ctrlPids, ctrlCPU} {
				if exists(dir + "/" + c.String() + ".max") {
					g.v2Ctrls |= c
				}
			}
		case !errors.Is(err, unix.ENOENT):
			return nil, fmt.Errorf("cgroup %s: open %s: %w", name, dir, err)
		}
	}
	if g.v2 == "" && len(g.v1) == 0 {
		return nil, fmt.Errorf("cgroup %s: %w", name, fs.ErrNotExist)
	}
	g.enforced = g.readEnforced()
	return g, nil
}

// List returns the names of the existing groups, sorted, including groups
// only partly present (in some hierarchies), so that gc can destroy them.
func (m *Manager) List() ([]string, error) {
	var parents []string
	for _, h := range m.lay.v1 {
		parents = append(parents, h.own+"/"+m.parent)
	}
	if t := m.lay.v2; t.mount != "" {
		parents = append(parents, t.own+"/"+m.parent)
	}
	var names []string
	for _, p := range parents {
		ents, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list cgroups: %w", err)
		}
		for _, e := range ents {
			if e.IsDir() {
				names = append(names, e.Name())
			}
		}
	}
	slices.Sort(names)
	return slices.Compact(names), nil
}

// ListUnified returns the names of the groups that have a directory in the
// cgroup2 tree, sorted: one directory read where List reads one a
// hierarchy. It is List when there is no cgroup2 tree.
func (m *Manager) ListUnified() ([]string, error) {
	t := m.lay.v2
	if t.mount == "" {
		return m.List()
	}
	ents, err := os.ReadDir(t.own + "/" + m.parent)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list cgroups: %w", err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// RemoveIfEmpty removes group name if it holds no process and reports
// whether it is gone: Destroy without the kill and without the wait, and
// without opening the group (Open also reads its limits) or reading
// cgroup.events: rmdir itself fails with EBUSY on a cgroup that holds a
// task. The cgroup2 directory goes first, and nothing else while it holds
// a process: a process started into it (CLONE_INTO_CGROUP) is there before
// it is moved into the v1 directories. A task leaves every hierarchy at
// once as it exits, so the v1 directories are then empty too; one that is
// not (a process moved into v1 only) is left, with no error, to GC.
func (m *Manager) RemoveIfEmpty(name string) (bool, error) {
	if err := validName(name); err != nil {
		return false, fmt.Errorf("cgroup %q: %w", name, err)
	}
	dirs := make([]string, 0, len(m.lay.v1)+1)
	if t := m.lay.v2; t.mount != "" {
		dirs = append(dirs, t.own+"/"+m.parent+"/"+name)
	}
	for _, h := range m.lay.v1 {
		dirs = append(dirs, h.own+"/"+m.parent+"/"+name)
	}
	for _, d := range dirs {
		if err := rmdir(d); errors.Is(err, unix.EBUSY) {
			return false, nil
		} else if err != nil {
			return false, fmt.Errorf("cgroup %s: remove %s: %w", name, d, err)
		}
	}
	return true, nil
}

// RemoveParent removes the parent directories if they are empty (rmdir
// fails on a cgroup that still has groups). The Manager must not be used
// afterwards, nor the parent by any other process.
func (m *Manager) RemoveParent() error { return m.removeParent() }

// RemoveParentIfEmpty removes the parent directories that hold no group
// and reports whether none is left, for a host whose last group just went:
// a parent nobody uses is otherwise left for good when the host ends
// without Backend.Close (a killed host, a test's throwaway state
// directory). The Manager stays usable, in this process and in others
// that share the parent: New re-creates a parent that is gone
// (mkdirGroup). A parent that still holds a group is kept (the kernel
// refuses to remove it, EBUSY), without error.
func (m *Manager) RemoveParentIfEmpty() (bool, error) {
	gone := true
	var errs []error
	for _, d := range m.ParentDirs() {
		switch err := rmdir(d); {
		case err == nil:
		case errors.Is(err, unix.EBUSY), errors.Is(err, unix.ENOTEMPTY):
			gone = false
		default:
			gone = false
			errs = append(errs, fmt.Errorf("cgroup parent: remove %s: %w", d, err))
		}
	}
	return gone, errors.Join(errs...)
}

// ParentDirs returns the parent directory of the groups in every
// hierarchy, whether or not it exists now: the cgroup2 one first.
func (m *Manager) ParentDirs() []string {
	dirs := make([]string, 0, len(m.lay.v1)+1)
	if t := m.lay.v2; t.mount != "" {
		dirs = append(dirs, t.own+"/"+m.parent)
	}
	for _, h := range m.lay.v1 {
		dirs = append(dirs, h.own+"/"+m.parent)
	}
	return dirs
}

func (m *Manager) removeParent() error {
	var errs []error
	for _, h := range m.lay.v1 {
		errs = append(errs, rmdir(h.own+"/"+m.parent))
	}
	if t := m.lay.v2; t.mount != "" {
		errs = append(errs, rmdir(t.own+"/"+m.parent))
	}
	return errors.Join(errs...)
}

// validName rejects names that are not a single path element.
func validName(name string) error {
	switch {
	case name == "":
		return errors.New("empty name")
	case name == ".":
		return errors.New(`name must not be "."`)
	case strings.Contains(name, ".."), strings.ContainsAny(name, "/\x00"):
		return errors.New("name must be a single path element without \"..\"")
	case len(name) > 255:
		return errors.New("name too long")
	}
	return nil
}

// Sweep removes what hosts that are gone left below the caller's own cgroup,
// in every hierarchy: in each directory there whose name match accepts (a
// parent of some Manager, such as another state directory's), every group
// that holds no process, belongs to the calling user and was made at least
// minAge ago, then the directory itself once it holds no group and was
// made at least minAge ago. It returns the directories it removed.
//
// It never kills and never judges a group by anything but the kernel's
// answer: rmdir fails (EBUSY) on a cgroup that holds a task or a group, so a
// running sandbox's group is kept whatever its host. minAge keeps a group
// that a live host made but has not started a process in yet (a sandbox
// being created, between its mkdir and its executor's clone, which takes
// milliseconds): a host of the same parent judges its own groups by their
// id locks (GC) and passes the parent's name to skip. A parent removed
// under a live Manager is made again by its next New (mkdirGroup).
func Sweep(match func(parent string) bool, skip string, minAge time.Duration) ([]string, error) {
	loc, err := located()
	if err != nil {
		return nil, err
	}
	lay := probe(loc)
	owns := make([]string, 0, len(lay.v1)+1)
	if t := lay.v2; t.mount != "" {
		own := t.own
		// A host that moved itself into <own>/<parent>-host (see the
		// package doc) sweeps from <own>.
		if base := path.Base(own); strings.HasSuffix(base, "-host") && match(strings.TrimSuffix(base, "-host")) {
			own = path.Dir(own)
		}
		owns = append(owns, own)
	}
	for _, h := range lay.v1 {
		owns = append(owns, h.own)
	}
	uid := uint32(os.Geteuid())
	before := time.Now().Add(-minAge)
	var removed []string
	var errs []error
	for _, own := range owns {
		ents, err := os.ReadDir(own)
		if err != nil {
			errs = append(errs, fmt.Errorf("sweep cgroups: %w", err))
			continue
		}
		for _, e := range ents {
			name := e.Name()
			if !e.IsDir() || name == skip || !match(name) {
				continue
			}
			parent := own + "/" + name
			groups, err := os.ReadDir(parent)
			if err != nil {
				errs = append(errs, fmt.Errorf("sweep cgroups: %w", err))
				continue
			}
			for _, g := range groups {
				dir := parent + "/" + g.Name()
				if !g.IsDir() || !ownedBefore(dir, uid, before) {
					continue
				}
				if rmdir(dir) == nil {
					removed = append(removed, dir)
				}
			}
			// A parent made less than minAge ago is kept even when
			// empty: its host may be about to make its first group in
			// it (the test packages' hosts, run side by side, each
			// make their own).
			if ownedBefore(parent, uid, before) && rmdir(parent) == nil {
				removed = append(removed, parent)
			}
		}
	}
	return removed, errors.Join(errs...)
}

// ownedBefore reports whether the directory dir belongs to uid and was made
// (or last changed) before t.
func ownedBefore(dir string, uid uint32, t time.Time) bool {
	var st unix.Stat_t
	if unix.Lstat(dir, &st) != nil || st.Uid != uid {
		return false
	}
	changed := max(st.Mtim.Nano(), st.Ctim.Nano())
	return changed < t.UnixNano()
}
