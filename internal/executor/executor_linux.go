package executor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path"
	"runtime"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor/landlock"
	"github.com/airlockrun/airlock/internal/executor/seccomp"
	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// Main is the executor's entry point. It returns the process exit code.
func Main(args []string) int {
	if path.Base(args[0]) == path.Base(execproto.EventHelper) {
		return eventCommand(args[1:], os.Stdin, os.Stderr)
	}
	if path.Base(args[0]) == path.Base(execproto.SudoHelper) {
		return sudoCommand(args[1:], os.Stderr)
	}
	if code, ok := podCommand(args); ok {
		return code
	}
	if len(args) > 1 && args[1] == "hold" {
		// Keeps a user namespace alive for the host while it builds
		// id-mapped mounts; exits when the host closes stdin.
		_, _ = io.Copy(io.Discard, os.Stdin)
		return 0
	}
	if len(args) > 1 && args[1] == "version" {
		fmt.Printf("airlock-exec protocol %d\n", execproto.Version) //nolint:forbidigo // Main is airlock-exec's main (cmd/airlock-exec only calls it): the version is the command's answer on stdout
		return 0
	}
	tr := newExecTrace("exec", traceBase)
	tr.mark("gostart")
	gvisor := len(args) > 1 && args[1] == "gvisor"
	if gvisor {
		if err := emptyEnviron(args); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-exec: environment:", err)
			return 1
		}
		// runsc hands a container only its stdio: the host gives the
		// control socket as stdin, and it moves to ControlFD.
		if err := controlFromStdin(); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-exec: control socket:", err)
			return 1
		}
	}
	if os.Getpid() != 1 {
		fmt.Fprintln(os.Stderr, "airlock-exec: runs only as PID 1 of a sandbox started by airlock")
		return 2
	}
	// Under gVisor the executor's ids change on every thread (two system
	// calls, each stopping the world and signalling every other thread):
	// now, before the signal thread, the command thread and the threads
	// the setup's trapped calls make the runtime start exist. A failure is
	// Create's (start), reported over the connection.
	var idsErr error
	if gvisor {
		idsErr = outOfKillReach()
	}
	if !gvisor {
		// gVisor's kernel starts its init with every signal at its
		// default action: there is nothing to reset, and each look is a
		// trapped system call (62 of them).
		resetIgnoredSignals()
	}
	// Non-blocking, so the reader waits in the runtime poller: a thread
	// parked in a blocking read keeps a P in a syscall, and the runtime's
	// monitor thread then polls every 20 µs.
	if err := unix.SetNonblock(execproto.ControlFD, true); err != nil {
		fmt.Fprintln(os.Stderr, "airlock-exec: control socket:", err)
		return 1
	}
	// No command may inherit it: one that did would read the host's
	// frames and could answer as the executor.
	unix.CloseOnExec(execproto.ControlFD)
	conn := os.NewFile(execproto.ControlFD, "control")
	absorbed := make(chan struct{})
	e := &executor{lateIDs: len(args) > 1 && args[1] == execproto.LateIDs, gvisor: gvisor, idsErr: idsErr, w: execproto.NewWriter(conn), absorbed: absorbed, streams: map[uint32]*stream{}, procs: map[int]*proc{}, exited: map[int]exitInfo{}, tr: tr}
	threads := func() error {
		// Under gVisor and in a pod, asking for each signal is a round
		// trip to the runtime's signal thread (1-3 ms for all of them):
		// it goes on beside the handshake and the mounts, and start
		// waits for it before anything of the sandbox can run.
		if gvisor || podInner {
			go func() {
				absorbSignals(gvisor)
				close(absorbed)
			}()
		} else {
			// Natively the kernel spares init: no round trips, so
			// nothing to wait for.
			absorbSignalsInit()
			close(absorbed)
		}
		// Before Landlock: the thread must exist when the ruleset is
		// applied. A late-ids executor's holds the parent-death signal
		// (takeIDs).
		var err error
		e.pt, err = newProcThread(e.lateIDs)
		return err
	}
	var err error
	if !e.lateIDs {
		err = threads()
	}
	tr.mark("prep")
	// A late-ids executor takes its ids on the host's hello with four
	// system calls made on every thread (each stops the world and signals
	// every other thread): before the signal thread and the command
	// thread exist, there are fewer to signal.
	if err == nil {
		err = e.hello(conn)
	}
	if err == nil && e.lateIDs {
		err = threads()
		tr.mark("threads")
	}
	if err == nil {
		err = e.start(conn)
	}
	tr.done()
	e.tr = nil
	if err != nil {
		_ = e.fatal(err)
		return 1
	}
	if err := e.serve(conn); !errors.Is(err, io.EOF) {
		_ = e.fatal(err)
		return 1
	}
	return 0
}

