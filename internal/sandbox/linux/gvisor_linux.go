package linux

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// The gvisor runtime (sandbox.RuntimeGVisor) runs the same executor as PID 1
// of a gVisor sandbox: runsc runs an OCI bundle the backend writes from the
// sandbox's Spec, and gVisor's user-space kernel stands between everything
// in the sandbox and the host's kernel. What the native runtime builds with
// namespaces and mounts (the read-only host root, /workspace, mounts, /tmp,
// the proxy socket) the bundle describes, and runsc's gofer serves. The
// backend keeps what it does for native sandboxes on the host side: the id
// lock, the trust store, the cgroup (runsc and all its processes start in
// it, so memory, pids and CPU are limited and the whole tree killed from
// the host), the handshake and the lifetime. docs/gvisor.md has the
// findings behind each choice.

// gvisorExecutor is where the executor binary is bound, read-only, inside a
// gvisor sandbox.
const gvisorExecutor = "/.airlock/airlock-exec"

// gvisorPidsReserve and gvisorPidsPerTask size a gvisor sandbox's host
// cgroup: Limits.Pids × gvisorPidsPerTask + gvisorPidsReserve host tasks.
// runsc, its gofer and the sentry are Go programs with threads of their own
// (about 110 for an idle sandbox here), and on the ptrace platform every
// process inside is a host stub process that gains a stub thread for each
// sentry thread that runs it: a fork bomb held at 64 processes inside took
// the host's count to about 1960, growing still after it was killed (docs/gvisor.md). The commands' limit is
// the executor's pids cgroup of gVisor's kernel (execproto.Setup.Pids); the
// host's is the backstop, and the memory limit bounds the stubs too.
const (
	gvisorPidsReserve = 192
	gvisorPidsPerTask = 64
)

// gvisorBoot bounds how long runsc may take to bring a sandbox up to the
// executor's handshake.
const gvisorBoot = 30 * time.Second

// RunscEnv names the environment variable that points the gvisor runtime at
// a runsc binary when Config.Runsc is empty (scripts/runsc.sh builds a
// current one: AIRLOCK_RUNSC=$(scripts/runsc.sh build)).
const RunscEnv = "AIRLOCK_RUNSC"

// runscPath returns the runsc binary: Config.Runsc, else $AIRLOCK_RUNSC,
// else runsc from PATH.
func (b *Backend) runscPath() (string, error) {
	if b.cfg.Runsc != "" {
		return b.cfg.Runsc, nil
	}
	if p := os.Getenv(RunscEnv); p != "" {
		return p, nil
	}
	p, err := exec.LookPath("runsc")
	if err != nil {
		return "", errors.New("gvisor runtime: runsc is not installed (apt-get install runsc, or scripts/runsc.sh build and AIRLOCK_RUNSC)")
	}
	return p, nil
}

// Runsc is the runsc a backend's gvisor sandboxes run on: the binary, what
// it says its version is, the platforms it offers, and the platform the
// sandboxes get with the reason for it.
type Runsc struct {
	Path      string
	Version   string
	Platforms []string
	Platform  string
	Why       string
	// NoFastPath: the platform is systrap and this runsc takes
	// --systrap-disable-fast-path, which every sandbox gets: the sentry
	// and the stubs then sleep between system calls instead of spinning
	// for the other's next one. A cold start's CPU is spent mostly while
	// the executor sets up, and the spinning costs more CPU than it saves
	// on a machine whose cores are shared (docs/gvisor.md, "Cold start").
	// The platform and its boundary are the same.
	NoFastPath bool
}

// flags are runsc's global flags for the platform.
func (r Runsc) flags() []string {
	f := []string{"--platform=" + r.Platform}
	if r.NoFastPath {
		f = append(f, noFastPathFlag)
	}
	return f
}

// noFastPathFlag turns systrap's spinning fast path off (Runsc.NoFastPath).
const noFastPathFlag = "--systrap-disable-fast-path"

// Runsc finds the runsc binary and chooses its platform (once per
// backend): Config.RunscPlatform when set; else systrap when the runsc
// offers it (a seccomp trap served in the stub's own address space: no
// ptrace stop for every system call); else kvm when it offers it, /dev/kvm
// opens and the CPU has hardware virtualization; else ptrace. docs/gvisor.md, "Platforms".
func (b *Backend) Runsc() (Runsc, error) {
	b.runscOnce.Do(func() { b.runsc, b.runscErr = b.findRunsc() })
	return b.runsc, b.runscErr
}

