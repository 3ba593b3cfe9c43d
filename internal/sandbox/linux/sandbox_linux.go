package linux

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
)

// Sandbox is a live native sandbox.
type Sandbox struct {
	// Files forwards the file operations, watches, events, disk use and
	// connections to the executor.
	execconn.Files

	b       *Backend
	id      string
	spec    sandbox.Spec
	created time.Time
	slot    *os.File // held uid-range lock (root mode)
	base    uint32   // host uid of root inside, with slot
	idLock  *heldID  // held id lock
	cg      *cgroup.Group
	// cgLimits are the limits makeCgroup made cg for, which limitCgroup
	// writes.
	cgLimits cgroup.Limits
	// background is a sandbox made ahead of demand (sandbox.Background):
	// its cgroup starts at backgroundCPUWeight.
	background bool
	// cpuLater: the cgroup was made without the spec's CPU limit, which
	// applyCPULater sets (cgroup.Limits.CPULater).
	cpuLater bool
	proc     *proc // the executor
	conn     *execconn.Conn
	layers   []string
	files    string // host files shown inside (trust store), removed at teardown
	// layerLocks hold the image layers' shared locks (lockLayers) until
	// teardown.
	layerLocks []*os.File
	// gvisor is a gvisor sandbox's state directory (bundle, runsc's
	// state), and runsc its runsc binary; empty for a native sandbox.
	gvisor, runsc string
	// cow takes a gvisor sandbox's cow workspace checkpoints on the host,
	// from the host's overlay and its upper layer (gvisorCOW); nil
	// otherwise.
	cow *gvisorCOW

	done     chan struct{} // closed when the sandbox is gone
	doneOnce sync.Once
	watchers sync.WaitGroup

	mu        sync.Mutex
	destroyed bool // guarded by mu
	// frozen is guarded by mu: Freeze stopped the sandbox's processes and
	// no Thaw came since.
	frozen bool
	// oomKills is the cgroup's OOM kill count read by teardown before it
	// removed the cgroup (0 if unread); guarded by mu.
	oomKills int64
	// bound: the uid slot records the cgroup2 group (uidAllocator.bind);
	// detachOK: the id was made by Create, not given. Both set by Create.
	bound, detachOK bool
}

var (
	_ sandbox.Sandbox      = (*Sandbox)(nil)
	_ sandbox.Measurer     = (*Sandbox)(nil)
	_ sandbox.DiskMeasurer = (*Sandbox)(nil)
	_ sandbox.Checkpointer = (*Sandbox)(nil)
	_ sandbox.Connector    = (*Sandbox)(nil)
	_ sandbox.Prioritizer  = (*Sandbox)(nil)
	_ sandbox.EventSource  = (*Sandbox)(nil)
	_ sandbox.Freezer      = (*Sandbox)(nil)
)

// backgroundCPUWeight is the cpu.weight of a sandbox made ahead of
// demand: 1 against the default 100 of sandboxes in use, so that while
// one of them wants the CPU, its executor's start and its template's
// preparation wait.
const backgroundCPUWeight = 1

// Foreground implements sandbox.Prioritizer: the sandbox's cgroup gets the
// default CPU weight of sandboxes in use.
func (s *Sandbox) Foreground() error {
	if !s.background || s.cg == nil {
		return nil
	}
	if err := s.cg.SetCPUWeight(cgroup.DefaultCPUWeight); err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("sandbox %s: foreground: %w", s.id, err)
	}
	return nil
}

