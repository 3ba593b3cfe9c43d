// Package sandbox is the backend-neutral contract of an airlock sandbox: a
// disposable, isolated place to run the commands and file operations a model
// chooses. A Backend creates sandboxes from a Spec; a Sandbox lives across
// many commands until it is destroyed or its TTL ends. Every result carries a
// structured Outcome, so a limit never looks like a hang or a plain failure.
// A Network attaches the host's bridge (egress proxy, LLM gateway) to a
// sandbox before it is created, by editing its Spec.
//
// Implementations live in subpackages (linux is the native one) and must pass
// the conformance suite in sandboxtest, attacks included. There is no
// unconfined backend, not even for tests.
package sandbox

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"path"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// Outcome says how a command ended.
type Outcome string

// Outcomes. Anything but OutcomeExited and OutcomeSignaled means airlock ended
// the command because a limit was reached or the sandbox was lost.
const (
	OutcomeExited      Outcome = execproto.OutcomeExited
	OutcomeSignaled    Outcome = execproto.OutcomeSignaled
	OutcomeTimeout     Outcome = execproto.OutcomeTimeout
	OutcomeOOM         Outcome = execproto.OutcomeOOM
	OutcomePidsLimit   Outcome = execproto.OutcomePidsLimit
	OutcomeOutputLimit Outcome = execproto.OutcomeOutputLimit
	OutcomeDiskFull    Outcome = execproto.OutcomeDiskFull
	OutcomeLost        Outcome = execproto.OutcomeLost
)

// Why a command did not start (Result.NotStarted). Its result is then
// OutcomeExited with the shell's code: 127 not found, 126 not executable.
const (
	CommandNotFound      = execproto.CommandNotFound
	CommandNotExecutable = execproto.CommandNotExecutable
)

// Workspace modes.
const (
	WorkspaceCOW = execproto.WorkspaceCOW // overlay over the host directory: the host copy never changes
	WorkspaceRO  = execproto.WorkspaceRO  // the host directory, read-only
	WorkspaceRW  = execproto.WorkspaceRW  // the host directory, writable: changes reach the host
)

// Network modes.
const (
	NetworkNone  = "none"  // loopback only, no route anywhere
	NetworkProxy = "proxy" // loopback plus a forwarder to the host's egress socket
)

// Spec describes a sandbox to create.
type Spec struct {
	// ID names the sandbox; empty means a new random one (NewID). A host
	// that must name the sandbox before it exists (to bind an egress proxy
	// to it) sets it.
	ID string
	// RootFS is a template root filesystem (an unpacked image). Empty means
	// the host's system directories, read-only, with a generated /etc
	// (unless Layers is set).
	RootFS string
	// Layers, instead of RootFS, are the read-only layers of an image's
	// root, lowest first (at most MaxLayers): host directories as package
	// image unpacks them, with whiteouts in overlayfs form. The root is
	// their overlay, without a copy, under a throwaway upper layer in the
	// sandbox's disk quota. While the sandbox lives, its backend holds a
	// shared flock(2) on each directory, so that whoever collects unused
	// layers (image.Store.GC, which takes it exclusively) never removes one
	// in use.
	Layers []string
	// WritableRoot lets commands write anywhere in an image (Layers) or
	// template root, where they otherwise write only to /workspace, /tmp
	// and home: the writes land in the root's upper layer (in the disk
	// quota), which a root checkpoint streams (CheckpointRequest.Root).
	// /tmp is then the root's own directory, not a scratch mount. An
	// image build's steps run so, and E2B's sandboxes (a whole writable
	// machine there). With the host's root, the root directory is the
	// sandbox's scratch and each system directory (/usr, /opt...) an
	// overlay of the host's, id-mapped so that the sandbox's root may
	// change it, under an upper layer in the same quota: nothing reaches
	// the host. Those writes are not in checkpoints (the root's upper
	// layers are not one tree). The gVisor runtime's writable root is
	// its in-memory overlay of every mount.
	WritableRoot bool
	// Sudo gives commands a sudo command that runs a command as the
	// sandbox's root (or another of its users): in its user namespace,
	// without capabilities (unless RootCaps), under the same seccomp,
	// Landlock and no_new_privs as every command; never a privilege of
	// the host's. Native runtime only: elsewhere there is no sudo.
	Sudo bool
	// RootCaps, with WritableRoot only, are capabilities (names of
	// execproto.RootCapabilities: BuildCaps) that commands run as the
	// sandbox's root keep inside its user namespace, as package managers
	// need (chown to a package's user, apt's switch to _apt). Everything
	// else stays as in any sandbox: no other capability, seccomp,
	// Landlock, no_new_privs, the namespace's own ids only.
	RootCaps []string
	// Dir is where commands that name no directory run (an image's
	// working directory); empty means /workspace.
	Dir string
	// Workspace is the host directory shown at /workspace; empty gives an
	// empty writable workspace.
	Workspace     string
	WorkspaceMode string // cow (default), ro, rw
	Mounts        []Mount
	// StaticReadOnly says the host leaves the read-only workspace and
	// read-only mounts unchanged while the sandbox runs. The native
	// runtime then mounts each such directory as an overlay of one
	// detached layer (Linux 6.13), whose line in mountinfo names no host
	// path, where a bind's names its source's path (docs/gvisor.md); the
	// sandbox may then miss changes the host makes anyway (overlayfs
	// caches names: a file made after the sandbox looked for it stays
	// missing, a removed one stays). Without it, or on an older kernel,
	// they are read-only binds, which show the host's changes at once.
	StaticReadOnly bool
	// Env is added to every command's environment. Nothing of the host's
	// environment passes in unless named here or in a Command.
	Env    []string
	Limits Limits
	// Network is NetworkNone (default) or NetworkProxy.
	Network string
	// ProxySocket is the host's unix socket that connections from the
	// sandbox are forwarded to in proxy mode.
	ProxySocket string
	// TrustedCAs are PEM certificates added to the sandbox's trust store
	// (the system bundle and the variables common tools read: SSL_CERT_FILE,
	// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO, PIP_CERT,
	// NODE_EXTRA_CA_CERTS), for example the egress proxy's per-run CA.
	TrustedCAs []byte
	// TTL ends the sandbox after this long; 0 means no TTL.
	TTL time.Duration
	// User runs commands by default: a name or uid inside the sandbox;
	// empty means the unprivileged sandbox user.
	User string
	// Account renames the unprivileged sandbox user and moves its home,
	// for clients that expect another account; the zero value is the
	// user sandbox with the home /home/sandbox.
	Account Account
	// Runtime isolates the sandbox: RuntimeNative (the default, empty) or
	// RuntimeGVisor. A backend refuses a runtime it cannot give.
	Runtime string
}

