package linux

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor/vfork"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
)

// Config configures the native backend.
type Config struct {
	// Executor is the path of the airlock-exec binary.
	Executor string
	// StateDir holds the backend's host state (sandbox id locks, trust-store files). It is
	// created if missing.
	StateDir string
	// UIDSlotDir is where root mode locks host uid ranges. It is one
	// directory for the whole machine, so that ranges stay distinct across
	// every AIRLOCK_HOME; default DefaultUIDSlotDir.
	UIDSlotDir string
	// Logger receives lifecycle logs; nil discards them.
	Logger *slog.Logger
	// Spawner starts sandboxes through a small helper process
	// (`airlock-exec spawn`, started on first use) instead of forking this
	// one. A long-running host wants it: a fork that makes a user
	// namespace copies the parent's page tables and holds its memory map
	// locked meanwhile, which stalls every thread of a large process. A
	// short-lived command line is small, and forks itself faster than it
	// would start a helper.
	Spawner bool
	// Runsc is the runsc binary of the gvisor runtime; empty means
	// $AIRLOCK_RUNSC, else runsc from PATH.
	Runsc string
	// RunscPlatform is the gVisor platform runsc runs sandboxes on
	// (--platform): "" chooses systrap where the runsc offers it, else kvm
	// where /dev/kvm opens, else ptrace (Backend.Runsc). Debian 12's runsc
	// (20221219) has ptrace and kvm; newer ones have systrap
	// (scripts/runsc.sh builds one; docs/gvisor.md).
	RunscPlatform string
	// Freezer forces the cgroup freezer a sandbox's Freeze uses:
	// cgroup.FreezerV2 (cgroup.freeze) or cgroup.FreezerV1 (the v1 freezer
	// controller); "" uses cgroup2's where it has one, else v1's.
	Freezer string
}

// DefaultUIDSlotDir holds root mode's uid-range locks: on a tmpfs that a
// reboot clears, like the locks themselves.
const DefaultUIDSlotDir = "/run/airlock/uid-slots"

// Backend creates sandboxes with Linux namespaces, cgroups, seccomp and
// Landlock.
type Backend struct {
	cfg       Config
	log       *slog.Logger
	root      bool
	uids      *uidAllocator // root mode: machine-wide uid ranges
	ids       *idLocks      // this home's live sandboxes
	spawner   spawner
	mu        sync.Mutex
	cg        *cgroup.Manager // guarded by mu: created on first use
	cgErr     error           // guarded by mu
	cgOnce    bool            // guarded by mu
	idmaps    idmapCache
	runscOnce sync.Once // Runsc: the runsc binary and its platform
	runsc     Runsc
	runscErr  error
	// mine holds the ids of this backend's sandboxes from when Create
	// holds the id lock to the end of teardown; GC need not ask the slot
	// locks about them. Guarded by mu.
	mine map[string]bool
	// idle is the timer of the planned removal of the cgroup parent,
	// nil when none is planned. Guarded by mu.
	idle *time.Timer
	// janitors counts the groups whose removal a teardown left to a
	// goroutine (removeLater); Close waits for them.
	janitors sync.WaitGroup
	// forkOnly and writeMaps are for tests: start every executor with
	// syscall.ForkExec (the maps written before its exec), and write a
	// late-ids executor's maps with writeMaps instead of idMaps.write.
	forkOnly  bool
	writeMaps func(pid, pidfd int, m idMaps) error
	// editSpawn is for tests: it changes a late-ids Spawn request (its
	// maps) before the spawner gets it.
	editSpawn func(*execproto.Spawn)
	// editTasks is for tests: it changes the v1 tasks descriptors an
	// executor is given to join before its exec.
	editTasks func(fds []int)
	// cpuAtBoot is for benchmarks: a gvisor sandbox's cgroup has its CPU
	// limit from the start, gVisor's boot included (as before
	// cgroup.Limits.CPULater).
	cpuAtBoot bool
	// failLate is for tests: its error fails reserveLate, after the
	// executor of pid started.
	failLate func(pid int) error
	// afterStart runs once, after the next executor's clone (OnStart);
	// guarded by mu.
	afterStart func()
}

var _ sandbox.Backend = (*Backend)(nil)