func (b *Backend) findRunsc() (Runsc, error) {
	path, err := b.runscPath()
	if err != nil {
		return Runsc{}, err
	}
	r := Runsc{Path: path}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--version").Output()
	if err != nil {
		return r, fmt.Errorf("gvisor runtime: %s --version: %w", path, err)
	}
	r.Version = runscVersion(string(out))
	out, err = exec.CommandContext(ctx, path, "help", "platforms").Output()
	if err != nil {
		return r, fmt.Errorf("gvisor runtime: %s help platforms: %w", path, err)
	}
	r.Platforms = strings.Fields(string(out))
	r.Platform, r.Why = choosePlatform(b.cfg.RunscPlatform, r.Platforms, kvmOpens() && hardwareVirt(readCPUInfo()))
	if r.Platform == "systrap" {
		// `runsc flags` lists them on stderr.
		out, err = exec.CommandContext(ctx, path, "flags").CombinedOutput()
		if err != nil {
			return r, fmt.Errorf("gvisor runtime: %s flags: %w", path, err)
		}
		r.NoFastPath = slices.Contains(strings.Fields(string(out)), strings.TrimPrefix(noFastPathFlag, "-"))
	}
	return r, nil
}

// runscVersion is the version in `runsc --version`'s first line ("runsc
// version 0.0~20221219.0"), or the line itself.
func runscVersion(out string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	if v, ok := strings.CutPrefix(line, "runsc version "); ok {
		return v
	}
	return line
}

// kvmOpens tells whether /dev/kvm can be opened for the kvm platform.
func kvmOpens() bool {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

// hardwareVirt tells whether /proc/cpuinfo's flags name VT-x (vmx) or
// AMD-V (svm), which gVisor's kvm platform runs its sentry on. /dev/kvm
// alone does not say so: a paravirtualized KVM (kvm-pvm, as on the machine
// these docs were measured on since 2026-12-07) gives a guest /dev/kvm
// without either, and runsc's kvm platform hangs there at boot (the
// sandbox never starts; runsc's log ends at its seccomp setup).
func hardwareVirt(cpuinfo string) bool {
	for line := range strings.Lines(cpuinfo) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "flags" {
			continue
		}
		for _, f := range strings.Fields(v) {
			if f == "vmx" || f == "svm" {
				return true
			}
		}
	}
	return false
}

func readCPUInfo() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	return string(b)
}

// choosePlatform picks the platform of a runsc offering platforms: the
// configured one, else the fastest that works here, with the reason.
func choosePlatform(configured string, platforms []string, kvm bool) (platform, why string) {
	switch {
	case configured != "":
		return configured, "configured"
	case slices.Contains(platforms, "systrap"):
		return "systrap", "this runsc offers systrap (system calls trapped by seccomp and served in the stub's own address space)"
	case kvm && slices.Contains(platforms, "kvm"):
		return "kvm", "this runsc has no systrap; /dev/kvm opens and the CPU has vmx or svm"
	default:
		return "ptrace", fmt.Sprintf("this runsc offers only %s and no /dev/kvm with hardware virtualization (vmx or svm) here: a ptrace stop for every system call (scripts/runsc.sh builds a runsc with systrap)", strings.Join(platforms, ", "))
	}
}

// gvisorState is where a gvisor sandbox's bundle and runsc's state live.
func (b *Backend) gvisorState(id string) string {
	return filepath.Join(b.cfg.StateDir, "gvisor", id)
}

// ociSpec is the part of the OCI runtime spec (version 1.0.2) a bundle
// needs.
type ociSpec struct {
	Version  string      `json:"ociVersion"`
	Process  ociProcess  `json:"process"`
	Root     ociRoot     `json:"root"`
	Hostname string      `json:"hostname"`
	Mounts   []ociMount  `json:"mounts"`
	Linux    ociLinuxCfg `json:"linux"`
}

type ociProcess struct {
	User         ociUser      `json:"user"`
	Args         []string     `json:"args"`
	Env          []string     `json:"env"`
	Cwd          string       `json:"cwd"`
	Capabilities ociCaps      `json:"capabilities"`
	Rlimits      []ociRlimits `json:"rlimits,omitempty"`
}

type ociUser struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
}

type ociCaps struct {
	Bounding  []string `json:"bounding"`
	Effective []string `json:"effective"`
	Permitted []string `json:"permitted"`
}

type ociRlimits struct {
	Type string `json:"type"`
	Hard uint64 `json:"hard"`
	Soft uint64 `json:"soft"`
}

type ociRoot struct {
	Path     string `json:"path"`
	Readonly bool   `json:"readonly"`
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociLinuxCfg struct {
	Namespaces []ociNamespace `json:"namespaces"`
}

type ociNamespace struct {
	Type string `json:"type"`
}

// executorCaps are the capabilities the executor starts with inside gVisor
// (of gVisor's kernel, not the host's): enough to write the generated /etc,
// change to the sandbox's users and drop every capability for its commands.
var executorCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_SYS_ADMIN",
}

