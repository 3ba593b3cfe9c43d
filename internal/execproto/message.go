package execproto

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// ControlFD is the file descriptor on which the executor finds its end of the
// host's connection. Descriptors named in Setup follow it (4, 5, ...).
const ControlFD = 3

// ExecutorEnv is the whole environment the host starts airlock-exec with
// (as executor, spawner or id-map helper); commands in the sandbox never
// see it. One P: the executor relays requests, output and proxied bytes,
// and waits in system calls, while its commands are processes of their
// own. With a P per core, every request and every exit woke an idle
// thread that found no work and slept again: BenchmarkExec took 5-10 %
// more time and a fifth more context switches, output streamed slower,
// and each idle sandbox held 0.08 MiB more. Set in the environment, not by
// runtime.GOMAXPROCS, which stops the world and cost a sandbox's start
// over a millisecond.
var ExecutorEnv = []string{"GOMAXPROCS=1"}

// LateIDs is the executor's argument (argv[1]) when the host starts it
// before its user namespace's id maps exist (so the host's clone can share
// its memory, a vfork): the host writes the maps once the exec is done and
// only then says hello; the executor, which holds its capabilities in the
// namespace as ambient ones until then, takes uid and gid 0 of the
// namespace on the hello, before anything else, and fails if it cannot.
const LateIDs = "late-ids"

// LayerRestoreLayer is the layer a sandbox reports (Ready.Layers) when its
// empty workspace is an overlay whose lower layer takes the imports made
// before anything looked into it: a checkpoint after a restore then walks
// only what changed since (docs/checkpoints.md).
const LayerRestoreLayer = "workspace:restore-layer"

// Hello opens a connection in each direction.
type Hello struct {
	Version int `json:"version"`
}