// New returns a backend. It checks the executor binary but creates nothing.
func New(cfg Config) (*Backend, error) {
	if cfg.Executor == "" {
		return nil, errors.New("linux backend: no executor binary configured")
	}
	if fi, err := os.Stat(cfg.Executor); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("linux backend: executor %s is missing or not a file", cfg.Executor)
	}
	// Processes start in /, and the spawner runs there.
	exe, err := filepath.Abs(cfg.Executor)
	if err != nil {
		return nil, fmt.Errorf("linux backend: executor: %w", err)
	}
	cfg.Executor = exe
	if p := cfg.RunscPlatform; p != "" && strings.Trim(p, "abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		return nil, fmt.Errorf("linux backend: runsc platform %.40q: want a platform's name (ptrace, systrap, kvm)", p)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("linux backend: no state directory configured")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	root := os.Geteuid() == 0
	slots := cfg.UIDSlotDir
	if slots == "" {
		slots = DefaultUIDSlotDir
	}
	return &Backend{
		cfg: cfg, log: log, root: root, uids: &uidAllocator{dir: slots},
		ids: &idLocks{dir: filepath.Join(cfg.StateDir, "ids")},
	}, nil
}

// Close releases what the backend keeps on the host between sandboxes: it
// stops its spawner (ending the sandboxes it started), and removes its
// cgroup parent if no group is left in it, once the groups teardowns left
// to a goroutine are gone (removeLater, a minute at most). Call it only
// when no process uses the backend's state directory any more (tests,
// uninstall): a concurrent Create of another process would lose the
// parent it made.
func (b *Backend) Close() error {
	b.idmaps.close()
	b.spawner.mu.Lock()
	b.spawner.stop()
	b.spawner.mu.Unlock()
	b.janitors.Wait()
	b.mu.Lock()
	if b.idle != nil {
		b.idle.Stop()
		b.idle = nil
	}
	b.mu.Unlock()
	m, err := b.cgroups()
	if err != nil {
		return nil
	}
	return m.RemoveParent()
}

// parentIdle is how long a backend waits, once its last sandbox is gone,
// before it removes its cgroup parent (groupGone): long enough that a host
// that makes one sandbox after another does not make the parent again
// for each, short enough that a test or a script's throwaway home leaves
// nothing behind.
const parentIdle = 2 * time.Second

// groupRetry bounds how long removeLater keeps trying to remove a group.
const groupRetry = time.Minute

// sweepGrace is how old an empty group of another state directory must
// be for GC to remove it (cgroup.Sweep): far longer than the milliseconds
// between a group's mkdir and its executor's clone in Create.
const sweepGrace = 10 * time.Minute

// groupGone follows the removal of a sandbox's group: when the backend has
// no sandbox left, it plans the removal of its cgroup parent once it has
// been idle parentIdle, off the teardown's path (a plan already made
// starts again). A parent nobody removes outlives its state directory (a
// test's, a script's home) and its host (nothing calls Close on a killed
// one): it was the cgroup tree's leak. A sandbox made meanwhile keeps the
// parent, and a Create that races the rmdir makes the parent again
// (cgroup.Manager.RemoveParentIfEmpty).
func (b *Backend) groupGone() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.mine) > 0 || !b.cgOnce || b.cg == nil {
		return
	}
	if b.idle != nil {
		b.idle.Reset(parentIdle)
		return
	}
	b.idle = time.AfterFunc(parentIdle, func() {
		b.mu.Lock()
		b.idle = nil
		idle := len(b.mine) == 0
		m := b.cg
		b.mu.Unlock()
		if idle {
			_, _ = m.RemoveParentIfEmpty()
		}
	})
}

// removeLater removes the group g of sandbox id off the teardown's path,
// for a teardown that could not (its processes were still dying after
// Destroy's 2 seconds, or it did not wait for them: DestroyDetached): it
// tries again, killing what is left, for up to groupRetry, then closes g.
// A group still there after that (a task stuck in the kernel) is GC's.
func (b *Backend) removeLater(id string, g *cgroup.Group) {
	b.janitors.Add(1)
	go func() {
		defer b.janitors.Done()
		defer g.Close()
		deadline := time.Now().Add(groupRetry)
		for wait := 10 * time.Millisecond; ; wait = min(2*wait, time.Second) {
			err := g.Destroy()
			if err == nil {
				b.groupGone()
				return
			}
			if time.Now().After(deadline) {
				b.log.Warn("remove sandbox cgroup: left to gc", "sandbox_id", id, "err", err)
				return
			}
			time.Sleep(wait)
		}
	}()
}

