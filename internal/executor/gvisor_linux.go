package executor

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// emptyEnviron gives the executor an empty environment under gVisor. What
// the process started with stays readable in /proc/1/environ (read from
// the process's memory, where exec put it), and gVisor's /proc lets root
// inside read it (runsc 20221219 checks no ptrace access there; natively
// the kernel does): the bundle's ExecutorEnv and what runsc adds (HOME).
// The executor needs no variable once the runtime has started (it read
// GOMAXPROCS=1 then; without it, it is set here). So the environment is
// cleared and its block overwritten with NULs in place (envBlock), and the
// file reads as NULs alone. Where the block is not where the ABI puts it,
// the executor executes itself again with no environment instead: a whole
// Go runtime's start more inside gVisor, every system call of it trapped,
// which is what this did before (docs/gvisor.md, "Cold start").
func emptyEnviron(args []string) error {
	env := os.Environ()
	if len(env) == 0 {
		runtime.GOMAXPROCS(1) // ExecutorEnv's GOMAXPROCS=1
		return nil
	}
	block := envBlock()
	if block == nil {
		// The executor binary, by its open file rather than its path.
		return unix.Exec("/proc/self/exe", args, []string{})
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "GOMAXPROCS=") }) {
		runtime.GOMAXPROCS(1)
	}
	os.Clearenv()
	clear(block)
	return nil
}

// envBlock returns the memory exec wrote the environment into: the bytes
// of /proc/self/environ, which are exactly that block's (every string, the
// ones the Go runtime drops as duplicates included, each ending in a NUL),
// or nil if they are not found where the ABI puts them. The ABI lays the
// strings out on the new stack one after the other: the arguments', then
// the environment's. The runtime copied the environment into Go strings,
// but os.Args are its strings in place: the block starts after the last
// argument's NUL, and it is taken only if it holds the file's bytes.
func envBlock() []byte {
	want, err := os.ReadFile("/proc/self/environ")
	if err != nil || len(want) == 0 || len(os.Args) == 0 || os.Args[len(os.Args)-1] == "" {
		return nil
	}
	last := os.Args[len(os.Args)-1]
	block := unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(unsafe.StringData(last)), len(last)+1)), len(want))
	if !bytes.Equal(block, want) {
		return nil
	}
	return block
}

// controlFromStdin moves the control socket from descriptor 0, where runsc
// hands it over, to execproto.ControlFD, and puts /dev/null in its place.
func controlFromStdin() error {
	if err := unix.Dup3(0, execproto.ControlFD, unix.O_CLOEXEC); err != nil {
		return err
	}
	null, err := unix.Open("/dev/null", unix.O_RDONLY, 0)
	if err != nil {
		return err
	}
	if null != 0 {
		if err := unix.Dup3(null, 0, 0); err != nil {
			return err
		}
		unix.Close(null)
	}
	return nil
}

// setupGVisor is setup under gVisor (execproto.Setup.GVisor): runsc built
// the root, /workspace, the mounts, /proc, /dev and the namespaces from the
// host's OCI bundle, and gVisor's kernel stands between the sandbox and the
// host's. What is left is the generated /etc, which the bundle leaves to the
// executor as an empty tmpfs. The layers it reports are those the bundle
// and gVisor enforce, the executor out of its commands' kill(2) reach
// among them (outOfKillReach, done before the handshake: start fails if
// it failed).
func setupGVisor(s *execproto.Setup) ([]string, uppers, error) {
	layers, up, err := setupBuiltRoot(s)
	if err != nil {
		return nil, up, err
	}
	return append(layers, "pid1:out-of-kill-reach"), up, nil
}