type executor struct {
	// lateIDs: started before its id maps existed (execproto.LateIDs); it
	// takes uid and gid 0 of its namespace on the host's hello.
	lateIDs bool
	// tr traces the start (execTrace); nil once Ready is written.
	tr *execTrace
	// gvisor: started by a gvisor bundle (argv[1] "gvisor"), whose Setup
	// must say GVisor; idsErr is what taking the executor's ids there
	// (outOfKillReach, before the handshake) returned.
	gvisor bool
	idsErr error
	w      *execproto.Writer
	// absorbed is closed once absorbSignals is done.
	absorbed <-chan struct{}
	setup    execproto.Setup
	pt       *procThread
	users    map[string]execproto.User
	// uidNames and gidNames name ids in file listings: users' names by
	// uid, and by gid (the generated /etc/group names each user's group
	// after it).
	uidNames, gidNames map[int]string
	// path is the PATH of commands that name none (sandboxPath).
	path string
	// uidMap and gidMap are the ids the sandbox's user namespace maps.
	uidMap, gidMap idMap

	mu      sync.Mutex
	streams map[uint32]*stream // guarded by mu
	procs   map[int]*proc      // guarded by mu: running processes by pid
	exited  map[int]exitInfo   // guarded by mu: reaped before they were registered
	// starting counts process starts in flight; while it is nonzero, statuses
	// of unknown pids are kept in exited for them. Guarded by mu.
	starting int
	// watches counts running watch streams. Guarded by mu.
	watches int
	// connects counts running connect streams (at most
	// execproto.MaxConnects). Guarded by mu.
	connects int
	// null is /dev/null, the stdin of commands given none, opened on first
	// use and shared by them. Guarded by mu.
	null *os.File

	// ckpt keeps the baselines of /workspace for checkpoints.
	ckpt *checkpoints
	// lower is where an import into /workspace unpacks (importTar).
	lower lowerLayer
	// specials keeps the FIFOs of /workspace between OpSpecialFiles
	// requests (specialCache).
	specials specialCache
	// rootCkpt keeps the baselines of the root's upper layer (TreeRoot);
	// nil for a root of the host's directories, which is read-only.
	rootCkpt *checkpoints
	// events queues what the sandbox writes to its event socket; set
	// before any command runs.
	events *eventHub
	// egress hands the connections accepted on the proxy address to the
	// host's egress streams (Setup.ProxyStreams); nil otherwise.
	egress chan *os.File
	// pids, under gVisor with a pids limit, is the group every command
	// starts in (pidsGroup); nil otherwise.
	pids *pidsGroup
}

// devNull returns the executor's /dev/null.
func (e *executor) devNull() (*os.File, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.null == nil {
		// Blocking, and never offered to the runtime's poller, which
		// refuses /dev/null only after five system calls (os.Open's
		// fcntls and epoll_ctl): only the commands read it.
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: "/dev/null", Err: err}
		}
		e.null = os.NewFile(uintptr(fd), "/dev/null")
	}
	return e.null, nil
}

func (e *executor) fatal(err error) error {
	f, ferr := execproto.MessageFrame(execproto.TError, 0, execproto.Error{Message: err.Error()})
	if ferr != nil {
		return ferr
	}
	return e.w.Write(f)
}