// makeCgroup makes the sandbox's cgroup, or records that it has none
// ("cgroup:none") where cgroups are not required. With lateLimits the
// group's limits are not written yet: limitCgroup writes them, and must
// before anything of the sandbox's runs (only its executor's own start may
// come before).
func (s *Sandbox) makeCgroup(lateLimits bool) error {
	l := s.spec.Limits
	want := l.MemoryBytes > 0 || l.Pids > 0 || l.CPUs > 0
	m, err := s.b.cgroups()
	if err != nil {
		if want && l.RequireHard {
			if !s.b.root {
				return fmt.Errorf("resource limits required but cgroups are unavailable (%w): %s", err, rootlessLimitsHint)
			}
			return fmt.Errorf("resource limits required but cgroups are unavailable: %w", err)
		}
		s.layers = append(s.layers, "cgroup:none")
		return nil
	}
	pids := l.Pids
	if pids > 0 {
		pids += pidsReserve
		if s.spec.Runtime == sandbox.RuntimeGVisor {
			pids = l.Pids*gvisorPidsPerTask + gvisorPidsReserve
		}
	}
	weight := 0
	if s.background {
		weight = backgroundCPUWeight
	}
	// A gvisor sandbox's CPU limit is its work's, not gVisor's boot's
	// (runsc, its gofer and sentry side by side, about 1.5 CPUs): the
	// group starts without it, and applyCPULater sets it at the
	// executor's Ready, before Create returns.
	later := l.CPUs > 0 && s.spec.Runtime == sandbox.RuntimeGVisor && !s.b.cpuAtBoot
	s.cgLimits = cgroup.Limits{MemoryBytes: l.MemoryBytes, Pids: pids, CPUs: l.CPUs, CPULater: later, CPUWeight: weight}
	required := want && l.RequireHard
	g, err := m.Make(s.id, s.cgLimits, required)
	if err != nil {
		if required {
			return s.limitsErr(err)
		}
		s.layers = append(s.layers, "cgroup:none")
		return nil
	}
	s.cg = g
	s.cpuLater = later
	if lateLimits {
		return nil
	}
	return s.limitCgroup()
}

// limitsErr is the error of a required limit the group cannot have.
func (s *Sandbox) limitsErr(err error) error {
	if !s.b.root {
		return fmt.Errorf("resource limits required but cgroups cannot enforce them for an unprivileged user here (%w): %s", err, rootlessLimitsHint)
	}
	return fmt.Errorf("resource limits required: %w", err)
}

// limitCgroup writes the limits of the group makeCgroup made (none: a
// no-op) and records which are in force. A required limit that cannot be
// written fails it; the caller tears the sandbox down, its group with it.
func (s *Sandbox) limitCgroup() error {
	g := s.cg
	if g == nil {
		return nil
	}
	l := s.spec.Limits
	required := (l.MemoryBytes > 0 || l.Pids > 0 || l.CPUs > 0) && l.RequireHard
	if err := g.SetLimits(s.cgLimits, required); err != nil {
		return s.limitsErr(err)
	}
	m, err := s.b.cgroups()
	if err != nil {
		return err // not reached: makeCgroup had it
	}
	md := m.Mode()
	for _, e := range g.Enforced() {
		s.layers = append(s.layers, "cgroup:"+md.Version+":"+e)
	}
	if !s.b.root && len(g.Enforced()) == 0 && g.CgroupFD() < 0 {
		// A group in no hierarchy (rootless without a delegated cgroup):
		// it limits and tracks nothing.
		s.layers = append(s.layers, "cgroup:none")
	}
	return nil
}

// applyCPULater sets the CPU limit makeCgroup left for later (a gvisor
// sandbox's, once its executor is Ready), and lists it in the sandbox's
// layers where makeCgroup would have. Where there is no cpu controller
// and the limits are not required it is skipped, as New skips it; any
// other failure is Create's: the sandbox must not run without the limit.
func (s *Sandbox) applyCPULater() error {
	if !s.cpuLater {
		return nil
	}
	if err := s.cg.SetCPUs(s.spec.Limits.CPUs); err != nil {
		if errors.Is(err, errors.ErrUnsupported) && !s.spec.Limits.RequireHard {
			return nil
		}
		return fmt.Errorf("apply the cpu limit after gVisor's boot: %w", err)
	}
	s.cpuLater = false
	m, err := s.b.cgroups()
	if err != nil {
		return err // not reached: the group came from it
	}
	// After the group's other limits, before the executor's layers.
	i := 0
	for j, l := range s.layers {
		if strings.HasPrefix(l, "cgroup:") {
			i = j + 1
		}
	}
	s.layers = slices.Insert(s.layers, i, "cgroup:"+m.Mode().Version+":cpu")
	return nil
}