// Forget removes what sandboxes of state directory stateDir left on the
// host once their processes are gone: their cgroups (Backend.GC), the
// cgroup parent (Backend.Close) and the id locks. It waits up to 5 seconds
// for processes still dying (a killed host's sandboxes). Call it only when
// no process uses stateDir any more: tests, uninstalling.
func Forget(stateDir string) error {
	b := &Backend{cfg: Config{StateDir: stateDir}, log: slog.New(slog.DiscardHandler), ids: &idLocks{dir: filepath.Join(stateDir, "ids")}}
	var err error
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err = b.GC()
		m, merr := b.cgroups()
		if merr != nil {
			break
		}
		if left, lerr := m.List(); lerr != nil || len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	b.ids.forget()
	return errors.Join(err, b.Close())
}

// CgroupParent names the cgroup, under the host's own, that holds the groups
// of the sandboxes of one state directory (one AIRLOCK_HOME). Each state
// directory has its own, so GC, which sees only its own uid slots, never
// judges another home's sandboxes, such as one just being created.
func CgroupParent(stateDir string) string {
	abs, err := filepath.Abs(stateDir)
	if err != nil {
		abs = stateDir
	}
	sum := sha256.Sum256([]byte(abs))
	return "airlock-" + hex.EncodeToString(sum[:6])
}

// isCgroupParent reports whether name is a CgroupParent name.
func isCgroupParent(name string) bool {
	hash, ok := strings.CutPrefix(name, "airlock-")
	return ok && len(hash) == 12 && strings.Trim(hash, "0123456789abcdef") == ""
}

// own marks id as one of this backend's sandboxes (see Backend.mine), or
// forgets it.
func (b *Backend) own(id string, yes bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if yes {
		if b.mine == nil {
			b.mine = map[string]bool{}
		}
		b.mine[id] = true
	} else {
		delete(b.mine, id)
	}
}

// OnStart makes f run once, on Create's goroutine, right after the next
// sandbox's executor has started (its clone and exec done, its Go start
// under way) and before Create waits for it: work that need not come
// before the sandbox exists can wait for it and run while the executor
// starts, off the critical path (the front end's reap of what earlier
// runs left). f must not block; nil clears it.
func (b *Backend) OnStart(f func()) {
	b.mu.Lock()
	b.afterStart = f
	b.mu.Unlock()
}

// started runs what OnStart set, once.
func (b *Backend) started() {
	b.mu.Lock()
	f := b.afterStart
	b.afterStart = nil
	b.mu.Unlock()
	if f != nil {
		f()
	}
}

// Prepare does the backend's setup for its first sandbox now (it finds
// the cgroup hierarchies, this state directory's parent groups made), so
// that a Create that runs beside it, on another goroutine, finds it done:
// a command line that makes one sandbox overlaps it with Create's own
// first steps (the id lock and uid range). It is optional: Create does it
// when it was not done. It also removes some of what detached teardowns
// of earlier runs left (reapDetached).
func (b *Backend) Prepare() {
	b.Detect()
	b.Reap()
}

// Detect is Prepare's first part: the cgroup hierarchies found and this
// state directory's parent groups made, which a Create needs before its
// executor starts.
func (b *Backend) Detect() {
	tr := newTracer("detect")
	defer tr.done()
	_, _ = b.cgroups()
}

// Reap is Prepare's second part, reapDetached: nothing a Create needs, so
// a command line that makes one sandbox runs it once that sandbox's
// executor has started (OnStart), beside its Go start.
func (b *Backend) Reap() {
	tr := newTracer("reap")
	defer tr.done()
	if m, err := b.cgroups(); err == nil {
		b.reapDetached(m)
	}
}

// reapMax bounds the groups without a live sandbox that one reapDetached
// looks into.
const reapMax = 16