// gvisorBundle writes the OCI bundle of a gvisor sandbox of spec (with the
// trust store's mounts added) into dir and returns runsc's global flags
// the bundle needs.
func (b *Backend) gvisorBundle(dir string, spec *sandbox.Spec, runsc Runsc) ([]string, error) {
	rootfs := filepath.Join(dir, "rootfs")
	if err := os.MkdirAll(rootfs, 0o755); err != nil {
		return nil, fmt.Errorf("gvisor bundle: %w", err)
	}
	disk := spec.Limits.DiskBytes
	if disk == 0 {
		disk = sandbox.DefaultLimits.DiskBytes
	}
	tmpfs := func(dst, mode string, size int64) ociMount {
		return ociMount{Destination: dst, Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=" + mode, fmt.Sprintf("size=%d", size)}}
	}
	bind := func(src, dst string, ro bool) ociMount {
		o := []string{"rbind", "nosuid", "nodev"}
		if ro {
			o = append(o, "ro")
		} else {
			o = append(o, "rw")
		}
		return ociMount{Destination: dst, Type: "bind", Source: src, Options: o}
	}
	root := ociRoot{Path: rootfs, Readonly: true}
	var mounts []ociMount
	mounts = append(mounts, ociMount{Destination: "/proc", Type: "proc", Source: "proc"})
	switch {
	case len(spec.Layers) > 0:
		// An image root: the kernel's overlay of the layers is the
		// bundle's root, read-only to the sandbox; writes (with
		// WritableRoot) land in gVisor's in-memory overlay above it.
		if err := mountImageRoot(dir, rootfs, spec.Layers); err != nil {
			return nil, err
		}
		root.Readonly = !spec.WritableRoot
		dirs := []string{"proc", "tmp", "root", "home", "workspace", "run/airlock", ".airlock"}
		for _, m := range spec.Mounts {
			dirs = append(dirs, strings.TrimPrefix(filepath.Clean(m.Target), "/"))
		}
		files := []string{".airlock/airlock-exec"}
		for _, f := range imageEtc {
			files = append(files, "etc/"+f.name)
		}
		if err := realTargets(rootfs, dirs, files); err != nil {
			return nil, err
		}
		// As natively, the image's own hosts, hostname and resolv.conf,
		// if any, name another machine: these are bound over them (gVisor
		// resolves the targets inside the root, links included, and
		// makes those that are missing).
		for _, f := range imageEtc {
			src := filepath.Join(dir, "etc-"+f.name)
			if err := os.WriteFile(src, []byte(f.data), 0o644); err != nil {
				return nil, fmt.Errorf("gvisor bundle: %w", err)
			}
			mounts = append(mounts, bind(src, "/etc/"+f.name, true))
		}
	case spec.RootFS != "":
		root = ociRoot{Path: spec.RootFS, Readonly: !spec.WritableRoot}
	default:
		for _, d := range existing(systemDirs) {
			if target, err := os.Readlink(d); err == nil {
				// Usr-merged links (/bin -> usr/bin) stay links.
				if err := os.Symlink(target, filepath.Join(rootfs, strings.TrimPrefix(d, "/"))); err != nil && !errors.Is(err, os.ErrExist) {
					return nil, fmt.Errorf("gvisor bundle: %w", err)
				}
				continue
			}
			mounts = append(mounts, bind(d, d, true))
		}
	}
	if spec.RootFS == "" && len(spec.Layers) == 0 {
		// The executor writes the generated /etc into this tmpfs (a
		// template or image root keeps its own); the host's certificates
		// and linker cache are bound over it.
		mounts = append(mounts, ociMount{Destination: "/etc", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=1048576"}})
		for _, f := range existing(etcFiles) {
			mounts = append(mounts, bind(f, f, true))
		}
	}
	mounts = append(mounts,
		tmpfs("/tmp", "1777", disk), tmpfs("/dev/shm", "1777", shmBytes(disk)), tmpfs("/root", "700", disk),
		ociMount{Destination: "/home", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", fmt.Sprintf("size=%d", disk)}},
		bind(b.cfg.Executor, gvisorExecutor, true),
	)
	switch spec.Workspace {
	case "":
		mounts = append(mounts, tmpfs("/workspace", "1777", disk))
	default:
		mode := spec.WorkspaceMode
		if mode == "" {
			mode = sandbox.WorkspaceCOW
		}
		src := spec.Workspace
		if mode == sandbox.WorkspaceCOW {
			// The host's overlay of the workspace, its upper layer on a
			// tmpfs of the disk limit: a bind of it is the sandbox's
			// /workspace, read-write, and nothing written reaches the
			// host's directory.
			var err error
			if src, err = mountCOWWorkspace(dir, spec.Workspace, disk); err != nil {
				return nil, err
			}
		}
		mounts = append(mounts, bind(src, "/workspace", mode == sandbox.WorkspaceRO))
	}
	for _, m := range spec.Mounts {
		mounts = append(mounts, bind(m.Source, m.Target, m.ReadOnly))
	}
	flags := append([]string{"--network=none", "--ignore-cgroups"}, runsc.flags()...)
	// The executor's directory: the event socket, and the egress socket.
	mounts = append(mounts, ociMount{Destination: "/run/airlock", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=65536"}},
		// airlock-event is the executor called by that name.
		bind(b.cfg.Executor, execproto.EventHelper, true))
	if spec.Network == sandbox.NetworkProxy {
		// The one host socket the sandbox may connect to: gVisor opens
		// host sockets only with --host-uds, and only those bound in.
		mounts = append(mounts, bind(spec.ProxySocket, "/run/airlock/egress.sock", false))
		flags = append(flags, "--host-uds=open")
	}
	if spec.WritableRoot {
		// The root's writes go to gVisor's in-memory overlay of the root
		// alone: the workspace and mounts stay the host's.
		flags = append(flags, "--overlay2=root:memory")
	}
	oci := ociSpec{
		Version: "1.0.2",
		Process: ociProcess{
			Args: []string{gvisorExecutor, "gvisor"}, Env: execproto.ExecutorEnv, Cwd: "/",
			Capabilities: ociCaps{Bounding: executorCaps, Effective: executorCaps, Permitted: executorCaps},
			Rlimits:      []ociRlimits{{Type: "RLIMIT_NOFILE", Hard: 1 << 20, Soft: 1 << 20}},
		},
		Root: root, Hostname: "airlock", Mounts: mounts,
		Linux: ociLinuxCfg{Namespaces: []ociNamespace{{"pid"}, {"mount"}, {"ipc"}, {"uts"}, {"network"}}},
	}
	data, err := json.MarshalIndent(oci, "", "\t")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return nil, fmt.Errorf("gvisor bundle: %w", err)
	}
	return flags, nil
}

// imageEtc are the files of /etc a gvisor sandbox of an image root gets
// instead of the image's: what the executor writes into an image root's
// /etc natively (writeEtc), for the hostname a gvisor bundle sets.
var imageEtc = []struct{ name, data string }{
	{"hosts", "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\tairlock\n"},
	{"hostname", "airlock\n"},
	{"resolv.conf", "# airlock: no DNS inside the sandbox; names are resolved by the host's egress proxy.\noptions attempts:1 timeout:1\n"},
}

// mountImageRoot mounts at rootfs the overlay of an image's layers (lowest
// first), nosuid and nodev, with the layers' opaque directories marked as
// package image writes them (user.overlay.*: userxattr). Its upper layer,
// in dir, takes only the mount points runsc's gofer makes for the bundle's
// mounts (/etc/hosts...; the gofer walks the root confined to it): the
// bundle's root is read-only to the sandbox, and WritableRoot's writes go
// to gVisor's in-memory overlay. The mount is on the host, in the bundle;
// teardownGVisor (or GC after a crash) removes it. Layers are added one by
// one (lowerdir+, Linux 6.8): their paths together may exceed what one
// mount option can carry.
func mountImageRoot(dir, rootfs string, layers []string) error {
	upper, work := filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return fmt.Errorf("image root: %w", err)
		}
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return fmt.Errorf("image root: open overlay: %w", err)
	}
	defer unix.Close(fsfd)
	lowers := slices.Clone(layers)
	slices.Reverse(lowers) // overlayfs names the top layer first
	for _, l := range lowers {
		if err := unix.FsconfigSetString(fsfd, "lowerdir+", l); err != nil {
			return fmt.Errorf("image root: layer %s: %w", l, err)
		}
	}
	if err := unix.FsconfigSetString(fsfd, "upperdir", upper); err != nil {
		return fmt.Errorf("image root: %w", err)
	}
	if err := unix.FsconfigSetString(fsfd, "workdir", work); err != nil {
		return fmt.Errorf("image root: %w", err)
	}
	if err := unix.FsconfigSetFlag(fsfd, "userxattr"); err != nil {
		return fmt.Errorf("image root: userxattr: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return fmt.Errorf("image root: overlay of %d layers: %w", len(layers), err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return fmt.Errorf("image root: mount overlay: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, rootfs, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("image root: attach overlay: %w", err)
	}
	return nil
}

// mountCOWWorkspace mounts in dir the host's overlay of a cow workspace
// and returns where: the workspace is its lower layer, and its upper and
// work directories are on a tmpfs of size bytes (the disk limit), so the
// sandbox's writes stop there with ENOSPC (natively, the executor's scratch
// tmpfs caps the upper layer the same way). The tmpfs's pages are charged
// to the memory cgroup of whoever writes them: runsc's gofer, in the
// sandbox's cgroup. The upper layer's root takes the workspace's owner and
// mode, which the overlay's root shows. unmountCOWWorkspace undoes it.
func mountCOWWorkspace(dir, lower string, size int64) (string, error) {
	cow, merged := filepath.Join(dir, "cow"), filepath.Join(dir, "workspace")
	for _, d := range []string{cow, merged} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("cow workspace: %w", err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(lower, &st); err != nil {
		return "", fmt.Errorf("cow workspace: %w", err)
	}
	if err := unix.Mount("tmpfs", cow, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, fmt.Sprintf("size=%d,mode=700", size)); err != nil {
		return "", fmt.Errorf("cow workspace: tmpfs: %w", err)
	}
	upper, work := filepath.Join(cow, "upper"), filepath.Join(cow, "work")
	for _, d := range []string{upper, work} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return "", fmt.Errorf("cow workspace: %w", err)
		}
	}
	if err := unix.Chmod(upper, st.Mode&0o7777); err != nil {
		return "", fmt.Errorf("cow workspace: %w", err)
	}
	if err := os.Lchown(upper, int(st.Uid), int(st.Gid)); err != nil {
		return "", fmt.Errorf("cow workspace: %w", err)
	}
	// One option at a time (fsconfig): the workspace's path is the
	// caller's, and a comma or colon in it must not read as another
	// option or layer. userxattr: the opaque and redirect marks are
	// user.overlay.*, as the native executor's overlay writes them.
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return "", fmt.Errorf("cow workspace: open overlay: %w", err)
	}
	defer unix.Close(fsfd)
	for _, o := range [][2]string{{"lowerdir+", lower}, {"upperdir", upper}, {"workdir", work}} {
		if err := unix.FsconfigSetString(fsfd, o[0], o[1]); err != nil {
			return "", fmt.Errorf("cow workspace: overlay %s: %w", o[0], err)
		}
	}
	if err := unix.FsconfigSetFlag(fsfd, "userxattr"); err != nil {
		return "", fmt.Errorf("cow workspace: overlay userxattr: %w", err)
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return "", fmt.Errorf("cow workspace: overlay: %w", err)
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV)
	if err != nil {
		return "", fmt.Errorf("cow workspace: mount overlay: %w", err)
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, merged, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return "", fmt.Errorf("cow workspace: attach overlay: %w", err)
	}
	return merged, nil
}

// unmountCOWWorkspace detaches a cow workspace's overlay and tmpfs from a
// gvisor bundle in dir, if they are mounted there.
func unmountCOWWorkspace(dir string) error {
	for _, d := range []string{"workspace", "cow"} {
		err := unix.Unmount(filepath.Join(dir, d), unix.MNT_DETACH)
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return err
		}
	}
	return nil
}