// hello reads the host's hello and, for a late-ids executor, takes its
// ids.
func (e *executor) hello(conn io.Reader) error {
	var h execproto.Hello
	if err := expect(conn, execproto.THello, &h); err != nil {
		return err
	}
	if h.Version != execproto.Version {
		return fmt.Errorf("protocol version %d, executor speaks %d", h.Version, execproto.Version)
	}
	e.tr.mark("hello")
	if e.lateIDs {
		// The host wrote the maps before its hello: nothing before this
		// point needed an id of the namespace.
		err := takeIDs()
		e.tr.mark("ids")
		return err
	}
	return nil
}

// start answers the host's hello (read by hello) and builds the sandbox.
func (e *executor) start(conn io.Reader) error {
	hello, _ := execproto.MessageFrame(execproto.THello, 0, execproto.Hello{Version: execproto.Version})
	if err := e.w.Write(hello); err != nil {
		return err
	}
	e.tr.mark("hello-sent")
	if err := expect(conn, execproto.TSetup, &e.setup); err != nil {
		return err
	}
	e.tr.mark("setup-read")
	// Every thread must carry the same restrictions: keep setup on one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	// setupGVisor reports the ids taken in Main: only an executor
	// started for gvisor took them (a pod's is set up as under gVisor but
	// by setupPod).
	if e.gvisor != (e.setup.GVisor && !podInner) {
		return fmt.Errorf("setup: executor started for gvisor %t, set up for it %t", e.gvisor, e.setup.GVisor)
	}
	if e.idsErr != nil {
		return fmt.Errorf("setup: executor ids: %w", e.idsErr)
	}
	setupFn := setup
	if e.setup.GVisor {
		setupFn = setupGVisor
	}
	if podInner {
		setupFn = setupPod
	}
	layers, up, err := setupFn(&e.setup)
	if err != nil {
		return fmt.Errorf("setup: %w", err)
	}
	e.tr.mark("mounts")
	if e.setup.GVisor && e.setup.Pids > 0 {
		// Fails closed: the host's cgroup alone would let a fork bomb
		// starve gVisor's own tasks.
		if e.pids, err = newPidsGroup(e.pt, pidsGroupMount, e.setup.Pids); err != nil {
			return fmt.Errorf("pids limit: %w", err)
		}
		layers = append(layers, "pids:gvisor-cgroup")
	}
	e.ckpt = newCheckpoints(workspacePath, up.ws)
	if e.setup.GVisor && !podInner {
		// gVisor's overlay (layeredWorkspace) marks its opaque
		// directories as a privileged Linux overlay does.
		e.ckpt.opaqueAttr = "trusted.overlay.opaque"
	}
	e.lower.fd, e.lower.set = up.wsLower, up.wsLower >= 0
	if up.root >= 0 {
		e.rootCkpt = newCheckpoints("/", up.root)
		e.rootCkpt.deltaOnly = true
	}
	<-e.absorbed
	e.tr.mark("signals")
	e.users = loadUsers(e.setup.User)
	e.uidNames, e.gidNames = idNames(e.users)
	e.path = sandboxPath() + ":" + eventBinDir
	e.tr.mark("users")
	if e.setup.Sudo {
		if err := e.listenSudo(); err != nil {
			return err
		}
		layers = append(layers, "sudo")
	}
	if err := e.listenEvents(); err != nil {
		return err
	}
	layers = append(layers, "events")
	e.tr.mark("events")
	e.uidMap, e.gidMap = readIDMap("/proc/self/uid_map"), readIDMap("/proc/self/gid_map")
	if e.proxied() {
		if err := e.startProxy(); err != nil {
			return fmt.Errorf("proxy forwarder: %w", err)
		}
		layers = append(layers, "network:proxy")
	}
	if err := applyRlimits(e.setup.Rlimits); err != nil {
		return err
	}
	if err := e.dropCapabilities(); err != nil {
		return err
	}
	if len(e.setup.RootCaps) > 0 {
		layers = append(layers, "capabilities:root-keeps:"+strings.ToLower(strings.Join(e.setup.RootCaps, ",")))
	} else {
		layers = append(layers, "capabilities:dropped-for-children")
	}
	var hidden, hiddenRW []int
	for _, fd := range []int{up.ws, up.root} {
		if fd >= 0 {
			// Checkpoints read the upper layers, which have no path
			// here; nothing else can reach them.
			hidden = append(hidden, fd)
		}
	}
	if up.wsLower >= 0 {
		// An import writes the workspace's lower layer (lowerLayer).
		hiddenRW = append(hiddenRW, up.wsLower)
	}
	e.tr.mark("caps")
	status, err := landlock.Restrict(landlock.Rules{
		ReadOnly:     []string{"/"},
		ReadOnlyFDs:  hidden,
		ReadWriteFDs: hiddenRW,
		ReadWrite:    e.writablePaths(),
		Devices:      []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty", "/dev/pts", "/dev/ptmx"},
		// Natively seccomp.Install follows, whose TSYNC sets
		// no_new_privs on every thread (one stop of the world fewer);
		// under gVisor the filter goes on the command thread alone
		// (installSeccomp), so Landlock sets it. If the filter fails,
		// start fails and the executor exits before any command.
		SeccompSetsNoNewPrivs: !e.setup.GVisor,
	})
	abi := 0
	switch {
	case err == nil:
		abi = status.ABI
		layers = append(layers, fmt.Sprintf("landlock:abi%d", abi))
	case e.setup.RequireLandlock:
		return fmt.Errorf("landlock: %w", err)
	}
	e.tr.mark("landlock")
	// The executor's own memory (and /proc/1/exe) must not be reachable by
	// processes in the sandbox, root included.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return fmt.Errorf("set non-dumpable: %w", err)
	}
	if err := e.installSeccomp(); err != nil {
		return fmt.Errorf("seccomp: %w", err)
	}
	layers = append(layers, "seccomp", "no_new_privs")
	e.tr.mark("seccomp")
	if !e.setup.GVisor && !podInner && e.setup.Workspace.Mode == execproto.WorkspaceRW {
		// A delta of the host's directory walks what changed (the dirty
		// set, dirty_linux.go), once the tracker, started here in the
		// background, watches every directory; until then, and if it
		// fails, the whole tree. Not under gVisor: its inotify does not
		// see what the host changes through the gofer.
		//
		// The tracker is trusted only with the link notifier
		// (linknotify_linux.go): every link of a command is noted
		// before it goes on. On a kernel that cannot let a noted call
		// go on (before 5.5), no tracker: every delta walks the whole
		// tree.
		if tr := newTracker(workspacePath, e.setup.WorkspaceAlias, nil); tr != nil {
			if _, installed, err := startLinkNotifier(e.pt, tr); err != nil {
				tr.close()
				if installed {
					return fmt.Errorf("link notifier: %w", err)
				}
			} else {
				e.ckpt.track = tr
			}
		}
		e.tr.mark("tracker")
	}
	ready, err := execproto.MessageFrame(execproto.TReady, 0, execproto.Ready{PID: 1, LandlockABI: abi, Seccomp: true, Layers: layers})
	if err != nil {
		return err
	}
	err = e.w.Write(ready)
	e.tr.mark("ready")
	return err
}