func (s *Sandbox) cgroupFD() int {
	if s.cg == nil {
		return -1
	}
	return s.cg.CgroupFD()
}

// watch ends the sandbox when its executor dies or its TTL passes.
func (s *Sandbox) watch() {
	s.watchers.Add(1)
	go func() {
		defer s.watchers.Done()
		var ttl <-chan time.Time
		if s.spec.TTL > 0 {
			t := time.NewTimer(s.spec.TTL)
			defer t.Stop()
			ttl = t.C
		}
		select {
		case <-s.proc.done:
		case <-s.conn.Done():
		case <-ttl:
			s.b.log.Info("sandbox ttl reached", "sandbox_id", s.id)
		case <-s.done:
			return
		}
		s.teardown()
	}()
}

// ID returns the sandbox's id.
func (s *Sandbox) ID() string { return s.id }

// Done is closed when the sandbox is gone.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Info describes the sandbox.
func (s *Sandbox) Info() sandbox.Info {
	backend := "linux"
	if s.spec.Runtime == sandbox.RuntimeGVisor {
		backend = sandbox.RuntimeGVisor
	}
	return sandbox.Info{ID: s.id, Backend: backend, Created: s.created, Workspace: s.spec.Workspace, Layers: append([]string(nil), s.layers...)}
}

// Destroy kills everything in the sandbox and removes what it left.
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.teardown()
	s.watchers.Wait()
	return nil
}

// DestroyDetached is Destroy for a host about to exit (the front end's
// `sandbox run`): it kills every process in the sandbox before it returns,
// as Destroy does, but does not wait for them to be gone, nor remove the
// cgroup: a goroutine does once it is empty (Backend.removeLater), or, if
// the host has exited by then, the next run's Backend.Prepare (or GC).
// The uid range stays taken while the cgroup holds a process (the slot's
// record, uidAllocator.bind), so its host ids go to no other sandbox before
// the last of these processes has exited.
//
// An image's layers are unlocked when it returns (release): a garbage
// collection of the image store may then remove them while the killed
// processes are still dying, which none of them can see, as none runs
// another instruction of its own once its SIGKILL is pending; the mounts
// that still hold the layers go with the last of them.
//
// Where that guarantee or the kill cannot be had without waiting (no uid
// range or no cgroup2 group bound to it, a frozen or gVisor sandbox, an id
// given by the caller, no cgroup.kill) it is Destroy.
func (s *Sandbox) DestroyDetached(ctx context.Context) error {
	s.teardownMode(true)
	s.watchers.Wait()
	return nil
}

// teardown is idempotent and safe from any goroutine.
func (s *Sandbox) teardown() { s.teardownMode(false) }

// detachable reports whether teardownMode may leave the processes it
// killed to die after it returns (see DestroyDetached).
//
// Preconditions: s.mu held.
func (s *Sandbox) detachable() bool {
	return s.bound && s.detachOK && !s.frozen && s.proc != nil && s.cg != nil &&
		s.spec.Runtime != sandbox.RuntimeGVisor
}