// gvisorCOW takes the checkpoints of a gvisor sandbox's cow workspace (and
// of an rw one: openGVisorRW) on the host, with the executor's own walk (executor.COWCheckpoints) over the
// host's overlay (mountCOWWorkspace) and its upper layer: as natively, a
// delta walks what the sandbox changed, not the whole tree. Inside, the
// executor could key only the merged tree: gVisor's gofer shows it no
// extended attributes (the upper layer's opaque marks) and, for the names
// of a hard link, the overlay's inode of each name rather than one.
//
// The walk reads a tree the sandbox writes, as root on the host: it is the
// executor's, every open confined beneath the tree (openat2
// RESOLVE_BENEATH, no symlink followed, no mount crossed), and it only
// reads. Writes a command has made through a shared memory map may sit in
// gVisor's page cache until the command syncs or unmaps them, as natively
// they may sit in a process's own memory.
type gvisorCOW struct {
	// mu is held by a checkpoint for its whole walk, and by close: the
	// descriptor is never closed under a walk (its number could name
	// another file once reused).
	mu     sync.Mutex
	closed bool // guarded by mu
	upper  int  // O_PATH descriptor of the upper layer; -1 for an rw workspace
	ckpt   *executor.COWCheckpoints
}

// openGVisorCOW opens the upper layer of the cow workspace mounted in the
// bundle dir.
func openGVisorCOW(dir string) (*gvisorCOW, error) {
	fd, err := unix.Open(filepath.Join(dir, "cow", "upper"), unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("cow workspace: %w", err)
	}
	return &gvisorCOW{upper: fd, ckpt: executor.NewCOWCheckpoints(filepath.Join(dir, "workspace"), fd)}, nil
}