// reapDetached removes the empty groups that sandboxes destroyed detached
// (Sandbox.DestroyDetached) left: it looks into at most reapMax groups
// whose id lock no process holds, starting at a place that changes with
// every call, and removes those that hold no process (what GC would
// remove). Each detached teardown leaves one group, and each run removes
// every empty one up to reapMax, so their number stays bounded. A detached
// sandbox always has a cgroup2 group (Sandbox.detachable), so only the
// cgroup2 tree is listed; a group that has none (a host killed between
// its mkdirs) is GC's. It neither opens a group nor waits for one.
func (b *Backend) reapDetached(m *cgroup.Manager) {
	names, err := m.ListUnified()
	if err != nil || len(names) == 0 {
		return
	}
	b.mu.Lock()
	names = slices.DeleteFunc(names, func(n string) bool { return b.mine[n] })
	b.mu.Unlock()
	if len(names) == 0 {
		return
	}
	start := int(time.Now().UnixNano() % int64(len(names)))
	looked := 0
	for i := range names {
		n := names[(start+i)%len(names)]
		if looked == reapMax {
			break
		}
		if b.ids.isLive(n) {
			continue
		}
		looked++
		_, _ = m.RemoveIfEmpty(n)
	}
}

func (b *Backend) cgroups() (*cgroup.Manager, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.cgOnce {
		b.cgOnce = true
		b.cg, b.cgErr = cgroup.NewManagerWith(CgroupParent(b.cfg.StateDir), cgroup.ManagerOptions{Freezer: b.cfg.Freezer})
	}
	return b.cg, b.cgErr
}

// systemDirs are bound read-only from the host when no template root is given.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/opt"}

// etcFiles are the host's /etc entries a sandbox gets read-only. Never
// shadow, passwd or anything with host identities or credentials.
var etcFiles = []string{
	"/etc/alternatives", "/etc/ssl", "/etc/ca-certificates", "/etc/ca-certificates.conf",
	"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime",
	"/etc/mime.types", "/etc/protocols", "/etc/services", "/etc/pki", "/etc/crypto-policies",
}

// Create builds and starts a sandbox.
func (b *Backend) Create(ctx context.Context, spec sandbox.Spec) (_ sandbox.Sandbox, err error) {
	if err := spec.Validate(); err != nil {
		return nil, err
	}
	if err := checkSources(&spec); err != nil {
		return nil, err
	}
	id := spec.ID
	if id == "" {
		id = sandbox.NewID()
	}
	tr := newTracer("create")
	defer tr.done()
	sb := &Sandbox{b: b, id: id, created: time.Now(), done: make(chan struct{}), background: sandbox.IsBackground(ctx), detachOK: spec.ID == ""}
	// The id lock comes first, and before anything is torn down on failure:
	// until it is held, id may be a live sandbox's, and with it what is
	// named after it (its trust-store files, its mark in Backend.mine). It
	// also comes before the cgroup: GC judges a cgroup by it.
	if sb.idLock, err = b.ids.hold(id); err != nil {
		return nil, err
	}
	tr.mark("idlock")
	b.own(id, true) // until teardown
	// From here on, a failure tears sb down: teardown releases whatever
	// each step below recorded in sb as it took it.
	defer func() {
		if err != nil {
			sb.teardown()
		}
	}()
	if spec.Runtime == sandbox.RuntimeGVisor {
		if err := b.createGVisor(ctx, sb, spec, tr); err != nil {
			return nil, err
		}
		sb.watch()
		b.log.Info("sandbox created", "sandbox_id", id, "runtime", "gvisor", "pid", sb.proc.pid)
		return sb, nil
	}
	late := b.lateReserve(&spec)
	if late {
		err = sb.reserveEarly(spec, tr, true)
	} else {
		err = sb.reserve(spec, tr)
	}
	if err != nil {
		return nil, err
	}
	setup := newSetup(sb.spec.Limits, b.root)
	setup.WritableRoot = sb.spec.WritableRoot
	setup.StaticReadOnly = sb.spec.StaticReadOnly
	setup.Sudo = sb.spec.Sudo
	setup.RootCaps = sb.spec.RootCaps
	applyAccount(setup, sb.spec.Account)
	host, err := sb.start(setup, tr, late)
	if err != nil {
		return nil, err
	}
	if late {
		// The executor runs its Go start meanwhile; it takes no id, and
		// reads no Setup, before the hello that comes after this.
		if err := sb.reserveLate(tr); err != nil {
			host.Close()
			return nil, err
		}
		if sb.proc.writeMaps == nil {
			host.Close()
			return nil, errors.New("start executor: its id maps cannot be written")
		}
		if err := sb.proc.writeMaps(sb.executorMaps()); err != nil {
			host.Close()
			return nil, fmt.Errorf("start executor: %w", err)
		}
		tr.mark("maps")
	}
	if err := sb.handshake(ctx, host, setup); err != nil {
		return nil, err
	}
	tr.mark("handshake")
	sb.watch()
	b.log.Info("sandbox created", "sandbox_id", id, "pid", sb.proc.pid)
	return sb, nil
}