// installSeccomp sets no_new_privs and installs the seccomp filter: on
// every thread of the executor natively (TSYNC), and under gvisor on the
// thread that forks every command (procThread) alone, which every command
// inherits it from. gVisor computes a filter's per-syscall cache for each
// thread the filter lands on (at install, and at each clone of a filtered
// thread): with TSYNC that is once per executor thread, seven at Ready,
// for a filter whose work is to bound the commands. Natively the filter on
// every thread also bounds the executor; under gvisor the executor's other
// threads stay inside gVisor's kernel, whose boundary is the runtime's, and
// no command runs on them (docs/gvisor.md, "Cold start").
//
// Under gvisor, where clone3 can be used (vfork.Supported), the thread
// holds no_new_privs alone and each command installs the filter on itself
// before its exec (procThread.spawnWith), from a clone that clears its
// signal handlers; a kernel without that clone gets the filter on the
// thread, as before, at the first command.
func (e *executor) installSeccomp() error {
	if !e.setup.GVisor {
		return seccomp.Install()
	}
	var err error
	if !vfork.Supported {
		e.pt.do(func() { err = seccomp.InstallThread() })
		return err
	}
	filter, err := seccomp.ChildFilter()
	if err != nil {
		return err
	}
	e.pt.do(func() {
		if err = seccomp.NoNewPrivsThread(); err == nil {
			err = e.pt.spawnWith(filter, seccomp.InstallThread)
		}
	})
	return err
}