// openGVisorRW keys an rw workspace, the host's directory ws bound in, on
// the host: the executor's walk of the whole tree, as natively, at the
// host's cost of a stat rather than gVisor's (each of the walk's system
// calls would cross gVisor's kernel inside: 18x native's, docs/gvisor.md).
func openGVisorRW(ws string) *gvisorCOW {
	return &gvisorCOW{upper: -1, ckpt: executor.NewCOWCheckpoints(ws, -1)}
}

func (g *gvisorCOW) close() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.closed {
		g.closed = true
		if g.upper >= 0 {
			unix.Close(g.upper)
		}
	}
}

// checkpoint is Sandbox.Checkpoint of the workspace. Its errors are the
// executor's as the connection reports them: a FileError of /workspace
// with the errno (EAGAIN: a file changed while it was read; try again).
//
// specials asks the executor for the FIFOs the sandbox sees in the
// workspace first: gVisor makes a FIFO in its own memory, never in the
// host's directory or overlay (docs/gvisor.md), so the host's walk cannot
// meet it; the executor's walk inside reads only directory entries and
// looks at FIFOs alone, and they are keyed and streamed with the rest.
func (g *gvisorCOW) checkpoint(ctx context.Context, id string, req sandbox.CheckpointRequest, specials func(context.Context) ([]execproto.Special, error), w io.Writer) (sandbox.CheckpointResult, error) {
	if w == nil {
		w = io.Discard
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return sandbox.CheckpointResult{}, fmt.Errorf("sandbox %s: %w", id, sandbox.ErrLost)
	}
	sp, err := specials(ctx)
	if err != nil {
		return sandbox.CheckpointResult{}, fmt.Errorf("sandbox %s: workspace FIFOs: %w", id, err)
	}
	r, err := g.ckpt.TakeWith(req.Since, req.MarkOnly, sp, w, execproto.BulkChunkSize, ctx.Done())
	if err != nil {
		fe := &sandbox.FileError{Op: execproto.OpCheckpoint, Path: "/workspace", Msg: err.Error()}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			fe.Errno = unix.ErrnoName(errno)
		}
		return sandbox.CheckpointResult{}, fmt.Errorf("sandbox %s: %w", id, fe)
	}
	return sandbox.CheckpointResult{Baseline: r.Baseline, Full: r.Full, Entries: r.Entries, Bytes: r.Bytes, Walked: r.Walked}, nil
}