// reserve takes what sb holds on the host before its executor starts,
// besides its id lock: the trust-store files, the uid range (root mode) and
// the cgroup, in that order. Each is recorded in sb as soon as it is taken,
// so that teardown releases it whichever step fails. It sets sb.spec to
// spec with the trust store's mounts and environment added.
//
// Preconditions: sb holds its id lock.
func (sb *Sandbox) reserve(spec sandbox.Spec, tr *tracer) error {
	if err := sb.reserveEarly(spec, tr, false); err != nil {
		return err
	}
	return sb.bindSlot(tr)
}

// lateReserve reports whether Create starts the executor of a sandbox of
// spec before it takes the uid range and writes the cgroup's limits
// (reserveEarly's late, then reserveLate), so that those writes run beside
// the executor's Go start instead of before it. That is root mode's direct
// start (vfork.Exec), where the host writes the executor's id maps after
// its exec and the executor holds no id of the range, and runs nothing of
// the sandbox's, before the host's hello; and a sandbox with no id-mapped
// tree, whose clone needs the range before the executor starts.
func (b *Backend) lateReserve(spec *sandbox.Spec) bool {
	return b.root && !b.cfg.Spawner && vfork.Supported && !b.forkOnly &&
		spec.Runtime != sandbox.RuntimeGVisor &&
		len(spec.Layers) == 0 && spec.Workspace == "" && len(spec.Mounts) == 0 &&
		spec.Network != sandbox.NetworkProxy && !spec.WritableRoot
}

// reserveEarly is reserve's part before the executor starts: with late,
// the trust-store files and the cgroup's directories, without its limits;
// else the uid range too, and the limits written. reserveLate (late) or
// bindSlot does the rest.
func (sb *Sandbox) reserveEarly(spec sandbox.Spec, tr *tracer, late bool) error {
	b := sb.b
	if len(spec.TrustedCAs) > 0 {
		sb.files = filepath.Join(b.cfg.StateDir, "files", sb.id)
		if err := trustStore(sb.files, &spec); err != nil {
			return err
		}
	}
	sb.spec = spec
	if b.root && spec.Runtime != sandbox.RuntimeGVisor && !late {
		var err error
		if sb.slot, sb.base, err = b.uids.acquire(sb.id); err != nil {
			return err
		}
	}
	tr.mark("uids")
	if err := sb.makeCgroup(late); err != nil {
		return err
	}
	if late {
		tr.mark("cgroup")
	}
	return nil
}

// reserveLate is reserve's rest when Create started the executor first
// (lateReserve): the uid range taken, the cgroup's limits written and the
// range bound to the cgroup, before the executor's id maps are written
// and before the hello, so before the executor holds any id of the range
// or runs anything of the sandbox's. A failure here is Create's: teardown
// kills the executor and releases the rest.
func (sb *Sandbox) reserveLate(tr *tracer) error {
	var err error
	if sb.slot, sb.base, err = sb.b.uids.acquire(sb.id); err != nil {
		return err
	}
	tr.mark("lateuids")
	if sb.b.failLate != nil {
		if err := sb.b.failLate(sb.proc.pid); err != nil {
			return err
		}
	}
	if err := sb.limitCgroup(); err != nil {
		return err
	}
	tr.mark("limits")
	return sb.bindSlot(nil)
}

// bindSlot records sb's cgroup2 group in its uid slot (uidAllocator.bind),
// when it has both.
func (sb *Sandbox) bindSlot(tr *tracer) error {
	b := sb.b
	if sb.slot != nil && sb.cg != nil && sb.cg.V2Dir() != "" {
		if err := b.uids.bind(sb.slot, sb.id, sb.cg.V2Dir()); err != nil {
			return err
		}
		sb.bound = true
	}
	tr.mark("cgroup")
	return nil
}