// dropCapabilities empties the bounding, inheritable and ambient sets of the
// thread that forks every command (see procThread), so each command starts
// without capabilities, even as root inside the sandbox; Setup.RootCaps stay
// in the bounding set, which a command run as root then holds (a command
// of any other user holds none: the kernel clears them when it switches
// away from uid 0). The sets are
// per-thread and a child inherits its forking thread's; doing it on every
// thread would cost one stop-the-world per capability (AllThreadsSyscall) for
// no gain: no other thread forks, and the executor's own effective set is
// bounded by seccomp and Landlock, applied to all threads.
func (e *executor) dropCapabilities() error {
	var err error
	keep := map[int]bool{}
	for _, name := range e.setup.RootCaps {
		c, ok := capNumber(name)
		if !ok {
			return fmt.Errorf("root capability %s: unknown here", name)
		}
		keep[c] = true
	}
	e.pt.do(func() { err = dropThreadCapabilities(keep) })
	return err
}

// capNumber is the number of a capability execproto.RootCapabilities
// names. A switch, not a map: no work at the package's init, which the
// front end runs too (it links the executor's checkpoint walk for gVisor).
func capNumber(name string) (int, bool) {
	switch name {
	case "CHOWN":
		return unix.CAP_CHOWN, true
	case "DAC_OVERRIDE":
		return unix.CAP_DAC_OVERRIDE, true
	case "FOWNER":
		return unix.CAP_FOWNER, true
	case "FSETID":
		return unix.CAP_FSETID, true
	case "KILL":
		return unix.CAP_KILL, true
	case "SETGID":
		return unix.CAP_SETGID, true
	case "SETUID":
		return unix.CAP_SETUID, true
	case "NET_BIND_SERVICE":
		return unix.CAP_NET_BIND_SERVICE, true
	}
	return 0, false
}

func dropThreadCapabilities(keep map[int]bool) error {
	for c := 0; c <= unix.CAP_LAST_CAP; c++ {
		if keep[c] {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) && c > unix.CAP_SETFCAP {
				// A kernel that knows fewer capabilities than x/sys
				// (gVisor's ends before CAP_CHECKPOINT_RESTORE):
				// those it lacks cannot be held.
				break
			}
			return fmt.Errorf("drop capability %d: %w", c, err)
		}
	}
	// gVisor has no ambient set (EINVAL): there is nothing to clear.
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	return clearInheritable()
}

func expect(r io.Reader, t execproto.Type, v execproto.Decodable) error {
	f, err := execproto.ReadFrame(r)
	if err != nil {
		return fmt.Errorf("read %s: %w", t, err)
	}
	if f.Type != t {
		return fmt.Errorf("got %s frame, want %s", f.Type, t)
	}
	return execproto.DecodeMessage(f.Payload, v)
}