// realTargets makes each of dirs (and its parents) a directory and each of
// files a regular file below an image root, where the bundle mounts on
// them: a link the image planted there (run -> /var/tmp, etc/hosts ->
// /etc/shadow) is replaced, as natively (the executor's realTargets), so
// that the mounts land where they are named. The changes go to the
// overlay's upper layer, in the bundle. os.Root keeps every step inside
// rootfs, and nothing of the sandbox runs yet to race it.
func realTargets(rootfs string, dirs, files []string) error {
	r, err := os.OpenRoot(rootfs)
	if err != nil {
		return fmt.Errorf("image root: %w", err)
	}
	defer r.Close()
	makeReal := func(name string, dir bool) error {
		fi, err := r.Lstat(name)
		switch {
		case err == nil && dir && fi.IsDir(), err == nil && !dir && fi.Mode().IsRegular():
			return nil
		case err == nil:
			if err := r.RemoveAll(name); err != nil {
				return err
			}
		case !errors.Is(err, os.ErrNotExist):
			return err
		}
		if dir {
			return r.Mkdir(name, 0o755)
		}
		f, err := r.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		return f.Close()
	}
	walk := func(name string, dir bool) error {
		parts := strings.Split(name, "/")
		for i := range parts {
			last := i == len(parts)-1
			if err := makeReal(strings.Join(parts[:i+1], "/"), dir || !last); err != nil {
				return fmt.Errorf("image root: /%s: %w", name, err)
			}
		}
		return nil
	}
	for _, d := range dirs {
		if err := walk(d, true); err != nil {
			return err
		}
	}
	for _, f := range files {
		if err := walk(f, false); err != nil {
			return err
		}
	}
	return nil
}

// unmountImageRoot detaches the image root of a gvisor bundle in dir, if
// one is mounted there.
func unmountImageRoot(dir string) error {
	err := unix.Unmount(filepath.Join(dir, "rootfs"), unix.MNT_DETACH)
	if err == nil || errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
		return nil // not a mount point (no image root), or no bundle
	}
	return err
}