// newSetup returns the executor's setup for a sandbox with limits l, but
// for its sources (file system trees, workspace, mounts, proxy): who runs
// commands, the sizes of the writable layers and /dev/shm, and the
// rlimits. root says whether the backend runs as root (else rootless).
func newSetup(l sandbox.Limits, root bool) *execproto.Setup {
	setup := &execproto.Setup{
		Hostname:  "airlock",
		DiskBytes: l.DiskBytes,
		User:      execproto.User{Name: "sandbox", UID: sandboxUID, GID: sandboxUID, Home: "/home/sandbox"},
		Rlimits:   map[string]uint64{"core": 0},
		// Landlock is required when the kernel has it; where it does not
		// the executor reports that it is missing and doctor says so.
		RequireLandlock: false,
	}
	if l.Pids > 0 {
		// RLIMIT_NPROC counts the tasks of one user in the sandbox's user
		// namespace. Commands run as the sandbox user, so a fork bomb stops
		// at Pids without touching the tasks of the executor (sandbox root),
		// which keeps pidsReserve more in the cgroup for its own threads.
		setup.Rlimits["nproc"] = uint64(l.Pids)
	}
	if setup.DiskBytes == 0 {
		setup.DiskBytes = sandbox.DefaultLimits.DiskBytes
	}
	setup.ShmBytes = shmBytes(setup.DiskBytes)
	if !root {
		// Rootless: one id is mapped, so the sandbox user is root of the
		// user namespace (without capabilities for its commands).
		setup.User = execproto.User{Name: "root", UID: 0, GID: 0, Home: "/root"}
		setup.NoSetGroups = true
	}
	return setup
}

// applyAccount renames setup's unprivileged user and moves its home as a
// says. A rootless sandbox's one user is root and stays root, in /root;
// its workspace is still bound at a's home when a asks for that.
func applyAccount(setup *execproto.Setup, a sandbox.Account) {
	if a.HomeIsWorkspace {
		setup.WorkspaceAlias = a.HomeOf()
	}
	if setup.User.UID == 0 || a == (sandbox.Account{}) {
		return
	}
	setup.RootHome = a.RootHome
	if a.Name != "" {
		setup.User.Name = a.Name
	}
	setup.User.Home = a.HomeOf()
}

// start fills in setup's sources and starts sb's executor with them (see
// startExecutor). It returns the host end of the control socket, for the
// handshake. The trees and id-map namespaces it opened on the host are
// closed when it returns: the executor holds its own copies.
//
// Preconditions: sb.reserve succeeded.
//
// With late (Backend.lateReserve), sb has no uid range yet: the executor
// starts with no id maps, which the caller writes (proc.writeMaps) once
// it has taken the range, before the handshake.
func (sb *Sandbox) start(setup *execproto.Setup, tr *tracer, late bool) (*os.File, error) {
	b := sb.b
	direct := !b.cfg.Spawner && vfork.Supported && !b.forkOnly // startProc's direct start, with late maps
	trees := &treeFiles{idm: &idmapper{start: b.startProc, direct: direct, base: sb.base, cache: &b.idmaps}}
	defer trees.closeFiles()
	defer trees.idm.close()
	if len(sb.spec.Layers) > 0 {
		var err error
		if sb.layerLocks, err = lockLayers(sb.spec.Layers); err != nil {
			return nil, err
		}
	}
	if !b.root {
		// Rootless: the host cannot clone mount trees; the executor binds
		// the paths it is given itself (see rootlessSources).
		if err := rootlessSources(&sb.spec, setup); err != nil {
			return nil, err
		}
	} else if err := trees.sources(&sb.spec, sb.layerLocks, setup); err != nil {
		return nil, err
	}
	tr.mark("trees")
	host, err := sb.startExecutor(trees.files, tr, late)
	if err != nil {
		return nil, err
	}
	tr.mark("start")
	trees.closeFiles()
	trees.idm.close()
	tr.mark("idmclose")
	return host, nil
}