// absorbSignals makes the executor immune to signals sent from inside the
// sandbox. The kernel delivers a signal to a PID namespace's init only if init
// has a handler, and the Go runtime installs one for most signals and then
// exits (TERM, INT, HUP) or dumps and exits (QUIT, ABRT, ILL, TRAP, STKFLT,
// SYS, and SEGV, BUS, FPE sent with kill) when nobody asked for it. Asking
// for those and dropping them keeps PID 1 alive. The runtime drops the
// others itself (USR1, ALRM, WINCH, real-time signals...) or leaves them at
// the default action, which the kernel never applies to init from inside
// (TSTP, CONT...); each signal asked for costs a round trip to the runtime's
// signal thread, so only those that need it are (TestAbsorbSignals sends
// them all). SIG_IGN would do the same but is inherited across exec, so every
// command would start with SIGTERM and SIGPIPE ignored; handlers are not.
//
// gVisor's kernel does not spare its init the default actions: there,
// the signals whose default action is to stop (TSTP, TTIN, TTOU) are asked
// for too, or they would stop PID 1 (the runtime leaves them at the
// default unless asked). The others that end a process by default need
// nothing more than natively: USR1, USR2, ALRM, XCPU, XFSZ, VTALRM, IO, PWR
// and the real-time signals 35-64 have the runtime's handler, which drops
// them when nobody asked (asking for them, as this did until 2026-12, cost
// 41 round trips to the signal thread: about 330 trapped system calls at
// every start). Signals 32-34 and KILL and STOP cannot be asked for (the
// runtime keeps 32-34 for libc): there the executor is out of kill's reach
// instead (outOfKillReach, docs/gvisor.md), as it is for every signal once
// its setup is done. TestAbsorbSignalsNotInit sends every signal to a
// process that is not an init, as PID 1 is to gVisor's kernel.
func absorbSignals(gvisor bool) {
	c := make(chan os.Signal, 16)
	sigs := absorbedSignals()
	if gvisor {
		sigs = append(sigs, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU)
	}
	signal.Notify(c, sigs...)
	go func() {
		for range c {
		}
	}()
}

// absorbedSignals are the signals absorbSignals asks for natively.
func absorbedSignals() []os.Signal {
	return []os.Signal{
		unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP,
		unix.SIGABRT, unix.SIGPIPE, unix.SIGTERM, unix.SIGSTKFLT, unix.SIGSYS,
		// Sent with kill, not raised by a fault: asked for, the runtime
		// hands them over instead of crashing (a fault still panics).
		unix.SIGSEGV, unix.SIGBUS, unix.SIGFPE,
	}
}

// absorbSignalsInit does what absorbSignals does natively, for an init
// on a Linux kernel, without its round trips to the runtime's signal
// thread (13 of them, 0.4 ms of a cold start that waited for them: cold29c
// in docs/benchmarks.md). The kernel delivers to a PID namespace's init
// no signal whose action is the default (but SIGKILL and SIGSTOP from an
// ancestor namespace), from whoever sends it, so it is enough to leave
// the runtime's handler where it is needed and take it away elsewhere:
// signal.Ignore makes the runtime's handler drop what a process sends of
// the signals it keeps for faults (ILL, TRAP, BUS, FPE, SEGV, STKFLT, SYS:
// a fault itself still panics or throws, as with absorbSignals), and sets
// the others (HUP, INT, QUIT, ABRT, PIPE, TERM) to SIG_IGN, which would be
// inherited across exec by every command: those are set to SIG_DFL,
// which exec keeps and the kernel never applies to init. Neither is a
// round trip. Not under gVisor, whose kernel applies default actions to
// PID 1 as to any process, nor in a pod, which may run under it.
func absorbSignalsInit() {
	sigs := absorbedSignals()
	signal.Ignore(sigs...)
	dfl := sigactionT{}
	for _, s := range sigs {
		var old sigactionT
		sig := uintptr(s.(unix.Signal))
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, 0, uintptr(unsafe.Pointer(&old)), 8, 0, 0); e != 0 || old.handler != sigIgn {
			continue
		}
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, sig, uintptr(unsafe.Pointer(&dfl)), 0, 8, 0, 0)
	}
}

// serve reads frames until the host closes the connection.
func (e *executor) serve(conn io.Reader) error {
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, unix.SIGCHLD)
	go e.reap(sigc)
	// Opened now, beside the host's wait for its first request, not on
	// the first command's time (a pool's sandbox runs one command).
	go func() { _, _ = e.devNull() }()
	// PID 1 ignores signals it has no handler for; the host ends the
	// sandbox by killing the PID namespace, never by signalling PID 1.
	// Buffered: a frame's header and a small payload come in one read.
	r := bufio.NewReaderSize(conn, execproto.ChunkSize+execproto.HeaderSize)
	for {
		f, err := execproto.ReadFrame(r)
		if err != nil {
			return err
		}
		if err := e.dispatch(f); err != nil {
			return err
		}
	}
}