// teardownMode is teardown; with detach it does not wait for the
// sandbox's processes to exit when detachable allows.
func (s *Sandbox) teardownMode(detach bool) {
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return
	}
	s.destroyed = true
	detach = detach && s.detachable()
	s.mu.Unlock()
	if detach {
		// Every process in the cgroup has SIGKILL pending once the
		// write returns; without cgroup.kill, kill and wait below.
		if err := s.cg.KillNoWait(); err == nil {
			s.teardownDetached()
			return
		}
	}
	tr := newTracer("teardown")
	defer tr.done()
	gone := s.cg == nil // the sandbox's group is gone (groupGone)
	// Kill first, so the executor cannot act on a half-closed connection.
	// Killing PID 1 ends the PID namespace: the kernel kills every process
	// in it and PID 1 is not reaped before they are all gone. The cgroup is
	// the proof: Destroy kills whatever it still holds before removing it.
	if s.proc != nil {
		_ = s.proc.kill()
	}
	s.mu.Lock()
	frozen := s.frozen
	s.mu.Unlock()
	if frozen && s.cg != nil {
		// A task the v1 freezer holds dies only once thawed; the
		// executor's SIGKILL is pending, and its end kills the rest.
		_ = s.cg.Thaw()
	}
	tr.mark("kill")
	if s.proc != nil {
		<-s.proc.done
		s.proc.close()
	}
	tr.mark("exited")
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.teardownGVisor()
	if s.cg != nil {
		if st, err := s.cg.Counters(); err == nil {
			s.mu.Lock()
			s.oomKills = int64(st.OOMKills)
			s.mu.Unlock()
		}
		if err := s.cg.Destroy(); err != nil {
			// Its processes are dying still: try again off this path.
			s.b.log.Warn("remove sandbox cgroup: trying again", "sandbox_id", s.id, "err", err)
			s.b.removeLater(s.id, s.cg)
		} else {
			_ = s.cg.Close()
			gone = true
		}
	}
	tr.mark("cgdestroy")
	s.release()
	if gone {
		s.b.groupGone()
	}
}

// release ends a teardown, full or detached: the host's files of the
// sandbox go, and its layer locks, uid slot and id lock are released.
func (s *Sandbox) release() {
	if s.files != "" {
		_ = os.RemoveAll(s.files)
	}
	for _, f := range s.layerLocks {
		f.Close()
	}
	if s.slot != nil {
		s.b.uids.release(s.slot, s.base)
	}
	if s.idLock != nil {
		s.b.ids.release(s.idLock)
	}
	s.b.own(s.id, false)
	s.doneOnce.Do(func() { close(s.done) })
}

// teardownDetached is the rest of a detached teardown, after cgroup.kill:
// what the host holds is released, the cgroup is left to be removed once
// empty, and the uid slot's lock is dropped with the cgroup bound to it.
func (s *Sandbox) teardownDetached() {
	tr := newTracer("teardown")
	defer tr.done()
	_ = s.proc.kill()
	tr.mark("kill")
	s.proc.close()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.release()
	// The group is removed once its processes are gone: by a goroutine
	// of a host that goes on, else by the next run's Prepare or GC.
	s.b.removeLater(s.id, s.cg)
	tr.mark("released")
}