// Runtimes: what isolates a sandbox.
const (
	// RuntimeNative is Linux namespaces, seccomp, Landlock and cgroups on
	// the host's kernel.
	RuntimeNative = "native"
	// RuntimeGVisor is gVisor (runsc): the sandbox's system calls reach
	// gVisor's user-space kernel, not the host's.
	RuntimeGVisor = "gvisor"
)

// ValidRuntime reports whether r names a runtime ("" is the default).
func ValidRuntime(r string) bool {
	return r == "" || r == RuntimeNative || r == RuntimeGVisor
}

// Account is the unprivileged sandbox user as a client expects to find
// it (E2B's user in /home/user).
type Account struct {
	// Name is the user's name; empty means sandbox. Where the backend runs
	// rootless, its one mapped user is root and keeps that name.
	Name string
	// Home is the user's home, a directory of /home; empty means
	// /home/<Name>.
	Home string
	// HomeIsWorkspace makes Home the workspace itself, bound there (the
	// same files as /workspace), so that what the user keeps at home is
	// what checkpoints and exports of the workspace keep. Without it the
	// home is a scratch directory that ends with the sandbox.
	HomeIsWorkspace bool
	// RootHome gives root a writable home at /root, a scratch directory
	// that ends with the sandbox; without it /root is as read-only as the
	// rest of the root file system.
	RootHome bool
}

// HomeOf returns the account's home.
func (a Account) HomeOf() string {
	switch {
	case a.Home != "":
		return a.Home
	case a.Name != "":
		return "/home/" + a.Name
	}
	return "/home/sandbox"
}

// validAccountName matches the user names an Account may take: what
// useradd accepts by default, lowercase and short.
func validAccountName(n string) bool {
	if n == "" || len(n) > 32 || n == "root" || n == "nobody" {
		return false
	}
	for i, c := range n {
		if !(c >= 'a' && c <= 'z' || c == '_' || i > 0 && (c >= '0' && c <= '9' || c == '-')) {
			return false
		}
	}
	return true
}

// MaxLayers bounds Spec.Layers: Docker's own bound on an image's layers
// (127) with room to spare, well below overlayfs's 500 lower layers and
// what fits in one page of mount options.
const MaxLayers = 128

// Mount is an extra bind mount.
type Mount struct {
	Source   string
	Target   string
	ReadOnly bool
}

// Limits bound a sandbox's resources.
type Limits struct {
	MemoryBytes int64
	Pids        int64
	CPUs        float64
	DiskBytes   int64 // each writable layer: workspace changes and home, /tmp
	// RequireHard makes creation fail when a memory, pids or CPU limit
	// cannot be enforced on this machine.
	RequireHard bool
}

// DefaultLimits are the limits of `airlock sandbox run`.
var DefaultLimits = Limits{MemoryBytes: 1 << 30, Pids: 512, CPUs: 1, DiskBytes: 1 << 30, RequireHard: true}