// createGVisor is Create's gvisor path: sb holds its id lock.
func (b *Backend) createGVisor(ctx context.Context, sb *Sandbox, spec sandbox.Spec, tr *tracer) error {
	runsc, err := b.Runsc()
	if err != nil {
		return err
	}
	if err := sb.reserve(spec, tr); err != nil {
		return err
	}
	sb.gvisor = b.gvisorState(sb.id)
	if len(sb.spec.Layers) > 0 {
		// Held until teardown: image.Store.GC never removes a layer in use.
		if sb.layerLocks, err = lockLayers(sb.spec.Layers); err != nil {
			return err
		}
	}
	bundle := filepath.Join(sb.gvisor, "bundle")
	if err := os.MkdirAll(bundle, 0o700); err != nil {
		return fmt.Errorf("gvisor state: %w", err)
	}
	flags, err := b.gvisorBundle(bundle, &sb.spec, runsc)
	if err != nil {
		return err
	}
	sb.runsc = runsc.Path
	switch {
	case sb.spec.Workspace == "":
	case sb.spec.WorkspaceMode == "" || sb.spec.WorkspaceMode == sandbox.WorkspaceCOW:
		if sb.cow, err = openGVisorCOW(bundle); err != nil {
			return err
		}
	case sb.spec.WorkspaceMode == sandbox.WorkspaceRW:
		sb.cow = openGVisorRW(sb.spec.Workspace)
	}
	tr.mark("bundle")
	host, child, err := socketpair()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(filepath.Join(sb.gvisor, "runsc.log"), os.O_CREATE|os.O_WRONLY|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		host.Close()
		child.Close()
		return fmt.Errorf("gvisor state: %w", err)
	}
	args := append([]string{"runsc", "--root", filepath.Join(sb.gvisor, "runsc")}, flags...)
	args = append(args, "run", "--bundle", bundle, sb.id)
	cmd := exec.Command(runsc.Path)
	cmd.Args = args
	cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Dir = "/"
	// runsc hands the container its stdio: stdin is the executor's end of
	// the control socket.
	cmd.Stdin, cmd.Stdout, cmd.Stderr = child, logf, logf
	sys := &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setsid: true}
	if fd := sb.cgroupFD(); fd >= 0 {
		// runsc, its gofer and the sentry all start in the sandbox's
		// cgroup: the host limits and kills them as one.
		sys.UseCgroupFD = true
		sys.CgroupFD = fd
	}
	cmd.SysProcAttr = sys
	err = startOnParentThread(cmd)
	child.Close()
	logf.Close()
	if err != nil {
		host.Close()
		return fmt.Errorf("start runsc: %w", err)
	}
	p := &proc{pid: cmd.Process.Pid, kill: cmd.Process.Kill, done: make(chan struct{}), close: func() {}}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	sb.proc = p
	if sb.cg != nil {
		// The limits' hierarchies (v1 on a hybrid host) are joined here,
		// as the native executor's are: runsc forks its gofer and sandbox
		// only after its own runtime has started, so they inherit them.
		if err := sb.cg.AddProc(p.pid); err != nil {
			host.Close()
			return fmt.Errorf("cgroup: %w", err)
		}
	}
	tr.mark("start")
	setup := b.gvisorSetup(&sb.spec)
	bctx, cancel := context.WithTimeout(ctx, gvisorBoot)
	defer cancel()
	if err := sb.handshake(bctx, host, setup); err != nil {
		if msg := sb.runscLog(); msg != "" {
			return fmt.Errorf("%w (runsc: %s)", err, msg)
		}
		return err
	}
	tr.mark("handshake")
	// Ready: gVisor's boot is over, and nothing of the sandbox's work has
	// run yet (Create has not returned).
	if err := sb.applyCPULater(); err != nil {
		return err
	}
	if n := len(sb.spec.Layers); n > 0 {
		// The executor sees a root with an /etc of its own, as a
		// template's: say what it is.
		for i, l := range sb.layers {
			if l == "rootfs:template" {
				sb.layers[i] = fmt.Sprintf("rootfs:image:%d-layers", n)
			}
		}
	}
	// The platform gVisor's kernel runs on: what a system call costs.
	sb.layers = append(sb.layers, "gvisor-platform:"+runsc.Platform)
	tr.mark("cpulimit")
	return nil
}