// Setup tells the executor how to build the sandbox. File descriptors named
// here are inherited from the host (ExtraFiles); each is a detached mount tree
// made by the host with open_tree(2), already read-only and id-mapped as
// needed, so the executor never resolves a host path itself.
//
// Rootless mode is the exception: an unprivileged host cannot clone mount
// trees (open_tree with OPEN_TREE_CLONE needs CAP_SYS_ADMIN over the host's
// mount namespace), so it names its sources as HostPaths instead and the
// executor clones them itself, in its own copy of the host's mount namespace,
// before it mounts anything. Each source is given either as a descriptor or as
// a HostPath, never both (Validate).
type Setup struct {
	Hostname string `json:"hostname"`
	// RootFD, if nonzero, is a template root filesystem used instead of the
	// host's system directories. It is shown through an overlay whose upper
	// layer lives in the sandbox's scratch tmpfs.
	RootFD int `json:"root_fd,omitempty"`
	// RootPath is RootFD's rootless form.
	RootPath *HostPath `json:"root_path,omitempty"`
	// Layers, instead of RootFD, are the read-only layers of an image root,
	// lowest first (at most MaxLayers), each a detached tree, id-mapped so
	// that the ids the image recorded show as the same ids inside. The root
	// is their overlay under an upper layer in the scratch tmpfs.
	// Whiteouts in them are overlayfs's (a 0/0 character device, a
	// directory with the user.overlay.opaque xattr), as the userxattr
	// overlay of a user namespace reads them.
	Layers []int `json:"layers,omitempty"`
	// LayerPaths is Layers' rootless form.
	LayerPaths []*HostPath `json:"layer_paths,omitempty"`
	// SystemDirs are host directories bound read-only at the same path when
	// there is no template root or image layer (the executor binds them
	// itself: they are world-readable).
	SystemDirs []string `json:"system_dirs,omitempty"`
	// SystemTrees, with WritableRoot only, are some of SystemDirs as
	// detached trees, read-only and id-mapped so that the host's ids show
	// as the same ids inside (host root's files are the sandbox root's):
	// each is shown through an overlay whose upper layer is in the scratch
	// tmpfs, so the sandbox's root may change them there and the host's
	// never change. A system directory without a tree is bound read-only.
	SystemTrees []Mount `json:"system_trees,omitempty"`
	// EtcFiles are host files or directories under /etc bound read-only when
	// SystemDirs are (certificates, dynamic linker cache, alternatives).
	EtcFiles []string `json:"etc_files,omitempty"`
	// Workspace describes /workspace.
	Workspace Workspace `json:"workspace"`
	// WorkspaceAlias, when set, is a directory of /home where the
	// workspace is bound a second time (a user's home that is the
	// workspace); it is as writable as /workspace.
	WorkspaceAlias string `json:"workspace_alias,omitempty"`
	// RootHome gives root a writable scratch home at /root (in the
	// writable layers' quota) when root is not the default user.
	RootHome bool `json:"root_home,omitempty"`
	// Mounts are extra binds, in order.
	Mounts []Mount `json:"mounts,omitempty"`
	// DiskBytes caps each writable layer: the scratch tmpfs (workspace upper
	// layer, home, root upper layer) and /tmp.
	DiskBytes int64 `json:"disk_bytes"`
	// ShmBytes caps /dev/shm.
	ShmBytes int64 `json:"shm_bytes"`
	// ProxyFD, if nonzero, is the host's egress socket; the executor binds it
	// inside and forwards connections accepted on ProxyAddr to it.
	ProxyFD   int    `json:"proxy_fd,omitempty"`
	ProxyAddr string `json:"proxy_addr,omitempty"`
	// ProxyPath is ProxyFD's rootless form.
	ProxyPath *HostPath `json:"proxy_path,omitempty"`
	// ProxyStreams, with ProxyAddr and no socket, sends each connection
	// accepted on ProxyAddr to the host over this connection, on an
	// egress stream the host opened (OpEgress), rather than to a socket
	// bound inside: a pod's sandbox, whose host is across the API server,
	// has no socket of the host's to reach.
	ProxyStreams bool `json:"proxy_streams,omitempty"`
	// User is the default user of commands.
	User User `json:"user"`
	// Rlimits applied to every command (name -> value; soft = hard).
	Rlimits map[string]uint64 `json:"rlimits,omitempty"`
	// NoSetGroups is set when the user namespace denies setgroups(2)
	// (rootless mode, where only one id is mapped).
	NoSetGroups bool `json:"no_setgroups,omitempty"`
	// RequireLandlock makes setup fail when the kernel has no Landlock.
	RequireLandlock bool `json:"require_landlock,omitempty"`
	// StaticReadOnly mounts the read-only workspace and the read-only
	// directory mounts as overlays of one detached layer where the kernel
	// allows it, so that mountinfo names no host path: the host leaves
	// them unchanged while the sandbox runs (sandbox.Spec.StaticReadOnly).
	StaticReadOnly bool `json:"static_read_only,omitempty"`
	// WritableRoot lets commands write anywhere in an image or template
	// root (its upper layer), not only in the writable mounts.
	WritableRoot bool `json:"writable_root,omitempty"`
	// RootCaps are capabilities (names of RootCapabilities) that commands
	// run as the sandbox's root keep, within its user namespace; every
	// other command, and every capability not named, is dropped as
	// always. Only with WritableRoot: an image build's steps chown and
	// switch users as package managers do.
	RootCaps []string `json:"root_caps,omitempty"`
	// Sudo installs the sudo command (SudoHelper): any command may run
	// another as the sandbox's root (or another of its users), inside the
	// sandbox's confinement.
	Sudo bool `json:"sudo,omitempty"`
	// GVisor says the sandbox runs under gVisor (runsc), whose OCI bundle
	// has built the file system (root, /workspace, mounts, the proxy
	// socket at its path, /proc, /dev), the namespaces and the loopback.
	// The executor adds what runs inside it: the generated /etc, users,
	// rlimits, the proxy forwarder on ProxyAddr, capabilities and seccomp.
	// No source is given as a descriptor or host path.
	GVisor bool `json:"gvisor,omitempty"`
	// Account, under gVisor, is the unprivileged user the generated
	// /etc/passwd lists beside User (root there), with its home made.
	Account *User `json:"account,omitempty"`
	// Pids, under gVisor, is how many tasks the commands may have
	// together (sandbox.Limits.Pids; 0: no limit): the executor holds
	// them to it with a pids cgroup of gVisor's kernel, as the host's
	// cgroup counts runsc's own tasks as well. The outcome at the limit is
	// OutcomePidsLimit, which the executor reports.
	Pids int64 `json:"pids,omitempty"`
}

// RootCapabilities are the capabilities Setup.RootCaps may name: docker's
// default set less those that reach devices, the network or other
// processes' roots (MKNOD, NET_RAW, SYS_CHROOT, AUDIT_WRITE, SETFCAP,
// SETPCAP). Held in the sandbox's user namespace they act only on what
// that namespace maps: its own files and processes, never the host's.
var RootCapabilities = []string{"CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE"}

// MaxLayers bounds Setup.Layers (sandbox.MaxLayers says why).
const MaxLayers = 128

// Workspace modes.
const (
	WorkspaceEmpty = "empty"
	WorkspaceCOW   = "cow"
	WorkspaceRO    = "ro"
	WorkspaceRW    = "rw"
)

// Workspace is the source and mode of /workspace.
type Workspace struct {
	Mode string `json:"mode"`
	FD   int    `json:"fd,omitempty"`
	// Source is FD's rootless form.
	Source *HostPath `json:"source,omitempty"`
}

// Mount is one extra bind mount.
type Mount struct {
	FD       int    `json:"fd"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only"`
	File     bool   `json:"file,omitempty"` // the source is a file, not a directory
	// Source is FD's rootless form.
	Source *HostPath `json:"source,omitempty"`
}

// HostPath names a host file or directory for the executor to clone into a
// mount tree itself (rootless mode). Path is absolute, clean and free of
// symbolic links: the host resolved them, and the executor opens it with
// openat2(RESOLVE_NO_SYMLINKS), so a link planted in the path after the host
// looked fails the setup instead of redirecting the mount. Dev and Ino are the
// device and inode the host found there; the executor refuses anything else.
type HostPath struct {
	Path string `json:"path"`
	Dev  uint64 `json:"dev"`
	Ino  uint64 `json:"ino"`
}