// Validate reports every problem of the spec at once.
func (s *Spec) Validate() error {
	var errs []error
	if s.ID != "" && !validID(s.ID) {
		errs = append(errs, fmt.Errorf("sandbox id %q: want sb- and 1 to 32 lowercase letters, digits or dashes", s.ID))
	}
	switch s.WorkspaceMode {
	case "", WorkspaceCOW, WorkspaceRO, WorkspaceRW:
	default:
		errs = append(errs, fmt.Errorf("workspace mode %q: want cow, ro or rw", s.WorkspaceMode))
	}
	if s.WorkspaceMode != "" && s.Workspace == "" {
		errs = append(errs, errors.New("workspace mode given without a workspace directory"))
	}
	if len(s.Layers) > 0 && s.RootFS != "" {
		errs = append(errs, errors.New("image layers and a template root exclude each other"))
	}
	if err := execproto.CheckRootCaps(s.RootCaps, s.WritableRoot); err != nil {
		errs = append(errs, err)
	}
	if len(s.Layers) > MaxLayers {
		errs = append(errs, fmt.Errorf("%d image layers: at most %d", len(s.Layers), MaxLayers))
	}
	for _, l := range s.Layers {
		if !path.IsAbs(l) || path.Clean(l) != l {
			errs = append(errs, fmt.Errorf("image layer %q: want a clean absolute host path", l))
		}
	}
	if s.Dir != "" && (!path.IsAbs(s.Dir) || path.Clean(s.Dir) != s.Dir) {
		errs = append(errs, fmt.Errorf("working directory %q: want a clean absolute path", s.Dir))
	}
	for _, m := range s.Mounts {
		if err := m.validate(); err != nil {
			errs = append(errs, err)
		}
	}
	for _, e := range s.Env {
		if k, _, ok := strings.Cut(e, "="); !ok || k == "" {
			errs = append(errs, fmt.Errorf("environment entry %q: want KEY=VALUE", e))
		}
	}
	if !ValidRuntime(s.Runtime) {
		errs = append(errs, fmt.Errorf("runtime %q: want native or gvisor", s.Runtime))
	}
	switch s.Network {
	case "", NetworkNone:
		if s.ProxySocket != "" {
			errs = append(errs, errors.New("proxy socket given without proxy network mode"))
		}
	case NetworkProxy:
		if s.ProxySocket == "" {
			errs = append(errs, errors.New("proxy network mode needs a proxy socket"))
		}
	default:
		errs = append(errs, fmt.Errorf("network mode %q: want none or proxy", s.Network))
	}
	if len(s.TrustedCAs) > 0 {
		if err := checkPEMCerts(s.TrustedCAs); err != nil {
			errs = append(errs, err)
		}
	}
	l := s.Limits
	if l.MemoryBytes < 0 || l.Pids < 0 || l.CPUs < 0 || l.DiskBytes < 0 {
		errs = append(errs, errors.New("limits must not be negative"))
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 4<<20 {
		errs = append(errs, errors.New("memory limit below 4 MiB cannot start a sandbox"))
	}
	if l.Pids > 0 && l.Pids < 4 {
		errs = append(errs, errors.New("pids limit below 4 cannot start a sandbox"))
	}
	if s.TTL < 0 {
		errs = append(errs, errors.New("ttl must not be negative"))
	}
	if a := s.Account; a.Name != "" && !validAccountName(a.Name) {
		errs = append(errs, fmt.Errorf("account name %q: want 1 to 32 of a-z, 0-9, _ and -, starting with a letter or _, and not root or nobody", a.Name))
	}
	if h := s.Account.Home; h != "" && (path.Clean(h) != h || path.Dir(h) != "/home") {
		// Why only /home/<name>: a home elsewhere could cover the
		// sandbox's own machinery (/run/airlock, /proc, /etc).
		errs = append(errs, fmt.Errorf("account home %q: want a directory of /home", h))
	}
	return errors.Join(errs...)
}

// reservedTargets are paths a mount may not cover: they hold the sandbox's
// own machinery.
var reservedTargets = []string{"/", "/proc", "/dev", "/run/airlock", "/etc"}

func (m Mount) validate() error {
	if m.Source == "" || !path.IsAbs(m.Source) {
		return fmt.Errorf("mount source %q: want an absolute host path", m.Source)
	}
	if m.Target == "" || !path.IsAbs(m.Target) || path.Clean(m.Target) != m.Target {
		return fmt.Errorf("mount target %q: want a clean absolute path", m.Target)
	}
	for _, r := range reservedTargets {
		if m.Target == r || (r != "/" && strings.HasPrefix(m.Target, r+"/")) {
			return fmt.Errorf("mount target %q: %s is reserved", m.Target, r)
		}
	}
	return nil
}

// Command is one command to run in a sandbox.
type Command struct {
	Argv   []string
	Env    []string // added to the sandbox's Env
	Dir    string   // default the Spec's Dir, else /workspace
	User   string   // default the sandbox's user
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	TTY    bool
	Rows   uint16
	Cols   uint16
	// Timeout bounds the command's wall clock; 0 means none.
	Timeout time.Duration
	// MaxOutput caps stdout+stderr; 0 means no cap.
	MaxOutput int64
	// Fingerprint, when set, names a tree (e.g. /workspace) whose
	// fingerprint the result carries, taken when the command has ended: a
	// cheap way to learn whether the command changed it.
	Fingerprint string
	// Bulk says the command moves bulk data through its stdin or stdout
	// (an archive unpacked or packed): the backend may give its streams a
	// larger flow-control window and frames (execproto.BulkWindow) than an
	// interactive command's, which cap a stream at about 200 MB/s.
	Bulk bool
}

// Usage is what a command consumed.
type Usage struct {
	Wall       time.Duration `json:"wall_ns"`
	CPU        time.Duration `json:"cpu_ns"`
	MaxRSS     int64         `json:"max_rss_bytes"`
	MemoryPeak int64         `json:"memory_peak_bytes,omitempty"` // of the whole sandbox, when cgroups tell
}

// Result is how a command ended.
type Result struct {
	Outcome  Outcome `json:"outcome"`
	ExitCode int     `json:"exit_code"`
	Signal   int     `json:"signal,omitempty"`
	// NotStarted says why the command did not start (CommandNotFound,
	// CommandNotExecutable); empty when it started, whatever its exit
	// code.
	NotStarted string `json:"not_started,omitempty"`
	// Message explains, in one line, an outcome that airlock caused or
	// why the command did not start.
	Message string `json:"message,omitempty"`
	Usage   Usage  `json:"usage"`
	// Fingerprint of Command.Fingerprint's tree after the command, when
	// asked for and walkable; equal fingerprints mean an unchanged tree.
	Fingerprint string `json:"fingerprint,omitempty"`
}

// Process is a running command.
type Process interface {
	Signal(sig unix.Signal) error
	Resize(rows, cols uint16) error
	// Wait waits for the command; cancelling ctx kills its process tree.
	Wait(ctx context.Context) (Result, error)
}

// FileInfo describes a file inside a sandbox.
type FileInfo struct {
	Name    string
	Size    int64
	Mode    fs.FileMode
	ModTime time.Time
	Link    string // a symlink's target as it is written
	// Owner and Group are the names the sandbox's passwd gives the
	// file's owner and group (decimal ids where it has none).
	Owner, Group string
	// Xattrs are the file's user.* extended attributes, names without
	// "user." (nil for none).
	Xattrs map[string]string
}

// FileReader is a file's content streamed out of a sandbox (Sandbox.Open).
type FileReader interface {
	io.ReadCloser
	// Stat describes the file as it was when opened, without its
	// extended attributes and Link.
	Stat() FileInfo
}

// ErrNotRegular is matched by a read of a FIFO, socket or device inside a
// sandbox: only regular files are read.
var ErrNotRegular = errors.New("not a regular file")

// ErrTooLarge is matched by a read of a file over the read's limit.
var ErrTooLarge = errors.New("file over the read's limit")

// WatchOp is the kind of a WatchEvent.
type WatchOp string

// Kinds of change a watch reports.
const (
	WatchCreate WatchOp = execproto.WatchCreate // created, or moved into the tree
	WatchWrite  WatchOp = execproto.WatchWrite  // a file's content changed
	WatchRemove WatchOp = execproto.WatchRemove // deleted
	WatchRename WatchOp = execproto.WatchRename // moved away; the new name comes as a create
	WatchChmod  WatchOp = execproto.WatchChmod  // mode, owner or times changed
	// WatchOverflow says events were lost (the watcher read too slowly,
	// or a directory below could not be watched): list the tree again.
	WatchOverflow WatchOp = execproto.WatchOverflow
)

// WatchEvent is one change in a watched tree (Sandbox.Watch).
type WatchEvent struct {
	Op WatchOp
	// Path is absolute, inside the sandbox.
	Path string
	// Dir is set when Path is a directory.
	Dir bool
}

// EventDrops counts what a sandbox's executor dropped of its event channel
// (execproto says when).
type EventDrops = execproto.EventDrops

// EventLine is one line a process in the sandbox wrote to its event
// channel (execproto.EventSocket), without its newline, or, when Drops is
// set, the executor's counts of what it dropped so far. A line is untrusted
// bytes: the host validates it before anything records it.
type EventLine struct {
	Line  []byte
	Drops *EventDrops
}

// EventSource is implemented by sandboxes whose processes can send the host
// events through the event channel.
type EventSource interface {
	// Events streams the channel's lines until ctx ends or the sandbox
	// is gone; then the channel is closed. One stream runs at a time (a
	// second is closed at once). The caller reads until the channel is
	// closed or cancels ctx; lines that come while it does not read are
	// queued by the executor up to a bound and then dropped and counted,
	// and the sandbox's writers never wait. drain asks for what the
	// sandbox holds and then the end: the channel is closed after the
	// last line (lines written by a command that has ended, through
	// airlock-event, are among them).
	Events(ctx context.Context) (lines <-chan EventLine, drain func(), err error)
}

// ErrLost reports that the sandbox is gone: it died, was destroyed, or
// its executor broke the protocol. Every backend wraps it, so callers can
// tell a lost sandbox (provision another) from a command's failure.
var ErrLost = errors.New("sandbox lost")

// ErrPortClosed reports a Connect to a port nothing in the sandbox listens
// on (the dial was refused).
var ErrPortClosed = errors.New("nothing listens on the port")

// backgroundKey marks a context of a create made ahead of demand.
type backgroundKey struct{}

// Background returns ctx marking a Create made ahead of demand (a pool's
// refill): a backend that can starts that sandbox at a CPU priority below
// every sandbox in use, so that making it takes only the CPU they leave,
// until Foreground raises it (Prioritizer). A backend that cannot ignores
// the mark.
func Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// IsBackground reports whether ctx is Background's.
func IsBackground(ctx context.Context) bool {
	b, _ := ctx.Value(backgroundKey{}).(bool)
	return b
}

// Prioritizer is implemented by sandboxes a backend can start in the
// Background.
type Prioritizer interface {
	// Foreground raises the sandbox to the CPU priority of sandboxes in
	// use; it is what hands a sandbox made ahead of demand out. A sandbox
	// not made in the Background is there already.
	Foreground() error
}

// Connector is implemented by sandboxes whose TCP ports the host can reach:
// the connection is relayed by the sandbox's executor, which dials the port
// on the sandbox's own loopback (127.0.0.1, then ::1), never an address
// outside the sandbox; the sandbox keeps no network interface but loopback.
// Whether a port may be reached at all is the caller's decision.
type Connector interface {
	// Connect opens a connection to port (1 to 65535) inside the
	// sandbox. ctx bounds only the dial; the returned conn lives until it
	// is closed or the sandbox ends. Nothing listening matches
	// ErrPortClosed. The conn supports CloseWrite() error, a half-close
	// (the server reads EOF and may still answer), and deadlines, which
	// unblock a waiting Read or Write with os.ErrDeadlineExceeded as
	// net.Conn says. Once the sandbox is gone, Read and Write fail with an
	// error that wraps ErrLost.
	Connect(ctx context.Context, port int) (net.Conn, error)
}

// EarlyConnector is implemented by Connectors that can also connect as
// TCP Fast Open does, with the first bytes in the opening: ConnectEarly
// returns without waiting for the dial inside the sandbox, and what is
// written to the conn at once travels right behind the opening, so a
// request's first bytes save the round trip to the executor and back
// that Connect waits for. The conn is Connect's in every other way, but
// a failed dial shows only at its first Read or Write: a *net.OpError
// whose Op is "dial" (DialError finds it), wrapping ErrPortClosed when
// nothing listens, ErrLost when the sandbox is gone.
type EarlyConnector interface {
	Connector
	ConnectEarly(port int) (net.Conn, error)
}

// ConnectEarly connects to port with c's ConnectEarly when it has one,
// or else with its Connect.
func ConnectEarly(ctx context.Context, c Connector, port int) (net.Conn, error) {
	if ec, ok := c.(EarlyConnector); ok {
		return ec.ConnectEarly(port)
	}
	return c.Connect(ctx, port)
}

// DialError returns the failed dial inside err, an error of a Read or
// Write of an EarlyConnector's conn (or of whatever wraps it, an HTTP
// transport's error), or nil when err is no failed dial.
func DialError(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "dial" {
		if _, ok := oe.Addr.(PortAddr); ok {
			return oe.Err
		}
	}
	return nil
}

// PortAddr is the remote address of a Connector's conn: a port of a
// sandbox. The zero PortAddr, "host", is its local address.
type PortAddr struct {
	Sandbox string
	Port    int
}

// Network is "sandbox".
func (a PortAddr) Network() string { return "sandbox" }

func (a PortAddr) String() string {
	if a.Sandbox == "" {
		return "host"
	}
	return a.Sandbox + ":" + strconv.Itoa(a.Port)
}

// FileError is a file operation's failure inside the sandbox.
type FileError struct {
	Op, Path string
	Errno    string // ENOENT, EACCES, ... or empty
	Msg      string
}

func (e *FileError) Error() string { return e.Op + " " + e.Path + ": " + e.Msg }

// Is maps well-known errnos to fs errors, so callers can use errors.Is(err, fs.ErrNotExist).
func (e *FileError) Is(target error) bool {
	switch target {
	case fs.ErrNotExist:
		return e.Errno == "ENOENT"
	case fs.ErrExist:
		return e.Errno == "EEXIST" || e.Errno == "ENOTEMPTY"
	case fs.ErrPermission:
		return e.Errno == "EACCES" || e.Errno == "EPERM" || e.Errno == "EROFS"
	case ErrNotRegular:
		return e.Op == "read" && e.Errno == "EINVAL"
	case ErrTooLarge:
		return e.Errno == "EFBIG"
	}
	return false
}

// LiveUsage is what a live sandbox holds now, as its backend measures it
// (what `sandbox ls` shows).
type LiveUsage struct {
	MemoryBytes int64         `json:"memory_bytes"`
	CPU         time.Duration `json:"cpu_ns"`
	Pids        int64         `json:"pids"`
}

// Sandbox is one live sandbox.
type Sandbox interface {
	ID() string
	Start(ctx context.Context, cmd Command) (Process, error)
	// ReadFile returns the content of the regular file at path (a FIFO,
	// socket or device matches ErrNotRegular); limit > 0 cuts it there.
	ReadFile(ctx context.Context, path string, limit int64) ([]byte, error)
	// Open opens the regular file at path (symlinks followed) to stream
	// its content: it returns once the file is open, before any of its
	// data, with the open file described (FileReader.Stat), so a swap of
	// the path's names afterwards changes nothing. Reads yield exactly
	// Stat().Size bytes and then io.EOF (a file that grew while read is
	// cut at its size when opened; one that shrank fails the Read that
	// finds it out); a Size of 0 (a /proc file) is read to its end. A
	// file of more than limit bytes (limit > 0) is refused before any
	// data, one that yields more fails the Read past it: both match
	// ErrTooLarge. A FIFO, socket or device matches ErrNotRegular, a
	// directory is an error. The host holds at most the stream's flow
	// window of the file, whatever its size: a reader that stops
	// reading stops the read inside the sandbox. Close ends the stream
	// (cancelling what is left of it); ctx bounds the whole read.
	Open(ctx context.Context, path string, limit int64) (FileReader, error)
	WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error
	List(ctx context.Context, path string) ([]FileInfo, error)
	Stat(ctx context.Context, path string) (FileInfo, error)
	Mkdir(ctx context.Context, path string, mode fs.FileMode, recursive bool) error
	Remove(ctx context.Context, path string, recursive bool) error
	Rename(ctx context.Context, oldPath, newPath string) error
	// Export writes a tar stream of the tree at path inside the sandbox.
	Export(ctx context.Context, path string, w io.Writer) error
	// Watch reports changes under the directory at path (and, if
	// recursive, below it, in directories made later too) until ctx ends
	// or the sandbox dies, or the directory itself is removed or moved;
	// then the channel is closed. It returns once the watch is in place:
	// every change made after it is reported. Paths resolve inside the
	// sandbox as other file operations', with the default user's rights;
	// symlinks below path are not followed. The caller reads until the
	// channel is closed or cancels ctx; a watcher that reads too slowly
	// loses events and gets a WatchOverflow instead. A missing path
	// matches fs.ErrNotExist.
	Watch(ctx context.Context, path string, recursive bool) (<-chan WatchEvent, error)
	// Diff writes a unified diff of /workspace against its source directory.
	Diff(ctx context.Context, w io.Writer) error
	// Info describes the sandbox and what it enforces.
	Info() Info
	// Done is closed when the sandbox is gone (destroyed, TTL, or lost).
	Done() <-chan struct{}
	// Destroy kills every process and removes every mount, cgroup and file
	// of the sandbox. It is idempotent.
	Destroy(ctx context.Context) error
}

// Info describes a live sandbox.
type Info struct {
	ID        string    `json:"id"`
	Backend   string    `json:"backend"`
	Created   time.Time `json:"created"`
	Workspace string    `json:"workspace,omitempty"`
	// Layers lists what is enforced, e.g. "seccomp", "landlock:abi7",
	// "cgroup:v1:memory".
	Layers []string `json:"layers"`
}

// Metrics are what a sandbox used as its host measures it (cgroup
// counters), never as anything inside it reports.
type Metrics struct {
	// CPU is the CPU time of every process the sandbox ever ran.
	CPU time.Duration
	// Memory is the memory charged to the sandbox now, in bytes (its
	// processes and its in-memory file systems); 0 when unknown.
	Memory int64
}

// Measurer is implemented by sandboxes whose host can measure them. It is
// called at every step of a run: keep it to a file read or two.
type Measurer interface {
	Measure() (Metrics, error)
}

// DiskUsage is how full a sandbox's writable layers are (what a command
// writes outside a rw workspace).
type DiskUsage struct {
	Used  int64 // bytes
	Total int64 // bytes the layers may hold
}

// DiskMeasurer is implemented by sandboxes that can say how full their
// writable layers are. Unlike Measure it asks the sandbox (a round trip to
// its executor, which reads file-system counters), so callers sample it,
// not call it at every step; and what it says comes from inside the
// sandbox, fit for display, not for billing or limits.
type DiskMeasurer interface {
	MeasureDisk(ctx context.Context) (DiskUsage, error)
}

// Importer is implemented by sandboxes whose executor unpacks tar streams
// itself, so the sandbox needs no tar of its own.
type Importer interface {
	// Import unpacks the tar stream r (ustar, PAX or GNU; not compressed)
	// into the existing directory at path, as the sandbox's file user
	// (FileUser): files, directories, symlinks, hard links and FIFOs with
	// their permission bits and modification times, owned by that user.
	// An entry named with "..", under a symlinked directory, a device
	// node or of an unknown type fails it with an error naming the entry;
	// what was unpacked before stays.
	Import(ctx context.Context, path string, r io.Reader) error
}

// Checkpointer is implemented by sandboxes whose executor can say what
// changed in /workspace.
//
// The stream is "airlock delta v1": a POSIX tar stream (PAX where a field
// does not fit) whose names are relative to /workspace, directories with a
// trailing "/"; entries are regular files, directories, symlinks (never
// followed), hard links to a name that exists once the earlier entries are
// applied, and FIFOs, with permission bits, numeric owner and mtime with
// nanoseconds; sockets and device nodes are skipped. Deletions are OCI
// whiteouts: an empty regular file DIR/.wh.NAME deletes DIR/NAME and all
// below it, DIR/.wh..wh..opq right after DIR's entry says DIR's previous
// children are gone. An entry replaces whatever was at its path, a
// directory over a directory keeping its children. A full stream has no
// whiteouts. A workspace file whose name starts with ".wh." cannot be
// represented: the checkpoint fails naming it, as it does when a file
// changes while it is read (that error's Errno is EAGAIN: try again).
type Checkpointer interface {
	// Checkpoint writes to w the delta stream of /workspace since the
	// baseline named since (the whole tree, Full, when since is "" or
	// unknown to the sandbox), records the tree as it is now as a new
	// baseline, and returns its name. With req.MarkOnly it writes nothing
	// and only records the baseline (after a restore). The sandbox keeps
	// at least the last two baselines, so a checkpoint the host failed to
	// store can be taken again since the one before.
	Checkpoint(ctx context.Context, req CheckpointRequest, w io.Writer) (CheckpointResult, error)
}

// CheckpointRequest asks for a checkpoint (Checkpointer).
type CheckpointRequest struct {
	// Since names the baseline the delta is taken against; "" asks for
	// the whole tree.
	Since string
	// MarkOnly records a baseline and streams nothing.
	MarkOnly bool
	// Root asks for the root file system's changes instead of
	// /workspace's: the upper layer of an image (Spec.Layers) or template
	// root, as an OCI layer's tar (what an image build commits). Deltas
	// only: mark a baseline first, then take deltas since it; a full
	// stream is refused. /workspace, /proc, /dev and home are mounts of
	// their own, not in it; so is /tmp without WritableRoot.
	Root bool
}

// CheckpointResult is what a checkpoint recorded and wrote.
type CheckpointResult struct {
	Baseline string // name of the new baseline
	Full     bool   // the stream is the whole tree (since was "" or unknown)
	Entries  int64  // entries written; Bytes: file bytes written
	Bytes    int64
	// Walked counts the entries the sandbox's walk looked at: the whole
	// tree where it has no layer of changes to read, only the changed
	// layer's entries where it has (a cow workspace, an empty one, a
	// restored or uploaded one); 0 when the sandbox does not say.
	Walked int64
}

// ErrFrozen reports an operation on a frozen sandbox (Freezer): nothing in
// it runs until it is thawed. It does not wrap ErrLost: the sandbox lives.
var ErrFrozen = errors.New("sandbox frozen")

// Freezer is implemented by sandboxes the host can stop and resume in
// place, every process of them, the executor's included: a pause that
// keeps memory. The processes keep their PIDs, memory, open files and
// connections; their clocks go on (a sleep that ends while frozen returns
// at the thaw, a command's timeout counts the frozen time), and a peer of
// an open connection sees no answer meanwhile. Only the host can thaw: the
// freeze is written in the sandbox's cgroup, which nothing inside can
// write to.
type Freezer interface {
	// FreezeKind says how Freeze freezes ("cgroup-v2", "cgroup-v1"), or
	// returns an error saying why this sandbox cannot be frozen.
	FreezeKind() (string, error)
	// Freeze stops every process of the sandbox and returns once the
	// kernel reports all of them stopped (a process stuck in an
	// uninterruptible sleep can hold it back until ctx ends: then the
	// sandbox is thawed and the error returned). Until Thaw, operations
	// that need the executor fail with ErrFrozen, and Destroy still works.
	Freeze(ctx context.Context) error
	// Thaw lets the sandbox's processes run again. Thawing a sandbox that
	// is not frozen does nothing; one that is gone gives ErrLost.
	Thaw(ctx context.Context) error
}

// Backend creates sandboxes.
type Backend interface {
	Create(ctx context.Context, spec Spec) (Sandbox, error)
}

// Run starts cmd in sb and waits for it.
func Run(ctx context.Context, sb Sandbox, cmd Command) (Result, error) {
	p, err := sb.Start(ctx, cmd)
	if err != nil {
		return Result{}, err
	}
	return p.Wait(ctx)
}

// ExitStatus maps a result to a process exit status the way shells do:
// the command's own code, 128+N for signal N, 124 for a timeout, 137 for a
// limit kill and 125 for a lost sandbox.
func (r Result) ExitStatus() int {
	switch r.Outcome {
	case OutcomeExited:
		return r.ExitCode
	case OutcomeSignaled:
		return 128 + r.Signal
	case OutcomeTimeout:
		return 124
	case OutcomeOOM, OutcomePidsLimit, OutcomeOutputLimit, OutcomeDiskFull:
		if r.Outcome == OutcomeDiskFull && r.Signal == 0 && r.ExitCode > 0 && r.ExitCode < 128 {
			return r.ExitCode
		}
		return 137
	}
	return 125
}

// BuildCaps are the capabilities an image build's steps keep as root
// (Spec.RootCaps): all that execproto.RootCapabilities allows.
var BuildCaps = execproto.RootCapabilities

// maxTrustedCAs bounds Spec.TrustedCAs.
const maxTrustedCAs = 1 << 20

// checkPEMCerts accepts one or more PEM CERTIFICATE blocks and nothing else.
// It does not parse the certificates: crypto/x509 would be linked, and
// initialised, in every small binary that validates a Spec (the sandbox
// front end's start pays about a millisecond for it), and the certificates
// come from the host's own egress CA.
func checkPEMCerts(b []byte) error {
	if len(b) > maxTrustedCAs {
		return fmt.Errorf("trusted CAs: %d bytes, at most %d", len(b), maxTrustedCAs)
	}
	n := 0
	for rest := b; len(bytes.TrimSpace(rest)) > 0; n++ {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil || blk.Type != "CERTIFICATE" || len(blk.Headers) > 0 {
			return errors.New("trusted CAs: want PEM CERTIFICATE blocks only")
		}
		if len(blk.Bytes) == 0 {
			return fmt.Errorf("trusted CAs: certificate %d is empty", n+1)
		}
	}
	return nil
}

// NewID returns a new random sandbox id.
func NewID() string {
	var b [6]byte
	Random(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// Random fills b from the kernel's random generator, the one crypto/rand
// reads too, through /dev/urandom: three system calls. crypto/rand (and
// x/sys's Getrandom) go through the vDSO's getrandom, whose first use in a
// process maps and faults in per-thread state: in a `sandbox run` that
// makes one id, takes one uid slot and exits, that first use cost more than
// the rest of both (docs/benchmarks.md, tput29). For a few bytes once per
// process, not for keys. crypto/rand is the fallback.
func Random(b []byte) {
	fd, err := unix.Open("/dev/urandom", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		n, rerr := unix.Read(fd, b)
		unix.Close(fd)
		if rerr == nil && n == len(b) {
			return
		}
	}
	_, _ = rand.Read(b)
}

func validID(id string) bool {
	rest, ok := strings.CutPrefix(id, "sb-")
	if !ok || len(rest) == 0 || len(rest) > 32 {
		return false
	}
	for _, c := range rest {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '-' {
			return false
		}
	}
	return true
}

// fileUserKey is the context key of WithFileUser.
type fileUserKey struct{}

// WithFileUser returns ctx for file operations (ReadFile, WriteFile, Stat,
// List, Mkdir, Remove, Rename) that act as user inside the sandbox, a name
// or uid as Command.User takes, instead of the sandbox's default user: who
// asks is the request's, as a command's user is.
func WithFileUser(ctx context.Context, user string) context.Context {
	return context.WithValue(ctx, fileUserKey{}, user)
}

// FileUser is the user WithFileUser put in ctx ("" for the default).
func FileUser(ctx context.Context) string {
	u, _ := ctx.Value(fileUserKey{}).(string)
	return u
}

// mkdirAsRootKey is the context key of WithMkdirAsRoot.
type mkdirAsRootKey struct{}

// WithMkdirAsRoot returns ctx for a recursive Mkdir that makes the
// directories as the sandbox's root and gives each it makes to the acting
// user (WithFileUser's, or the default): E2B's envd makes a file's missing
// parents so, and a user may then write /new/dir/file where only root may
// create /new.
func WithMkdirAsRoot(ctx context.Context) context.Context {
	return context.WithValue(ctx, mkdirAsRootKey{}, true)
}

// MkdirAsRoot reports whether ctx is WithMkdirAsRoot's.
func MkdirAsRoot(ctx context.Context) bool {
	b, _ := ctx.Value(mkdirAsRootKey{}).(bool)
	return b
}

// writeXattrsKey is the context key of WithWriteXattrs.
type writeXattrsKey struct{}

type writeXattrs struct {
	prefix string
	attrs  map[string]string
}

// WithWriteXattrs returns ctx for a WriteFile that also replaces the
// file's user.<prefix>* extended attributes with attrs (names without
// "user.", each starting with prefix): ones it does not name are removed.
// A client's metadata on a file travels so (E2B's user.e2b.*).
func WithWriteXattrs(ctx context.Context, prefix string, attrs map[string]string) context.Context {
	return context.WithValue(ctx, writeXattrsKey{}, writeXattrs{prefix, attrs})
}

// WriteXattrs is what WithWriteXattrs put in ctx ("" and nil for none).
func WriteXattrs(ctx context.Context) (prefix string, attrs map[string]string) {
	w, _ := ctx.Value(writeXattrsKey{}).(writeXattrs)
	return w.prefix, w.attrs
}