// startExecutor starts sb's executor in new namespaces with the control
// socket as fd 3 and files after it (fd 4, 5, ...), and puts it in sb's
// cgroup (which it may have started in). It returns the host end of the
// control socket. On failure the host end is closed; an executor already
// started is sb.proc, which teardown kills.
func (sb *Sandbox) startExecutor(files []*os.File, tr *tracer, lateMaps bool) (*os.File, error) {
	host, child, err := socketpair()
	if err != nil {
		return nil, err
	}
	childOpen := true
	defer func() {
		if childOpen {
			child.Close()
		}
	}()
	sys := sb.executorAttr()
	// Root mode: the executor takes its ids after the exec, which lets
	// the fork share this process's memory. Rootless: an unprivileged
	// writer's maps stay with the fork that waits for them.
	ps := procSpec{args: []string{"airlock-exec"}, extra: append([]*os.File{child}, files...), sys: sys, lateIDs: sb.b.root, lateMaps: lateMaps, tr: tr}
	if sb.cg != nil && ps.lateIDs && vfork.Supported && !sb.b.forkOnly {
		// The child joins the v1 groups itself before its exec (see
		// cgroup.Group.OpenV1Tasks), where the starter can.
		if ps.tasks, err = sb.cg.OpenV1Tasks(sys.UseCgroupFD); err != nil {
			host.Close()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
		if sb.b.editTasks != nil {
			sb.b.editTasks(ps.tasks)
		}
		defer cgroup.CloseFDs(ps.tasks)
	}
	p, err := sb.b.startProc(ps)
	if err != nil {
		host.Close()
		return nil, fmt.Errorf("start executor: %w", err)
	}
	// Only the executor may hold the other end: if it dies before the
	// handshake, the host reads EOF at once instead of waiting forever.
	child.Close()
	childOpen = false
	sb.proc = p
	sb.b.started()
	if sb.cg != nil && !p.joined {
		add := sb.cg.AddProc
		if sys.UseCgroupFD {
			add = sb.cg.AddClonedProc // in the cgroup2 group from its start
		}
		if err := add(p.pid); err != nil {
			host.Close()
			return nil, fmt.Errorf("cgroup: %w", err)
		}
	}
	return host, nil
}

// executorMaps are the id maps of sb's executor in root mode: sb's uid
// range, uid and gid 0 inside as sb.base outside, setgroups allowed.
func (sb *Sandbox) executorMaps() idMaps {
	m := []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.base), Size: uidRange}}
	return idMaps{uid: m, gid: m, setgroups: true}
}

// executorAttr says how sb's executor starts: as root of new user, mount,
// PID, IPC, UTS, cgroup and network namespaces, with sb's uid range (root
// mode) or the invoking user's ids (rootless) mapped, and in sb's cgroup
// when it has one that can be entered at the fork.
func (sb *Sandbox) executorAttr() *syscall.SysProcAttr {
	sys := &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC |
			syscall.CLONE_NEWUTS | syscall.CLONE_NEWCGROUP | syscall.CLONE_NEWNET,
		UidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.base), Size: uidRange}},
		GidMappings:                []syscall.SysProcIDMap{{ContainerID: 0, HostID: int(sb.base), Size: uidRange}},
		GidMappingsEnableSetgroups: true,
		Credential:                 &syscall.Credential{Uid: 0, Gid: 0},
		// The sandbox dies with the host (startProc sets the parent-death
		// signal): PID 1's death ends the PID namespace, and with it
		// every process inside.
		Setsid: true,
	}
	if !sb.b.root {
		// Only the invoking user's ids exist inside, as root; setgroups
		// must be denied for an unprivileged user to write the gid map.
		sys.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		sys.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
		sys.GidMappingsEnableSetgroups = false
		sys.Credential = &syscall.Credential{Uid: 0, Gid: 0, NoSetGroups: true}
	}
	if fd := sb.cgroupFD(); fd >= 0 {
		sys.UseCgroupFD = true
		sys.CgroupFD = fd
	}
	return sys
}

// handshake sends setup to sb's executor over host, the host end of its
// control socket, and waits up to 30 seconds for it to report the sandbox
// ready. On success sb.conn owns host; on failure host is closed.
//
// Preconditions: sb's executor was started (sb.start).
func (sb *Sandbox) handshake(ctx context.Context, host *os.File, setup *execproto.Setup) error {
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	conn, err := execconn.Dial(dctx, host, setup)
	if err != nil {
		host.Close()
		return fmt.Errorf("start sandbox: %w", err)
	}
	sb.conn = conn
	sb.Files = execconn.Files{Conn: conn, Alive: sb.alive, ID: sb.id, Workspace: sb.spec.Workspace}
	sb.layers = append(sb.layers, conn.Ready.Layers...)
	return nil
}

// ProxyAddr is where the executor listens for proxied connections inside
// the sandbox in proxy network mode.
const ProxyAddr = "127.0.0.1:3128"