// validate checks the form of p; the executor checks the file itself.
func (p *HostPath) validate() error {
	if err := checkPath(p.Path); err != nil {
		return err
	}
	if path.Clean(p.Path) != p.Path {
		return fmt.Errorf("path %.80q is not clean", p.Path)
	}
	if p.Ino == 0 {
		return fmt.Errorf("path %.80q: no inode given", p.Path)
	}
	return nil
}

// source checks that a source is given as exactly one of a descriptor and a
// host path, or not at all when optional.
func source(what string, fd int, p *HostPath, optional bool) error {
	switch {
	case fd < 0:
		return fmt.Errorf("%s: negative descriptor", what)
	case fd > 0 && p != nil:
		return fmt.Errorf("%s: both a descriptor and a host path", what)
	case p != nil:
		if err := p.validate(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	case fd == 0 && !optional:
		return fmt.Errorf("%s: no source", what)
	}
	return nil
}

// Validate checks a Setup before the executor acts on it: every source is
// given exactly once and every path is absolute and clean. The host builds
// Setup, so this guards against host bugs rather than attacks, and keeps
// what the executor accepts narrow.
func (s *Setup) Validate() error {
	var errs []error
	add := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if s.GVisor {
		return s.validateGVisor()
	}
	if s.Pids != 0 {
		// Natively the host's cgroup and RLIMIT_NPROC hold the limit.
		add(errors.New("pids: a limit the executor holds only under gvisor"))
	}
	add(source("root", s.RootFD, s.RootPath, true))
	switch {
	case len(s.Layers) > 0 && len(s.LayerPaths) > 0:
		add(errors.New("image layers: both descriptors and host paths"))
	case len(s.Layers)+len(s.LayerPaths) > MaxLayers:
		add(fmt.Errorf("image layers: %d, at most %d", len(s.Layers)+len(s.LayerPaths), MaxLayers))
	case (len(s.Layers) > 0 || len(s.LayerPaths) > 0) && (s.RootFD != 0 || s.RootPath != nil):
		add(errors.New("image layers and a template root exclude each other"))
	}
	for i, fd := range s.Layers {
		add(source(fmt.Sprintf("image layer %d", i), fd, nil, false))
	}
	for i, p := range s.LayerPaths {
		if p == nil {
			add(fmt.Errorf("image layer %d: no source", i))
			continue
		}
		add(source(fmt.Sprintf("image layer %d", i), 0, p, false))
	}
	add(source("proxy socket", s.ProxyFD, s.ProxyPath, true))
	if (s.ProxyFD != 0 || s.ProxyPath != nil || s.ProxyStreams) != (s.ProxyAddr != "") {
		add(errors.New("proxy socket and proxy address go together"))
	}
	if s.ProxyStreams && (s.ProxyFD != 0 || s.ProxyPath != nil) {
		add(errors.New("proxy streams and a proxy socket: one or the other"))
	}
	switch s.Workspace.Mode {
	case WorkspaceEmpty, "":
		if s.Workspace.FD != 0 || s.Workspace.Source != nil {
			add(errors.New("workspace: a source for an empty workspace"))
		}
	case WorkspaceCOW, WorkspaceRO, WorkspaceRW:
		add(source("workspace", s.Workspace.FD, s.Workspace.Source, false))
	default:
		add(fmt.Errorf("workspace: unknown mode %.20q", s.Workspace.Mode))
	}
	if a := s.WorkspaceAlias; a != "" && (checkPath(a) != nil || path.Clean(a) != a || path.Dir(a) != "/home") {
		add(fmt.Errorf("workspace alias %.80q: want a directory of /home", a))
	}
	for i, m := range s.Mounts {
		add(source(fmt.Sprintf("mount %d", i), m.FD, m.Source, false))
		if err := checkPath(m.Target); err != nil || path.Clean(m.Target) != m.Target || m.Target == "/" {
			add(fmt.Errorf("mount %d: target %.80q: want a clean absolute path below /", i, m.Target))
		}
	}
	if len(s.SystemTrees) > 0 && !s.WritableRoot {
		add(errors.New("system trees need a writable root"))
	}
	for i, m := range s.SystemTrees {
		add(source(fmt.Sprintf("system tree %d", i), m.FD, nil, false))
		if !slices.Contains(s.SystemDirs, m.Target) {
			add(fmt.Errorf("system tree %d: target %.80q is not a system directory", i, m.Target))
		}
	}
	for _, d := range append(append([]string{}, s.SystemDirs...), s.EtcFiles...) {
		if err := checkPath(d); err != nil || path.Clean(d) != d {
			add(fmt.Errorf("system path %.80q: want a clean absolute path", d))
		}
	}
	if s.DiskBytes < 0 || s.ShmBytes < 0 {
		add(errors.New("negative size"))
	}
	add(CheckRootCaps(s.RootCaps, s.WritableRoot))
	return errors.Join(errs...)
}

// CheckRootCaps reports what Setup.Validate refuses in caps: a name not in
// RootCapabilities, a repeated one, or any without a writable root.
func CheckRootCaps(caps []string, writableRoot bool) error {
	if len(caps) > 0 && !writableRoot {
		return errors.New("root capabilities need a writable root")
	}
	for i, c := range caps {
		if !slices.Contains(RootCapabilities, c) {
			return fmt.Errorf("root capability %.20q: want one of %s", c, strings.Join(RootCapabilities, ", "))
		}
		if slices.Contains(caps[:i], c) {
			return fmt.Errorf("root capability %s named twice", c)
		}
	}
	return nil
}

// validateGVisor checks a Setup for gVisor: the runtime mounted every
// source, so none may be given.
func (s *Setup) validateGVisor() error {
	var errs []error
	if s.RootFD != 0 || s.RootPath != nil || len(s.Layers) > 0 || len(s.LayerPaths) > 0 || s.Workspace.FD != 0 || s.Workspace.Source != nil || s.ProxyFD != 0 || s.ProxyPath != nil || len(s.Mounts) > 0 || len(s.SystemDirs) > 0 || len(s.SystemTrees) > 0 {
		errs = append(errs, errors.New("gvisor: a source given to the executor (the runtime mounts them)"))
	}
	switch s.Workspace.Mode {
	case WorkspaceEmpty, "", WorkspaceCOW, WorkspaceRO, WorkspaceRW:
	default:
		errs = append(errs, fmt.Errorf("workspace: unknown mode %.20q", s.Workspace.Mode))
	}
	if s.DiskBytes < 0 || s.ShmBytes < 0 {
		errs = append(errs, errors.New("negative size"))
	}
	if s.Pids < 0 {
		errs = append(errs, errors.New("negative pids limit"))
	}
	if len(s.RootCaps) > 0 {
		errs = append(errs, errors.New("gvisor: root capabilities (image builds) are not run under gVisor"))
	}
	if s.ProxyStreams && s.ProxyAddr == "" {
		errs = append(errs, errors.New("proxy streams without a proxy address"))
	}
	return errors.Join(errs...)
}

// User is a sandbox user.
type User struct {
	Name string `json:"name"`
	UID  int    `json:"uid"`
	GID  int    `json:"gid"`
	Home string `json:"home"`
}

// Ready reports what the executor enforced.
type Ready struct {
	PID         int      `json:"pid"` // the executor's PID in the host's PID namespace is not known inside; this is 1
	LandlockABI int      `json:"landlock_abi"`
	Seccomp     bool     `json:"seccomp"`
	Layers      []string `json:"layers"`
}

// Ops a stream can carry.
const (
	OpExec   = "exec"
	OpRead   = "read"
	OpWrite  = "write"
	OpList   = "list"
	OpStat   = "stat"
	OpMkdir  = "mkdir"
	OpRemove = "remove"
	OpRename = "rename"
	OpExport = "export"
	// OpImport unpacks the tar stream sent as the request's input into
	// the directory at Path, as the request's user: files, directories,
	// symlinks, hard links and FIFOs with their permission bits and
	// times; a ".." name, a symlinked parent or a device node fails it.
	// The sandbox needs no tar of its own.
	OpImport = "import"
	// OpWatch reports changes under the directory at Path (and below it
	// if Recursive) as WatchEvents until the host cancels the stream.
	OpWatch = "watch"
	// OpDiskUsage reports how full the sandbox's writable layers are, in
	// Result.Disk.
	OpDiskUsage = "disk_usage"
	// OpCheckpoint streams what changed in /workspace since the baseline
	// named by Since (the whole tree when Since is empty or unknown to the
	// executor) as an "airlock delta v1" tar stream on Stdout, records the
	// tree as it is now as a new baseline, and reports it in
	// Result.Checkpoint. With MarkOnly it streams nothing and only records
	// the baseline. The executor keeps the last two baselines. Tree
	// TreeRoot asks for the root file system's changes instead.
	OpCheckpoint = "checkpoint"
	// OpSpecialFiles streams the FIFOs of /workspace as the sandbox sees
	// them, on Stdout, each as AppendSpecial encodes it: a walk of the tree
	// that reads directories' entries and looks at FIFOs alone. A gvisor
	// sandbox's checkpoints are taken on the host, and gVisor keeps a FIFO
	// made inside in its own memory, where the host's walk cannot see it
	// (docs/gvisor.md).
	OpSpecialFiles = "special_files"
	// OpConnect relays a TCP connection to Port on the sandbox's loopback
	// (see "Connect streams" in the package doc).
	OpConnect = "connect"
	// OpEvents carries what the sandbox's processes write to its event
	// socket (EventSocket) until the host cancels the stream: one line per
	// Data frame on Stdout, and on Stderr an EventDrops whenever the
	// executor dropped lines (events.go).
	OpEvents = "events"
	// OpEgress, when Setup.ProxyStreams is set, waits for the next
	// connection accepted on the sandbox's proxy address and relays it as
	// a connect stream relays its socket (see "Egress streams" in the
	// package doc): the host keeps a few open so that a connection out of
	// the sandbox finds one waiting.
	OpEgress = "egress"
)

// MaxConnects bounds the connect streams an executor relays at once; one
// more is refused (Result.Errno EMFILE). Each holds a socket, two
// goroutines and at most its window of unsent bytes each way, so the bound
// keeps a runaway host (a leak of connections, not an attack: the host is
// trusted) from exhausting the sandbox's descriptors and memory, while
// leaving room for a thousand held WebSocket connections.
const MaxConnects = 1024

// Request opens a stream.
type Request struct {
	Op string `json:"op"`

	// exec
	Argv []string `json:"argv,omitempty"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// User runs the command, or for a file operation is the identity it
	// acts with: a name or decimal uid; empty = the default user.
	User      string `json:"user,omitempty"`
	TTY       bool   `json:"tty,omitempty"`
	Rows      uint16 `json:"rows,omitempty"`
	Cols      uint16 `json:"cols,omitempty"`
	Stdin     bool   `json:"stdin,omitempty"`      // the host will send stdin data; otherwise stdin is /dev/null
	TimeoutMS int64  `json:"timeout_ms,omitempty"` // 0 = none
	MaxOutput int64  `json:"max_output,omitempty"` // stdout+stderr bytes; 0 = none
	// Fingerprint, when set, names a tree whose fingerprint the result
	// carries, taken when the command has ended (see Result.Fingerprint).
	Fingerprint string `json:"fingerprint,omitempty"`

	// file operations
	Path      string `json:"path,omitempty"`
	NewPath   string `json:"new_path,omitempty"`
	Mode      uint32 `json:"mode,omitempty"`
	Recursive bool   `json:"recursive,omitempty"`
	Append    bool   `json:"append,omitempty"`
	Limit     int64  `json:"limit,omitempty"` // read: max bytes; 0 = no limit
	// Head, on a read, has the executor describe the file it opened
	// before it sends any of its data: the file's Entry (its fstat; no
	// extended attributes), in its binary form, on the Stderr channel,
	// which it then closes. Such a read streams exactly the entry's Size
	// bytes (a file that grows while read is cut at the size it had when
	// opened; one that shrinks ends the read with an error), or, when the
	// entry's Size is 0 (a /proc file), what the file yields until its
	// end. A file over Limit, or yielding more, is refused with EFBIG;
	// one of more than Limit bytes is refused before any data.
	Head bool `json:"head,omitempty"`
	// XattrPrefix, on a write, replaces the file's user.<XattrPrefix>*
	// extended attributes with Xattrs (names without "user.", each
	// starting with XattrPrefix): those not named are removed.
	XattrPrefix string            `json:"xattr_prefix,omitempty"`
	Xattrs      map[string]string `json:"xattrs,omitempty"`
	// MkdirAsRoot, on a recursive mkdir, makes the directories as the
	// sandbox's root and gives each it makes to the request's user, as
	// E2B's envd makes a file's missing parents.
	MkdirAsRoot bool `json:"mkdir_as_root,omitempty"`

	// checkpoint
	Since    string `json:"since,omitempty"`     // a baseline name (CheckBaseline), or empty for the whole tree
	MarkOnly bool   `json:"mark_only,omitempty"` // record a baseline, stream nothing
	// Tree is the tree checkpointed: TreeWorkspace (empty) or TreeRoot.
	Tree string `json:"tree,omitempty"`

	// Port is the TCP port a connect stream dials on the sandbox's
	// loopback, 1 to 65535.
	Port int `json:"port,omitempty"`

	// Window and ChunkSize, when nonzero, replace Window and ChunkSize as
	// the flow control of every data channel of this stream, both ways: a
	// bulk transfer sets them (BulkWindow, BulkChunkSize). Validate bounds
	// them by MaxWindow and MaxChunkSize; Flow resolves the defaults.
	Window    int64 `json:"window,omitempty"`
	ChunkSize int   `json:"chunk_size,omitempty"`
}

// Flow returns the stream's window and chunk size: the request's own, or
// the defaults where it asks for none or for one out of bounds (Validate
// refuses such a request; a receiver may size its buffers before it
// validates). A chunk never exceeds the window: MaxChunkSize <= Window.
func (r *Request) Flow() (window int64, chunk int) {
	window, chunk = Window, ChunkSize
	if r.validateFlow() != nil {
		return window, chunk
	}
	if r.Window != 0 {
		window = r.Window
	}
	if r.ChunkSize != 0 {
		chunk = r.ChunkSize
	}
	return window, chunk
}

// validateFlow checks a request's own window and chunk size.
func (r *Request) validateFlow() error {
	if r.Window != 0 && (r.Window < Window || r.Window > MaxWindow) {
		return fmt.Errorf("window of %d bytes, want %d to %d", r.Window, Window, MaxWindow)
	}
	if r.ChunkSize != 0 && (r.ChunkSize < ChunkSize || r.ChunkSize > MaxChunkSize) {
		return fmt.Errorf("chunk size of %d bytes, want %d to %d", r.ChunkSize, ChunkSize, MaxChunkSize)
	}
	return nil
}

// Trees a checkpoint may walk (Request.Tree).
const (
	// TreeWorkspace is /workspace.
	TreeWorkspace = ""
	// TreeRoot is the root file system's changes: the upper layer of an
	// image or template root (what an image build turns into a layer). It
	// gives deltas only: a baseline is marked first, then deltas are taken
	// since it; a full stream is refused.
	TreeRoot = "root"
)

// Limits on requests.
const (
	MaxArgs    = 4096
	MaxArgLen  = 128 << 10
	MaxEnv     = 4096
	MaxPathLen = 4096
)

// Validate checks a request before anything acts on it.
func (r *Request) Validate() error {
	if err := r.validateFlow(); err != nil {
		return fmt.Errorf("%.20s: %w", r.Op, err)
	}
	if r.Head && r.Op != OpRead {
		return fmt.Errorf("%.20s: a head is for a read only", r.Op)
	}
	switch r.Op {
	case OpExec:
		if len(r.Argv) == 0 {
			return errors.New("exec: empty argv")
		}
		if len(r.Argv) > MaxArgs || len(r.Env) > MaxEnv {
			return errors.New("exec: too many arguments or environment entries")
		}
		for _, a := range r.Argv {
			if len(a) > MaxArgLen || strings.IndexByte(a, 0) >= 0 {
				return errors.New("exec: argument too long or contains NUL")
			}
		}
		if r.Argv[0] == "" {
			return errors.New("exec: empty command name")
		}
		for _, e := range r.Env {
			k, _, ok := strings.Cut(e, "=")
			if !ok || k == "" || len(e) > MaxArgLen || strings.IndexByte(e, 0) >= 0 {
				return fmt.Errorf("exec: malformed environment entry %.40q", e)
			}
		}
		if r.Dir != "" {
			if err := checkPath(r.Dir); err != nil {
				return fmt.Errorf("exec: dir: %w", err)
			}
		}
		if r.TimeoutMS < 0 || r.MaxOutput < 0 {
			return errors.New("exec: negative limit")
		}
		if r.Fingerprint != "" {
			if err := checkPath(r.Fingerprint); err != nil {
				return fmt.Errorf("exec: fingerprint: %w", err)
			}
		}
		return nil
	case OpRead, OpWrite, OpList, OpStat, OpMkdir, OpRemove, OpExport, OpImport:
		if err := checkPath(r.Path); err != nil {
			return fmt.Errorf("%s: %w", r.Op, err)
		}
		if err := checkXattrs(r.XattrPrefix, r.Xattrs); err != nil {
			return fmt.Errorf("%s: %w", r.Op, err)
		}
		if r.Limit < 0 {
			return fmt.Errorf("%s: negative limit", r.Op)
		}
		if r.Mode&^0o7777 != 0 {
			return fmt.Errorf("%s: mode %o out of range", r.Op, r.Mode)
		}
		if r.MkdirAsRoot && (r.Op != OpMkdir || !r.Recursive) {
			return fmt.Errorf("%s: mkdir as root is for a recursive mkdir only", r.Op)
		}
		return nil
	case OpRename:
		if err := checkPath(r.Path); err != nil {
			return fmt.Errorf("rename: %w", err)
		}
		if err := checkPath(r.NewPath); err != nil {
			return fmt.Errorf("rename: new path: %w", err)
		}
		return nil
	case OpWatch:
		if err := checkPath(r.Path); err != nil {
			return fmt.Errorf("watch: %w", err)
		}
		return nil
	case OpDiskUsage, OpEvents, OpEgress, OpSpecialFiles:
		return nil
	case OpConnect:
		if r.Port < 1 || r.Port > 65535 {
			return fmt.Errorf("connect: port %d, want 1 to 65535", r.Port)
		}
		return nil
	case OpCheckpoint:
		if r.Tree != TreeWorkspace && r.Tree != TreeRoot {
			return fmt.Errorf("checkpoint: tree %.20q: want empty or %q", r.Tree, TreeRoot)
		}
		if r.Since != "" {
			if err := CheckBaseline(r.Since); err != nil {
				return fmt.Errorf("checkpoint: since: %w", err)
			}
		}
		return nil
	}
	return fmt.Errorf("unknown op %.20q", r.Op)
}

// checkPath accepts absolute, clean-able paths of bounded length. It is a
// sanity check only: confinement is the kernel's job inside the sandbox.
func checkPath(p string) error {
	if p == "" {
		return errors.New("empty path")
	}
	if len(p) > MaxPathLen || strings.IndexByte(p, 0) >= 0 {
		return errors.New("path too long or contains NUL")
	}
	if !path.IsAbs(p) {
		return fmt.Errorf("path %.80q is not absolute", p)
	}
	return nil
}

// Outcomes of a request.
const (
	OutcomeExited      = "exited"
	OutcomeSignaled    = "signaled"
	OutcomeTimeout     = "timeout"
	OutcomeOOM         = "oom"
	OutcomePidsLimit   = "pids_limit"
	OutcomeOutputLimit = "output_limit"
	OutcomeDiskFull    = "disk_full"
	OutcomeLost        = "sandbox_lost"
)

// Why an exec's command did not start (Result.NotStarted). The result is
// then OutcomeExited with the shell's exit code for the reason, so that a
// command that exits 127 or 126 itself can be told from one that never ran.
const (
	// CommandNotFound: no file at the command's path, or none on $PATH
	// (exit code 127).
	CommandNotFound = "not_found"
	// CommandNotExecutable: the command was found but could not be
	// executed (permission denied, not an executable format, no process
	// to spare...); Errno says why (exit code 126).
	CommandNotExecutable = "not_executable"
)

// Result ends a stream.
type Result struct {
	// Outcome is one of the Outcome constants for exec; empty for file
	// operations that succeeded.
	Outcome  string `json:"outcome,omitempty"`
	ExitCode int    `json:"exit_code"`
	Signal   int    `json:"signal,omitempty"`
	// Error is set when the operation failed (file operations, or an exec
	// that could not start). Errno carries the errno name when there is one
	// (ENOENT, EACCES...), so the host can map it back.
	Error string `json:"error,omitempty"`
	Errno string `json:"errno,omitempty"`
	// NotStarted is set when an exec's command did not start: one of
	// CommandNotFound and CommandNotExecutable.
	NotStarted string `json:"not_started,omitempty"`
	// Usage of an exec.
	WallMS   int64 `json:"wall_ms,omitempty"`
	UserMS   int64 `json:"user_ms,omitempty"`
	SystemMS int64 `json:"system_ms,omitempty"`
	MaxRSSKB int64 `json:"max_rss_kb,omitempty"`
	// Fingerprint of the exec request's tree: a hash of every entry's
	// path, type, mode, size, inode, mtime and ctime, so any change to the
	// tree (ctime cannot be set from user space) changes it. Empty when the
	// tree could not be walked or is too large to walk.
	Fingerprint string `json:"fingerprint,omitempty"`
	// Stat and List results.
	Entries []Entry `json:"entries,omitempty"`
	// Disk is a disk_usage result.
	Disk *DiskUsage `json:"disk,omitempty"`
	// Checkpoint is a checkpoint result.
	Checkpoint *CheckpointResult `json:"checkpoint,omitempty"`
}

// CheckpointResult is what a checkpoint recorded and streamed.
type CheckpointResult struct {
	// Baseline names the baseline recorded: the tree as the stream leaves
	// it, to pass as Since next time.
	Baseline string `json:"baseline"`
	// Full is set when the stream is the whole tree (Since was empty or
	// unknown) rather than a delta.
	Full bool `json:"full,omitempty"`
	// Entries counts the tar entries written, whiteouts included; Bytes
	// the file content bytes among them. Both are 0 for MarkOnly.
	Entries int64 `json:"entries"`
	Bytes   int64 `json:"bytes"`
	// Walked counts the entries the walk looked at (one stat each): the
	// whole tree in a plain workspace, the upper layer's entries in a
	// copy-on-write one (plus the whole tree for a full stream).
	Walked int64 `json:"walked,omitempty"`
}

// MaxBaselineLen bounds a baseline name.
const MaxBaselineLen = 64

// CheckBaseline accepts a baseline name: 1 to MaxBaselineLen ASCII
// letters, digits, '-', '_' and '.'. Names are opaque otherwise.
func CheckBaseline(name string) error {
	if name == "" || len(name) > MaxBaselineLen {
		return fmt.Errorf("baseline name of %d bytes, want 1 to %d", len(name), MaxBaselineLen)
	}
	for i := range len(name) {
		c := name[i]
		if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' && c != '_' && c != '.' {
			return fmt.Errorf("baseline name %.80q: want letters, digits, '-', '_' or '.'", name)
		}
	}
	return nil
}

// Validate checks a checkpoint result the host read from the executor, for
// a request with MarkOnly set or not.
func (c *CheckpointResult) Validate(markOnly bool) error {
	if err := CheckBaseline(c.Baseline); err != nil {
		return fmt.Errorf("checkpoint result: %w", err)
	}
	if c.Entries < 0 || c.Bytes < 0 || c.Walked < 0 {
		return errors.New("checkpoint result: negative count")
	}
	if markOnly && (c.Entries != 0 || c.Bytes != 0 || c.Full) {
		return errors.New("checkpoint result: a mark-only checkpoint that streamed entries")
	}
	return nil
}

// DiskUsage is how full a sandbox's writable layers are: the scratch layer
// (home, the workspace's and the root's changes) and /tmp, summed.
type DiskUsage struct {
	Used  int64 `json:"used"`  // bytes in use
	Total int64 `json:"total"` // bytes the layers may hold
}

// Entry describes one file.
type Entry struct {
	Name    string `json:"name"`
	Size    int64  `json:"size"`
	Mode    uint32 `json:"mode"` // Go fs.FileMode bits
	ModTime int64  `json:"mtime_ns"`
	Link    string `json:"link,omitempty"`
	// Owner and Group name the file's owner and group as the sandbox's
	// passwd does (a decimal id where it names none).
	Owner string `json:"owner,omitempty"`
	Group string `json:"group,omitempty"`
	// Xattrs are the file's user.* extended attributes, names without
	// "user." (at most MaxXattrs, of at most MaxXattrBytes together).
	Xattrs map[string]string `json:"xattrs,omitempty"`
}

// Bounds on the extended attributes a request sets or an entry reports.
const (
	MaxXattrs     = 64
	MaxXattrBytes = 4096
)

// Kinds of WatchEvent.
const (
	// WatchStart is the first event of every watch stream: the watches
	// are in place, so any change made after it is reported.
	WatchStart = "start"
	// WatchCreate: Path was created, or moved into the watched tree.
	WatchCreate = "create"
	// WatchWrite: the content of the file at Path changed.
	WatchWrite = "write"
	// WatchRemove: Path was deleted.
	WatchRemove = "remove"
	// WatchRename: Path was moved away (its new name, if still in the
	// watched tree, comes as a create).
	WatchRename = "rename"
	// WatchChmod: the attributes (mode, owner, times) of Path changed.
	WatchChmod = "chmod"
	// WatchOverflow: events were lost (a queue was full, or a directory
	// below Path could not be watched); whoever needs an exact picture
	// lists the tree again.
	WatchOverflow = "overflow"
)

// Bounds of watching. The executor holds at most MaxWatchQueue events of a
// watch stream that the host has not taken yet, and reports an overflow
// instead of queueing more; it watches at most MaxWatchDirs directories per
// stream and MaxWatchStreams streams at once.
const (
	MaxWatchQueue   = 1024
	MaxWatchDirs    = 8192
	MaxWatchStreams = 32
)

// WatchEvent is one change reported on a watch stream. Each Data frame on
// the Stdout channel of a watch stream carries exactly one, as JSON, so a
// frame boundary is an event boundary.
type WatchEvent struct {
	Op string `json:"op"`
	// Path is absolute; empty only for WatchStart.
	Path string `json:"path,omitempty"`
	// Dir is set when Path is a directory (as far as the kernel said).
	Dir bool `json:"dir,omitempty"`
}

// Validate checks an event the host read from the executor.
func (e *WatchEvent) Validate() error {
	switch e.Op {
	case WatchStart:
		if e.Path != "" || e.Dir {
			return errors.New("watch event: start names no path")
		}
		return nil
	case WatchCreate, WatchWrite, WatchRemove, WatchRename, WatchChmod, WatchOverflow:
		if err := checkPath(e.Path); err != nil {
			return fmt.Errorf("watch event %s: %w", e.Op, err)
		}
		return nil
	}
	return fmt.Errorf("watch event: unknown op %.20q", e.Op)
}

// Error reports a protocol-level failure.
type Error struct {
	Message string `json:"message"`
}

// Decode parses a JSON payload strictly: unknown fields, trailing data and
// wrong types are errors.
func Decode(p []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(p))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		// %v, not %w: an empty or cut payload makes the decoder say io.EOF
		// or io.ErrUnexpectedEOF, which from a reader of frames mean the
		// peer closed the stream (TestDecode).
		return fmt.Errorf("%w: %v", ErrFrame, err) //nolint:errorlint // the decoder's io.EOF must not pass for the peer's (see above)
	}
	// Decoder.More is not enough here: it reports false for a stray ']' or
	// '}' after the value, so "{}}" would pass. Only JSON whitespace may
	// follow the value.
	if rest := bytes.TrimLeft(p[d.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return fmt.Errorf("%w: trailing data after JSON value", ErrFrame)
	}
	return nil
}

// JSONFrame builds a frame whose payload is v encoded as JSON.
func JSONFrame(t Type, stream uint32, v any) (Frame, error) {
	p, err := json.Marshal(v)
	if err != nil {
		return Frame{}, fmt.Errorf("encode %s: %w", t, err)
	}
	if len(p) > MaxPayload {
		return Frame{}, fmt.Errorf("encode %s: %d bytes exceeds frame limit", t, len(p))
	}
	return Frame{Type: t, Stream: stream, Payload: p}, nil
}

// checkXattrs checks a write's extended attributes: each named with
// prefix (which is needed when any are given), within the bounds.
func checkXattrs(prefix string, attrs map[string]string) error {
	if len(attrs) > 0 && prefix == "" {
		return errors.New("xattrs without a prefix")
	}
	if len(attrs) > MaxXattrs {
		return fmt.Errorf("%d xattrs, at most %d", len(attrs), MaxXattrs)
	}
	n := 0
	for k, v := range attrs {
		if !strings.HasPrefix(k, prefix) || len(k) == len(prefix) || strings.ContainsRune(k+v, 0) {
			return fmt.Errorf("xattr %.80q: want a name after %q, without NUL", k, prefix)
		}
		n += len("user.") + len(k) + len(v)
	}
	if n > MaxXattrBytes {
		return fmt.Errorf("xattrs of %d bytes, at most %d", n, MaxXattrBytes)
	}
	return nil
}