func (e *executor) dispatch(f execproto.Frame) error {
	if f.Type == execproto.TOpen {
		var req execproto.Request
		if err := execproto.DecodeMessage(f.Payload, &req); err != nil {
			return err
		}
		e.mu.Lock()
		_, dup := e.streams[f.Stream]
		if dup {
			e.mu.Unlock()
			return fmt.Errorf("%w: stream %d opened twice", execproto.ErrFrame, f.Stream)
		}
		s := newStream(e, f.Stream, req)
		e.streams[f.Stream] = s
		e.mu.Unlock()
		go s.run()
		return nil
	}
	e.mu.Lock()
	s := e.streams[f.Stream]
	e.mu.Unlock()
	if s == nil {
		// Frames for a stream that already ended are expected (acks and
		// stdin racing the result); drop them.
		return nil
	}
	return s.handle(f)
}

func (e *executor) endStream(id uint32) {
	e.mu.Lock()
	delete(e.streams, id)
	e.mu.Unlock()
}

type exitInfo struct {
	status unix.WaitStatus
	rusage unix.Rusage
}

// reap is PID 1's duty: collect every child that exits, including orphans
// adopted from finished commands, and hand statuses to their waiters.
func (e *executor) reap(sigc <-chan os.Signal) {
	for range sigc {
		for e.reapOne(-1) {
		}
	}
}

// reapOne collects one exited child (any, for pid -1) without blocking and
// hands its status to its waiter. It holds mu across the wait, so the reaper
// and a command's own waiter never both act on one pid, and a pid cannot be
// reused while a waiter still holds it. It reports whether it collected one.
func (e *executor) reapOne(pid int) bool {
	var ws unix.WaitStatus
	var ru unix.Rusage
	e.mu.Lock()
	defer e.mu.Unlock()
	got, err := unix.Wait4(pid, &ws, unix.WNOHANG, &ru)
	if err != nil || got <= 0 {
		return false
	}
	if p := e.procs[got]; p != nil {
		delete(e.procs, got)
		p.done <- exitInfo{ws, ru} // buffered, never blocks
	} else if e.pending(got) {
		e.exited[got] = exitInfo{ws, ru}
	}
	return true
}

// watchExit collects p as soon as its pidfd, watched by the runtime poller,
// says it exited, without the detour through SIGCHLD, the runtime's signal
// thread and the reaper (about 0.1 ms a command). Whichever of the two
// collects p delivers its status on p.done. It closes pidfd.
func (e *executor) watchExit(p *proc, pidfd *os.File) {
	defer pidfd.Close()
	rc, err := pidfd.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(uintptr) bool {
		if e.reapOne(p.pid) {
			return true
		}
		// Not exited yet (wait for the pidfd again), or the reaper
		// collected it (done).
		e.mu.Lock()
		_, running := e.procs[p.pid]
		e.mu.Unlock()
		return !running
	})
}

// pending reports whether pid might belong to a start in flight, so its
// status must be kept for the starter. Preconditions: e.mu held.
func (e *executor) pending(int) bool { return e.starting > 0 }

// beginStart must precede every process start; register or abortStart must
// follow it.
func (e *executor) beginStart() {
	e.mu.Lock()
	e.starting++
	e.mu.Unlock()
}

func (e *executor) abortStart() {
	e.mu.Lock()
	e.starting--
	if e.starting == 0 {
		clear(e.exited)
	}
	e.mu.Unlock()
}

// register attaches a waiter to pid, or delivers a status reaped early.
func (e *executor) register(pid int) *proc {
	p := &proc{pid: pid, done: make(chan exitInfo, 1)}
	e.mu.Lock()
	e.starting--
	if info, ok := e.exited[pid]; ok {
		delete(e.exited, pid)
		p.done <- info
	} else {
		e.procs[pid] = p
	}
	if e.starting == 0 {
		clear(e.exited)
	}
	e.mu.Unlock()
	return p
}

type proc struct {
	pid  int
	done chan exitInfo
}