func (s *Sandbox) alive() error {
	select {
	case <-s.done:
		return fmt.Errorf("sandbox %s: %w", s.id, sandbox.ErrLost)
	default:
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.frozen {
		return fmt.Errorf("sandbox %s: %w: thaw it first", s.id, sandbox.ErrFrozen)
	}
	return nil
}

// FreezeKind implements sandbox.Freezer: the sandbox's cgroup's freezer.
// A gVisor sandbox is not frozen: its cgroup holds runsc's sentry and
// gofer, and freezing them from outside (or runsc pause) has not been
// verified to keep the sandbox's connections and clocks sound; its pause
// keeps files only, and says why.
func (s *Sandbox) FreezeKind() (string, error) {
	if s.gvisor != "" {
		return "", fmt.Errorf("sandbox %s: a gvisor sandbox is not frozen (its sentry's freeze is not verified): %w", s.id, errors.ErrUnsupported)
	}
	if s.cg == nil {
		return "", fmt.Errorf("sandbox %s: cannot freeze: it has no cgroup (%s): %w", s.id, strings.Join(s.layers, ","), errors.ErrUnsupported)
	}
	k := s.cg.Freezer()
	if k == "" {
		return "", fmt.Errorf("sandbox %s: %w: %w", s.id, cgroup.ErrNoFreezer, errors.ErrUnsupported)
	}
	return "cgroup-" + k, nil
}

// Freeze implements sandbox.Freezer with the sandbox's cgroup's freezer:
// every process of the sandbox stops, its executor's too, so the host
// neither asks it anything nor waits for it until Thaw.
func (s *Sandbox) Freeze(ctx context.Context) error {
	if _, err := s.FreezeKind(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-s.done:
		return fmt.Errorf("sandbox %s: %w", s.id, sandbox.ErrLost)
	default:
	}
	if s.destroyed {
		return fmt.Errorf("sandbox %s: %w", s.id, sandbox.ErrLost)
	}
	if err := s.cg.Freeze(ctx); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	s.frozen = true
	return nil
}

// Thaw implements sandbox.Freezer.
func (s *Sandbox) Thaw(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.destroyed {
		return fmt.Errorf("sandbox %s: %w", s.id, sandbox.ErrLost)
	}
	if s.cg == nil {
		return nil
	}
	if err := s.cg.Thaw(); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	s.frozen = false
	return nil
}

// Preopen opens the cgroup counter files that Start and Wait read through
// descriptors kept open, which the sandbox's first command would otherwise
// open on its caller's time (four opens on cgroup v1). A pool calls it on
// the sandboxes it keeps idle (pool.firstUse).
func (s *Sandbox) Preopen() {
	if s.cg != nil {
		_, _ = s.cg.Counters() // a torn-down group's are closed: an error
	}
}

// Start runs a command.
func (s *Sandbox) Start(ctx context.Context, c sandbox.Command) (sandbox.Process, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	req := execproto.Request{
		Argv: c.Argv, Env: append(append([]string{}, s.spec.Env...), c.Env...), Dir: c.Dir,
		User: c.User, TTY: c.TTY, Rows: c.Rows, Cols: c.Cols,
		TimeoutMS: c.Timeout.Milliseconds(), MaxOutput: c.MaxOutput, Fingerprint: c.Fingerprint,
	}
	if req.User == "" {
		req.User = s.spec.User
	}
	if req.Dir == "" {
		req.Dir = s.spec.Dir
	}
	if c.Timeout > 0 && req.TimeoutMS == 0 {
		req.TimeoutMS = 1
	}
	if c.Bulk {
		req.Window, req.ChunkSize = execproto.BulkWindow, execproto.BulkChunkSize
	}
	// Read before the executor is asked to fork, not while it does: a
	// fork bomb fills the pids limit within milliseconds, and a host
	// goroutine descheduled that long (a loaded machine) would count its
	// tasks and hits as there before (atPidsLimit, Wait), and report the
	// bomb's end as a plain exit.
	tr := newTracer("run")
	var before cgroup.Stats
	if s.cg != nil {
		before, _ = s.cg.Counters()
	}
	tr.mark("counters")
	p, err := s.conn.Start(req, c.Stdin, c.Stdout, c.Stderr)
	if err != nil {
		return nil, err
	}
	tr.mark("sent")
	proc := &process{s: s, p: p, argv0: c.Argv[0], before: before, tr: tr}
	if s.cg != nil {
		// A timer, not a goroutine: a command shorter than limitPoll, as
		// most tool calls are, costs no goroutine and no wake-up.
		proc.mu.Lock()
		proc.poll = time.AfterFunc(limitPoll, proc.checkLimits)
		proc.mu.Unlock()
	}
	return proc, nil
}

// process wraps a command to turn cgroup events into outcomes.
type process struct {
	s      *Sandbox
	p      *execconn.Process
	argv0  string
	before cgroup.Stats
	tr     *tracer // AIRLOCK_TRACE: Start to the result

	mu      sync.Mutex
	poll    *time.Timer     // guarded by mu: runs checkLimits every limitPoll
	stopped bool            // guarded by mu: the command ended; no more checks
	forced  sandbox.Outcome // guarded by mu: a limit checkLimits acted on
}

// pidsReserve is how many tasks the sandbox's cgroup allows beyond
// Limits.Pids: room for the executor's own threads when the commands have
// used all theirs (RLIMIT_NPROC stops them at Pids), so a fork bomb cannot
// starve PID 1 of the thread it needs to answer the host.
const pidsReserve = 64

// limitPoll is how often a running command's cgroup counters are read.
const limitPoll = 50 * time.Millisecond

// checkLimits ends the command's tree as soon as the sandbox hits its pids
// or memory limit (a fork bomb stuck at pids.max never exits by itself), and
// otherwise looks again after limitPoll. It holds mu throughout, so once Wait
// has set stopped, no check is halfway through.
func (p *process) checkLimits() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	select {
	case <-p.p.Done(): // ended; its Wait may never come
		return
	default:
	}
	st, err := p.s.cg.Counters()
	var o sandbox.Outcome
	switch {
	case err != nil:
	case st.OOMKills > p.before.OOMKills:
		o = sandbox.OutcomeOOM
	case st.PidsMaxHits > p.before.PidsMaxHits, p.atPidsLimit(st):
		// Every task counts, the executor's few threads included, as
		// the limit always has; RLIMIT_NPROC makes forks fail there.
		o = sandbox.OutcomePidsLimit
	}
	if o == "" {
		p.poll.Reset(limitPoll)
		return
	}
	p.forced = o
	_ = p.p.Cancel()
}