func existing(paths []string) []string {
	var out []string
	for _, p := range paths {
		if _, err := os.Lstat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func checkSources(spec *sandbox.Spec) error {
	var errs []error
	if spec.Workspace != "" {
		abs, err := filepath.Abs(spec.Workspace)
		if err == nil {
			spec.Workspace = abs
			err = checkDir("workspace", abs)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if spec.RootFS != "" {
		if err := checkDir("rootfs", spec.RootFS); err != nil {
			errs = append(errs, err)
		}
	}
	for _, l := range spec.Layers {
		if err := checkDir("image layer", l); err != nil {
			errs = append(errs, err)
		}
	}
	for _, m := range spec.Mounts {
		if _, err := os.Stat(m.Source); err != nil {
			errs = append(errs, fmt.Errorf("mount source %s does not exist", m.Source))
		}
	}
	if spec.ProxySocket != "" {
		fi, err := os.Stat(spec.ProxySocket)
		if err != nil || fi.Mode()&os.ModeSocket == 0 {
			errs = append(errs, fmt.Errorf("proxy socket %s is not a unix socket", spec.ProxySocket))
		}
	}
	return errors.Join(errs...)
}

func socketpair() (host *os.File, child *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	// Non-blocking, so the host end goes through the runtime poller and a
	// Close (a cancelled context, a destroy) interrupts a pending read.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "executor"), os.NewFile(uintptr(fds[1]), "control"), nil
}

// Live returns the ids of this state directory's sandboxes that a running
// airlock process holds.
func (b *Backend) Live() (map[string]bool, error) { return b.ids.live() }

// GC removes what sandboxes of dead airlock processes left: cgroups (killing
// nothing: only empty groups are removed), this state directory's cgroup
// parent when it holds no group and no sandbox of this backend is alive,
// and the empty groups and parents other state directories' hosts left
// (cgroup.Sweep: groups older than sweepGrace, whose liveness the kernel
// vouches for, as it refuses to remove a group that holds a process).
// Mounts need no collection: they live only in the sandbox's own mount
// namespace and vanish with its last process. It returns the ids it
// cleaned.
//
// It is safe to run while this or another airlock process creates
// sandboxes in the same state directory: a sandbox takes its id lock before
// it makes its cgroup, and GC lists the cgroups before it asks about the
// locks, so every cgroup it sees has a lock that is either still held (the
// group is skipped) or free for good. Lock files nobody holds are removed.
func (b *Backend) GC() ([]string, error) {
	gv := b.gcGVisor()
	m, err := b.cgroups()
	if err != nil {
		b.ids.sweep()
		return gv, nil // no cgroups, nothing more to collect
	}
	all, err := m.List()
	if err != nil {
		return nil, err
	}
	defer b.ids.sweep()
	// This backend's own sandboxes need no lock check.
	b.mu.Lock()
	names := slices.DeleteFunc(all, func(n string) bool { return b.mine[n] })
	b.mu.Unlock()
	cleaned := gv
	var errs []error
	defer func() {
		// What hosts of other state directories left, and this one's
		// parent when no sandbox of this process is in it.
		_, _ = cgroup.Sweep(isCgroupParent, CgroupParent(b.cfg.StateDir), sweepGrace)
		b.mu.Lock()
		idle := len(b.mine) == 0
		b.mu.Unlock()
		if idle {
			_, _ = m.RemoveParentIfEmpty()
		}
	}()
	for _, n := range names {
		if b.ids.isLive(n) {
			continue
		}
		g, err := m.Open(n)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		// Only empty groups are leftovers: a group with processes belongs
		// to a sandbox of another airlock process (another AIRLOCK_HOME)
		// whose liveness this one cannot see. A frozen one is the
		// exception: its id lock is free, so its host is gone, and the
		// v1 freezer keeps its processes from dying with it (the death
		// signal waits for a thaw).
		if st, err := g.Stats(); err != nil || st.Pids > 0 {
			if frozen, ferr := g.Frozen(); err != nil || ferr != nil || !frozen {
				_ = g.Close()
				continue
			}
			b.log.Info("gc: a frozen sandbox of a host that is gone", "sandbox_id", n)
		}
		if err := g.Destroy(); err != nil {
			errs = append(errs, err)
		} else {
			cleaned = append(cleaned, n)
		}
		_ = g.Close()
	}
	return cleaned, errors.Join(errs...)
}

// shmBytes is the size of a sandbox's /dev/shm for the disk limit in force
// (never 0, which would leave the tmpfs unbounded).
func shmBytes(disk int64) int64 {
	return min(disk, 64<<20)
}