// setupBuiltRoot is what setup does in a root a runtime built (runsc, a
// container runtime in a pod): the generated /etc, home, the empty
// workspace's layers (layeredWorkspace) and the workspace's alias.
func setupBuiltRoot(s *execproto.Setup) ([]string, uppers, error) {
	none := uppers{ws: -1, root: -1, wsLower: -1}
	if err := s.Validate(); err != nil {
		return nil, none, err
	}
	up := none
	if m := s.Workspace.Mode; m == execproto.WorkspaceEmpty || m == "" {
		// Before the alias's bind, which shows the overlay.
		var err error
		if up.ws, up.wsLower, err = layeredWorkspace(workspacePath, !podInner); err != nil {
			// Not the sandbox's failure: its workspace is what the
			// runtime made, as before, and a delta walks it whole.
			fmt.Fprintf(os.Stderr, "airlock-exec: the workspace's lower layer: %v (every delta walks the whole workspace)\n", err)
			up = none
		}
	}
	root := "rootfs:template"
	if _, err := os.Lstat("/etc/passwd"); errors.Is(err, os.ErrNotExist) {
		// The host's root: the bundle left /etc an empty tmpfs (but for
		// the host's certificates bound in). A template root keeps its own.
		root = "rootfs:host-ro"
		etc := *s
		if s.Account != nil {
			etc.User = *s.Account // listed beside root
		}
		if err := writeEtc("/etc", &etc); err != nil {
			return nil, none, fmt.Errorf("/etc: %w", err)
		}
		// Nothing in the sandbox may change the generated /etc. gVisor
		// cannot remount it read-only, so nobody owns it: commands, root
		// included, run without capabilities and cannot write or chmod it.
		if err := chownEtc("/etc"); err != nil {
			return nil, none, fmt.Errorf("/etc: %w", err)
		}
	}
	if a := s.Account; a != nil && a.Home != s.WorkspaceAlias {
		if err := os.MkdirAll(a.Home, 0o700); err != nil {
			return nil, none, fmt.Errorf("home: %w", err)
		}
		if err := os.Chown(a.Home, a.UID, a.GID); err != nil {
			return nil, none, fmt.Errorf("home: %w", err)
		}
	}
	if a := s.WorkspaceAlias; a != "" {
		// The same mount, as natively: a path below either is one file.
		if err := os.MkdirAll(a, 0o755); err != nil {
			return nil, none, fmt.Errorf("workspace at %s: %w", a, err)
		}
		if err := unix.Mount(workspacePath, a, "", unix.MS_BIND, ""); err != nil {
			return nil, none, fmt.Errorf("workspace at %s: %w", a, err)
		}
	}
	mode := s.Workspace.Mode
	if mode == "" {
		mode = execproto.WorkspaceEmpty
	}
	layers := []string{"runtime:gvisor", root, "workspace:" + mode, "namespaces:gvisor", "network:loopback-only"}
	if up.wsLower >= 0 {
		layers = append(layers, execproto.LayerRestoreLayer)
	}
	return layers, up, nil
}

// executorUID is the executor's real and saved uid under gVisor: no
// command's (they run as root, 1000 or the account's; lookupUser refuses it).
const executorUID = 65533

// outOfKillReach puts the executor out of reach of kill(2) from inside.
// gVisor does not spare its PID 1 SIGKILL and SIGSTOP, as Linux spares its
// init: root inside could end or freeze the sandbox. kill needs CAP_KILL
// (no command has it) or the sender's real or effective uid to be the
// target's real or saved uid, so the executor takes executorUID as both,
// keeping effective uid 0 and, with that, its capabilities (the kernel
// clears them only when no id stays 0).
//
// Every thread keeps its capabilities across uid changes (PR_SET_KEEPCAPS),
// for the file operations' switch of a thread's effective ids
// (setEffectiveIDs): going back to root they raise CAP_SETUID from the
// permitted set, as the saved uid is no longer 0. Both are set on every
// thread at once (the Go runtime's all-threads system call), and threads
// made later inherit them; exec clears keep-caps, so commands do not.
// Main calls it before the handshake, while the runtime has its fewest
// threads: each all-threads call stops the world and signals every other
// thread, which under gVisor are trapped calls and a spin of sched_yield
// until each has answered (65 calls in the setup, 10 before the handshake).
func outOfKillReach() error {
	if _, _, e := syscall.AllThreadsSyscall(unix.SYS_PRCTL, unix.PR_SET_KEEPCAPS, 1, 0); e != 0 {
		return fmt.Errorf("keep capabilities: %w", e)
	}
	if err := syscall.Setresuid(executorUID, 0, executorUID); err != nil {
		return fmt.Errorf("setresuid: %w", err)
	}
	return nil
}

// proxied says whether the sandbox has the egress proxy: its socket was
// bound in by the executor (ProxyFD) or, under gVisor, by the runtime.
func (e *executor) proxied() bool {
	return e.setup.ProxyFD != 0 || (e.setup.GVisor && e.setup.ProxyAddr != "")
}

// nobodyID owns the generated /etc under gVisor.
const nobodyID = 65534

// chownEtc gives the generated files of etc, and etc itself, to nobody.
func chownEtc(etc string) error {
	ents, err := os.ReadDir(etc)
	if err != nil {
		return err
	}
	for _, e := range ents {
		if e.Type().IsRegular() {
			// A file bound in read-only (the host's certificates and
			// linker cache) cannot be changed anyway: gVisor since 2023
			// refuses its chown with EROFS, as Linux does.
			if err := os.Lchown(filepath.Join(etc, e.Name()), nobodyID, nobodyID); err != nil && !errors.Is(err, unix.EROFS) {
				return err
			}
		}
	}
	return os.Lchown(etc, nobodyID, nobodyID)
}