func (p *process) Signal(sig unix.Signal) error { return p.p.Signal(sig) }

func (p *process) Resize(rows, cols uint16) error { return p.p.Resize(rows, cols) }

func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	r, err := p.p.Wait(ctx)
	p.tr.mark("result")
	p.tr.done()
	p.mu.Lock()
	p.stopped = true
	if p.poll != nil {
		p.poll.Stop()
	}
	p.mu.Unlock()
	res := sandbox.Result{
		Outcome: sandbox.Outcome(r.Outcome), ExitCode: r.ExitCode, Signal: r.Signal, Fingerprint: r.Fingerprint, NotStarted: r.NotStarted,
		Usage: sandbox.Usage{
			Wall:   time.Duration(r.WallMS) * time.Millisecond,
			CPU:    time.Duration(r.UserMS+r.SystemMS) * time.Millisecond,
			MaxRSS: r.MaxRSSKB << 10,
		},
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrLost) {
			res.Outcome, res.Message = sandbox.OutcomeLost, "sandbox lost: "+err.Error()
			if p.s.gvisor != "" && p.s.oomEnded(p.before) {
				// gVisor: the host's OOM killer ended the sentry at the
				// memory limit, and the sandbox with it. The command met
				// the limit, as natively; the sandbox is gone all the same.
				res.Outcome = sandbox.OutcomeOOM
				res.Message = p.s.explain(res) + "; the gvisor sandbox ended with it"
			}
			return res, nil
		}
		return res, err
	}
	if r.Outcome == "" && r.Error != "" {
		// The command never started (an unknown user, say): an error, not
		// a result that looks like an exit.
		return res, fmt.Errorf("sandbox %s: start %.40q: %s", p.s.id, p.argv0, r.Error)
	}
	if p.s.cg != nil {
		if st, err := p.s.cg.Counters(); err == nil {
			res.Usage.MemoryPeak = st.MemoryPeak
			p.mu.Lock()
			forced := p.forced
			p.mu.Unlock()
			killed := res.Outcome == sandbox.OutcomeSignaled || res.Outcome == sandbox.OutcomeExited && res.ExitCode != 0
			switch {
			case forced != "":
				res.Outcome = forced
			case killed && st.OOMKills > p.before.OOMKills:
				res.Outcome = sandbox.OutcomeOOM
			case killed && (st.PidsMaxHits > p.before.PidsMaxHits || p.atPidsLimit(st)):
				// Natively the commands' forks fail at RLIMIT_NPROC,
				// below pids.max, which counts no hit: a shell that gives
				// up on a failed fork ends before checkLimits' next look,
				// its tree still holding every task (atPidsLimit).
				res.Outcome = sandbox.OutcomePidsLimit
			}
		}
	}
	if res.Outcome == sandbox.OutcomePidsLimit {
		p.drainPids()
	}
	res.Message = p.s.explain(res)
	if res.Message == "" && res.NotStarted != "" {
		res.Message = execconn.NotStartedMessage(p.argv0, res.NotStarted, r.Errno)
	}
	return res, nil
}