// gvisorSetup is the executor's setup for a gvisor sandbox of spec.
func (b *Backend) gvisorSetup(spec *sandbox.Spec) *execproto.Setup {
	setup := newSetup(spec.Limits, b.root)
	// Commands run as root of gVisor's kernel by default, without
	// capabilities, as in a rootless native sandbox: the host's files
	// (workspace, mounts) keep their host owners inside, and root owns
	// what the host's root made.
	setup.User = execproto.User{Name: "root", UID: 0, GID: 0, Home: "/root"}
	setup.GVisor = true
	// The commands' limit is gVisor's own pids cgroup, which the executor
	// makes: the host's counts runsc's tasks too (gvisorPidsReserve).
	setup.Pids = spec.Limits.Pids
	// And it alone: RLIMIT_NPROC would count root's tasks in gVisor's
	// kernel, and a fork it failed would not be the group's, whose limit
	// the executor reports.
	delete(setup.Rlimits, "nproc")
	setup.Workspace.Mode = spec.WorkspaceMode
	if spec.Workspace == "" {
		setup.Workspace.Mode = execproto.WorkspaceEmpty
	} else if setup.Workspace.Mode == "" {
		setup.Workspace.Mode = execproto.WorkspaceCOW
	}
	if spec.Network == sandbox.NetworkProxy {
		setup.ProxyAddr = ProxyAddr
	}
	// The unprivileged account (uid 1000, renamed and rehomed as the
	// spec says) exists beside root, for commands that ask for it.
	acct := execproto.User{Name: "sandbox", UID: sandboxUID, GID: sandboxUID, Home: "/home/sandbox"}
	if a := spec.Account; a.Name != "" || a.Home != "" {
		if a.Name != "" {
			acct.Name = a.Name
		}
		acct.Home = a.HomeOf()
	}
	setup.Account = &acct
	if spec.Account.HomeIsWorkspace {
		setup.WorkspaceAlias = spec.Account.HomeOf()
	}
	return setup
}

// runscLog returns the end of what runsc wrote, for an error message.
func (sb *Sandbox) runscLog() string {
	data, err := os.ReadFile(filepath.Join(sb.gvisor, "runsc.log"))
	if err != nil {
		return ""
	}
	s := strings.TrimSpace(string(data))
	if len(s) > 500 {
		s = s[len(s)-500:]
	}
	return s
}

// teardownGVisor removes what runsc keeps for sb once its processes are
// killed: runsc's state of the container and the bundle.
func (sb *Sandbox) teardownGVisor() {
	if sb.gvisor == "" {
		return
	}
	if sb.cow != nil {
		sb.cow.close()
	}
	if sb.runsc != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, sb.runsc, "--root", filepath.Join(sb.gvisor, "runsc"), "delete", "--force", sb.id)
		cmd.Env = []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
		_ = cmd.Run() // nothing left to delete once runsc run is gone is fine
	}
	// Before the state goes: RemoveAll must not walk into the image's
	// layers.
	if err := unmountImageRoot(filepath.Join(sb.gvisor, "bundle")); err != nil {
		sb.b.log.Warn("unmount gvisor image root", "sandbox_id", sb.id, "err", err)
		return
	}
	// Nor into the host's workspace, the cow overlay's lower layer.
	if err := unmountCOWWorkspace(filepath.Join(sb.gvisor, "bundle")); err != nil {
		sb.b.log.Warn("unmount gvisor cow workspace", "sandbox_id", sb.id, "err", err)
		return
	}
	// Nor into the empty network namespace runsc since 2025 pins for its
	// gofer with --network=none: a bind mount in its root, which runsc
	// leaves (concurrent runs may stack several).
	for unix.Unmount(filepath.Join(sb.gvisor, "runsc", "null-netns"), unix.MNT_DETACH) == nil {
	}
	if err := os.RemoveAll(sb.gvisor); err != nil {
		sb.b.log.Warn("remove gvisor state", "sandbox_id", sb.id, "err", err)
	}
}

// gcGVisor removes the runsc state and bundles that gvisor sandboxes of
// dead airlock processes left (their processes died with their owner; see
// docs/gvisor.md) and returns their ids.
func (b *Backend) gcGVisor() []string {
	ents, err := os.ReadDir(filepath.Join(b.cfg.StateDir, "gvisor"))
	if err != nil {
		return nil
	}
	runsc, _ := b.runscPath()
	var cleaned []string
	for _, e := range ents {
		id := e.Name()
		b.mu.Lock()
		mine := b.mine[id]
		b.mu.Unlock()
		if mine || b.ids.isLive(id) {
			continue
		}
		sb := &Sandbox{b: b, id: id, gvisor: b.gvisorState(id), runsc: runsc}
		sb.teardownGVisor()
		cleaned = append(cleaned, id)
	}
	return cleaned
}