// oomEnded reports whether the sandbox's cgroup counted an OOM kill since
// before, once the sandbox is gone (teardown reads the count before it
// removes the cgroup); it waits for the teardown a bounded time.
func (s *Sandbox) oomEnded(before cgroup.Stats) bool {
	if s.cg == nil {
		return false
	}
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.oomKills > int64(before.OOMKills)
}

// atPidsLimit reports whether the sandbox holds Limits.Pids tasks (every
// task counts, the executor's few threads included, as the limit always
// has; RLIMIT_NPROC makes the commands' forks fail there) and did not when
// this command started.
func (p *process) atPidsLimit(st cgroup.Stats) bool {
	if p.s.gvisor != "" {
		// The host's count is runsc's tasks too; the executor reports
		// the commands' limit itself (execproto.Setup.Pids).
		return false
	}
	l := p.s.spec.Limits.Pids
	return l > 0 && st.Pids >= l && p.before.Pids < l
}

// drainPids waits, briefly, until the tasks of a tree killed at the pids
// limit are gone, so that the next command starts below the limit.
func (p *process) drainPids() {
	l := p.s.spec.Limits.Pids
	if p.s.cg == nil || l <= 0 || p.s.gvisor != "" { // gVisor: the executor drained its group
		return
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		st, err := p.s.cg.Counters()
		if err != nil || st.Pids < l {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// explain says in one line why airlock ended a command.
func (s *Sandbox) explain(r sandbox.Result) string {
	l := s.spec.Limits
	switch r.Outcome {
	case sandbox.OutcomeTimeout:
		return "killed: command timeout exceeded"
	case sandbox.OutcomeOOM:
		return "killed: memory limit " + sandbox.FormatSize(l.MemoryBytes) + " exceeded"
	case sandbox.OutcomePidsLimit:
		return fmt.Sprintf("killed: process limit %d reached", l.Pids)
	case sandbox.OutcomeOutputLimit:
		return "killed: output limit exceeded"
	case sandbox.OutcomeDiskFull:
		return "disk limit " + sandbox.FormatSize(l.DiskBytes) + " reached"
	case sandbox.OutcomeLost:
		return "sandbox lost"
	}
	return ""
}

// Checkpoint implements sandbox.Checkpointer: the executor walks
// /workspace (in a cow workspace, the overlay's upper layer alone), or with
// req.Root the root's upper layer, and streams what changed since the
// baseline req.Since.
func (s *Sandbox) Checkpoint(ctx context.Context, req sandbox.CheckpointRequest, w io.Writer) (sandbox.CheckpointResult, error) {
	if err := s.alive(); err != nil {
		return sandbox.CheckpointResult{}, err
	}
	tree := execproto.TreeWorkspace
	if req.Root {
		tree = execproto.TreeRoot
	}
	if s.cow != nil && !req.Root {
		return s.cow.checkpoint(ctx, s.id, req, s.conn.SpecialFiles, w)
	}
	r, err := s.conn.Checkpoint(ctx, tree, req.Since, req.MarkOnly, w)
	if err != nil {
		return sandbox.CheckpointResult{}, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	return sandbox.CheckpointResult{Baseline: r.Baseline, Full: r.Full, Entries: r.Entries, Bytes: r.Bytes, Walked: r.Walked}, nil
}
