package linux_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/testpki"
)

// imageEnv marks a process TestImageRoot started: the conformance suite
// and the attacks run with every sandbox's root made from the busybox
// image of the image store it names.
const imageEnv = "AIRLOCK_TEST_IMAGE_STORE"

// testImage is the name of the busybox image in the store.
const testImage = "localhost/busybox:test"

// imageStore returns a store in dir holding the busybox image as testImage
// and extra images over it (a second layer each) as their names. With
// tools, testImage has a second layer of the host's dash (as sh), bash, GNU
// grep, find, xargs, sha256sum and touch, curl and python3, which the conformance
// suite and the attacks use.
func imageStore(t testing.TB, dir string, tools bool, extra map[string][]imagetest.File) *image.Store {
	t.Helper()
	s, err := image.Open(dir, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	base := imagetest.Layer(t, imagetest.BusyboxFiles(t)...)
	imgs := map[string]v1.Image{testImage: imagetest.Image(t, "", imagetest.BusyboxConfig, base)}
	if tools {
		// Debian's /bin/sh, dash: busybox's leaves SIGQUIT ignored in the
		// command it runs last, which the suite rightly refuses.
		// GNU find, xargs, sha256sum and touch: the checkpoint conformance
		// cases list, hash and date the sandbox's tree with them.
		host := append(imagetest.HostTools(t, "dash", "bash", "grep", "curl", "find", "xargs", "sha256sum", "touch"), imagetest.Python(t)...)
		host = append(host, imagetest.File{Name: "usr/bin/sh", Typeflag: tar.TypeSymlink, Link: "dash"})
		imgs[testImage] = imagetest.Image(t, "", imagetest.BusyboxConfig, base, imagetest.Layer(t, host...))
	}
	for n, files := range extra {
		imgs[n] = imagetest.Image(t, "", imagetest.BusyboxConfig, base, imagetest.Layer(t, files...))
	}
	for n, img := range imgs {
		p, err := layout.Write(t.TempDir(), empty.Index)
		if err == nil {
			err = p.AppendImage(img)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Import(context.Background(), string(p), []string{n}); err != nil {
			t.Fatalf("Import(%s) = %v", n, err)
		}
	}
	return s
}

// imageRoot returns the root of the image the process's imageEnv names,
// or false.
func imageRoot(t testing.TB) (image.Root, bool) {
	dir := os.Getenv(imageEnv)
	if dir == "" {
		return image.Root{}, false
	}
	s, err := image.Open(dir, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	return root, true
}

// imageBackend gives every sandbox without a root of its own the image's.
type imageBackend struct {
	sandbox.Backend
	root image.Root
}

func (b imageBackend) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	if spec.RootFS == "" && len(spec.Layers) == 0 {
		b.root.Apply(&spec)
	}
	return b.Backend.Create(ctx, spec)
}

// TestImageRoot runs the conformance suite and the attacks again, in a
// process of their own, with every sandbox's root the busybox image's
// layers instead of the host's directories.
func TestImageRoot(t *testing.T) {
	if os.Getenv(imageEnv) != "" {
		t.Skip("the inner process of TestImageRoot")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	dir := filepath.Join(t.TempDir(), "images")
	imageStore(t, dir, true, nil)
	bin, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// TestAttackHostKill9 is about the host's death, whatever the root, and
	// its helper counts the processes of its executor binary, which would
	// be the one every test of this run shares (given, not built).
	args := []string{"-test.run=^(TestConformanceDirect|TestAttack.*)$", "-test.skip=^TestAttackHostKill9$", "-test.timeout=20m"}
	if testing.Verbose() {
		args = append(args, "-test.v")
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), imageEnv+"="+dir, prebuiltExecutorEnv+"="+executorPath)
	out, err := cmd.CombinedOutput()
	t.Logf("image-root tests:\n%s", out)
	if err != nil {
		t.Fatalf("the conformance suite or the attacks failed with an image root: %v", err)
	}
}

// TestImageView shows an image root from inside: the image's files and
// environment, not the host's; its layers stacked with their whiteouts;
// its owners as it recorded them; and the executor's own files where a
// container runtime puts them. It runs on each runtime.
func TestImageView(t *testing.T) {
	for _, rt := range []string{sandbox.RuntimeNative, sandbox.RuntimeGVisor} {
		t.Run(rt, func(t *testing.T) {
			if rt == sandbox.RuntimeGVisor {
				needGVisor(t)
			}
			imageView(t, rt)
		})
	}
}

func imageView(t *testing.T, rt string) {
	b := attackBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, map[string][]imagetest.File{
		"localhost/top:test": {
			{Name: ".wh.IMAGE-MARKER"},
			{Name: "etc/", Typeflag: tar.TypeDir},
			{Name: "etc/.wh..wh..opq"},
			{Name: "etc/passwd", Body: []byte("root:x:0:0:root:/root:/bin/sh\napp:x:1000:1000::/home/app:/bin/sh\n")},
			{Name: "srv/", Typeflag: tar.TypeDir, UID: 33, GID: 33},
			{Name: "srv/owned", Body: []byte("www"), UID: 33, GID: 33, Mode: 0o640},
			{Name: "usr/local/bin/su-demo", Mode: 0o4755, Body: []byte("#!/bin/sh\nid -u\n")},
			// Links the image plants where the executor mounts and writes:
			// they must not lead the setup out of the root.
			{Name: "run", Typeflag: tar.TypeSymlink, Link: "/tmp/" + escapeMark},
			{Name: "home", Typeflag: tar.TypeSymlink, Link: "/var/tmp"},
		},
	})
	root, err := s.Root(context.Background(), "localhost/top:test")
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Runtime: rt, Env: []string{"MINE=1"}}
	root.Apply(&spec)
	sb := attackCreate(t, b, spec)
	out := attackMust(t, sb, "1000", `
		test -e /IMAGE-MARKER && echo marker-visible
		test -e /usr/bin/python3 && echo host-usr-visible
		cat /etc/passwd | wc -l
		test -e /etc/group || echo group-hidden
		echo "env=$IMAGE_ENV mine=$MINE path=$PATH"
		stat -c '%u:%g %a' /srv/owned /bin/busybox /usr/local/bin/su-demo
		readlink /run
		test -d /run/airlock && echo /run/airlock
		cat /etc/hostname
		grep -c airlock /etc/hosts
	`)
	want := strings.Join([]string{
		"2", "group-hidden", // the top layer's opaque /etc holds its passwd alone
		"env=from-image mine=1 path=/usr/bin:/bin:/run/airlock/bin",
		"33:33 640", "0:0 755", "0:0 4755",
		"/run/airlock", "airlock", "1",
	}, "\n")
	if strings.TrimSpace(out) != want {
		t.Errorf("inside an image root:\n%s\nwant:\n%s", out, want)
	}
	if _, err := os.Lstat("/tmp/" + escapeMark); err == nil {
		t.Errorf("the image's /run link led the setup to the host's /tmp/%s", escapeMark)
	}
	// The image's set-uid bit grants nothing (nosuid, no_new_privs).
	if got := strings.TrimSpace(attackMust(t, sb, "1000", "/usr/local/bin/su-demo")); got != "1000" {
		t.Errorf("a set-uid root file of the image ran as uid %s, want the caller's 1000", got)
	}
	// The root is read-only without WritableRoot, for root too.
	for _, u := range []string{"", "root"} {
		if res := attackRun(t, sb, u, "echo x > /srv/new || echo x > /IMAGE-NEW"); res.ok() {
			t.Errorf("user %q wrote into the image's root: %v", u, res)
		}
	}
}

// TestGVisorImageRoot: a gvisor sandbox of an image with WritableRoot
// writes anywhere in its root, and none of it reaches the image's layers;
// Destroy leaves no mount of the layers on the host.
func TestGVisorImageRoot(t *testing.T) {
	b := newGVisorBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{Runtime: sandbox.RuntimeGVisor, WritableRoot: true}
	root.Apply(&spec)
	sb := sandboxtest.Create(t, b, spec)
	if l := sb.Info().Layers; !slices.Contains(l, fmt.Sprintf("rootfs:image:%d-layers", len(spec.Layers))) {
		t.Errorf("Info().Layers = %v, want rootfs:image:%d-layers", l, len(spec.Layers))
	}
	if out := attackMust(t, sb, "root", "echo new > /bin/new-tool && cat /bin/new-tool && rm /bin/busybox-missing 2>/dev/null; echo x > /etc/passwd && cat /etc/passwd"); out != "new\nx\n" {
		t.Errorf("writes into a writable image root: %q, want new and x", out)
	}
	for _, l := range spec.Layers {
		if _, err := os.Stat(filepath.Join(l, "bin", "new-tool")); err == nil {
			t.Errorf("a write into the sandbox's root reached layer %s", l)
		}
		if data, err := os.ReadFile(filepath.Join(l, "etc", "passwd")); err == nil && string(data) == "x\n" {
			t.Errorf("a write into the sandbox's /etc/passwd reached layer %s", l)
		}
	}
	// The host's overlay, and its upper layer (which takes only the
	// bundle's mount points).
	mount := func() string {
		data, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, "/gvisor/"+sb.ID()+"/bundle/rootfs") {
				return l
			}
		}
		return ""
	}
	line := mount()
	_, upper, ok := strings.Cut(line, "upperdir=")
	if !ok {
		t.Fatalf("control: no overlay with an upper layer for the image root of sandbox %s in the host's mountinfo: %q", sb.ID(), line)
	}
	upper, _, _ = strings.Cut(upper, ",")
	if _, err := os.Stat(filepath.Join(upper, "bin", "new-tool")); err == nil {
		t.Errorf("a write into the sandbox's root reached the host overlay's upper layer %s", upper)
	}
	mounted := func() bool { return mount() != "" }
	if err := sb.Destroy(context.Background()); err != nil {
		t.Fatalf("Destroy = %v", err)
	}
	if mounted() {
		t.Errorf("the image root of sandbox %s is still mounted on the host after Destroy", sb.ID())
	}
}

// escapeMark names what an image's link would make on the host if the
// setup followed it.
const escapeMark = "airlock-image-escape-test"

// TestRootlessImage: an unprivileged user's own store (layers unpacked
// without owners: all the user's, root's inside) and a rootless sandbox on
// it, whose executor clones the layers itself; whiteouts and opaque
// directories are made, and honoured, as in root mode.
func TestRootlessImage(t *testing.T) {
	rootlessInner(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, map[string][]imagetest.File{
		"localhost/top:test": {
			{Name: ".wh.IMAGE-MARKER"},
			{Name: "etc/", Typeflag: tar.TypeDir},
			{Name: "etc/.wh..wh..opq"},
			{Name: "etc/passwd", Body: []byte("root:x:0:0:root:/root:/bin/sh\n")},
		},
	})
	root, err := s.Root(context.Background(), "localhost/top:test")
	if err != nil {
		t.Fatal(err)
	}
	var spec sandbox.Spec
	root.Apply(&spec)
	sb := rootlessCreate(t, rootlessBackend(t), spec)
	out := attackMust(t, sb, "", "test -e /IMAGE-MARKER || echo marker-hidden; test -e /etc/group || echo group-hidden; wc -l < /etc/passwd; stat -c %u /bin/busybox; id -u; echo $IMAGE_ENV")
	if want := "marker-hidden\ngroup-hidden\n1\n0\n0\nfrom-image\n"; out != want {
		t.Errorf("inside a rootless image root:\n%s\nwant:\n%s", out, want)
	}
}

// TestImageTrustStore: a sandbox on an image with extra CAs (the egress
// proxy's) trusts them and the public roots both, as on the host's root:
// its tools reach the hosts the proxy only tunnels to, not only those it
// inspects.
func TestImageTrustStore(t *testing.T) {
	const bundle = "/etc/ssl/certs/ca-certificates.crt"
	host, err := os.ReadFile(bundle)
	if err != nil {
		t.Skipf("the host has no %s: %v", bundle, err)
	}
	b := attackBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	ca := newTestCAPEM(t)
	spec := sandbox.Spec{TrustedCAs: ca}
	root.Apply(&spec)
	sb := attackCreate(t, b, spec)
	out := attackMust(t, sb, "", `echo "$SSL_CERT_FILE"; grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE"`)
	want := fmt.Sprintf("%s\n%d\n", bundle, strings.Count(string(host), "BEGIN CERTIFICATE")+1)
	if out != want {
		t.Errorf("SSL_CERT_FILE and its certificates = %q, want %q (the host's roots and the extra CA)", out, want)
	}
}

// newTestCAPEM returns a throwaway CA certificate, PEM-encoded.
func newTestCAPEM(t *testing.T) []byte {
	t.Helper()
	ca, err := testpki.New("image trust test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca.PEM
}

// TestImageRootCheckpoint: a root checkpoint of an image root streams what
// the commands changed in the root since its baseline, as an OCI layer
// says it (deletions as whiteouts), and nothing the sandbox's own setup
// wrote or its mounts hold; a sandbox on the host's root has none, and a
// root checkpoint with no baseline is refused.
func TestImageRootCheckpoint(t *testing.T) {
	b := attackBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{User: "root", WritableRoot: true}
	root.Apply(&spec)
	sb := attackCreate(t, b, spec)
	cp := sb.(sandbox.Checkpointer)
	ctx := context.Background()
	if _, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Root: true}, io.Discard); err == nil {
		t.Error("a full root checkpoint was streamed, want it refused")
	}
	mark, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Root: true, MarkOnly: true}, nil)
	if err != nil {
		t.Fatalf("mark the root: %v", err)
	}
	attackMust(t, sb, "", `
		mkdir -p /opt/app && echo built > /opt/app/out
		rm /IMAGE-MARKER
		echo scratch > /workspace/not-in-root
		echo kept > /tmp/in-root
	`)
	var buf bytes.Buffer
	res, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Root: true, Since: mark.Baseline}, &buf)
	if err != nil {
		t.Fatalf("root checkpoint: %v", err)
	}
	if res.Full {
		t.Error("root checkpoint since a baseline says Full")
	}
	got := map[string]string{}
	tr := tar.NewReader(&buf)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		got[h.Name] = string(body)
	}
	// A writable root's /tmp is its own (as in a docker build), the
	// workspace a mount of its own.
	want := map[string]string{"opt/": "", "opt/app/": "", "opt/app/out": "built\n", ".wh.IMAGE-MARKER": "", "tmp/": "", "tmp/in-root": "kept\n"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("root delta (-want +got):\n%s", diff)
	}

	host := attackSandbox(t, sandbox.RuntimeNative, sandbox.Spec{})
	if _, ok := imageRoot(t); !ok {
		if _, err := host.(sandbox.Checkpointer).Checkpoint(ctx, sandbox.CheckpointRequest{Root: true, MarkOnly: true}, nil); err == nil {
			t.Error("a sandbox on the host's read-only root marked a root baseline, want an error")
		}
	}
}

// TestImageRootCaps: a build sandbox's root keeps exactly the build
// capabilities (chown to a package's user, switch to it), in its own user
// namespace only: a command of another user holds none, and what the other
// capabilities and the other layers guard stays refused.
func TestImageRootCaps(t *testing.T) {
	b := attackBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{User: "root", WritableRoot: true, RootCaps: sandbox.BuildCaps}
	root.Apply(&spec)
	sb := attackCreate(t, b, spec)
	var want uint64
	for _, c := range []uint{0, 1, 3, 4, 5, 6, 7, 10} { // CHOWN DAC_OVERRIDE FOWNER FSETID KILL SETGID SETUID NET_BIND_SERVICE
		want |= 1 << c
	}
	if got := capEff(t, sb, "root"); got != want {
		t.Errorf("root's CapEff = %#x, want the build set %#x", got, want)
	}
	if got := capEff(t, sb, "1000"); got != 0 {
		t.Errorf("uid 1000's CapEff = %#x in a build sandbox, want none", got)
	}
	out := attackMust(t, sb, "root", `
		echo x > /opt-file && chown 42:42 /opt-file && stat -c %u:%g /opt-file
		echo 'pkg:x:42:42::/:/bin/sh' >> /etc/passwd && su pkg -c 'id -u'`)
	if out != "42:42\n42\n" {
		t.Errorf("chown and a switch to uid 42 printed %q, want 42:42 and 42", out)
	}
	for _, probe := range []string{
		"mount -t tmpfs none /mnt",        // CAP_SYS_ADMIN, and seccomp
		"mknod /dev/x c 1 3",              // CAP_MKNOD
		"cat /proc/1/environ",             // the executor: not dumpable, CAP_SYS_PTRACE
		"chroot / true",                   // CAP_SYS_CHROOT
		"ip link add dummy0 type dummy",   // CAP_NET_ADMIN
		"echo 1 > /proc/sys/kernel/sysrq", // the host's sysctl
		// The executor's /proc entries stay its own (procfs resets their
		// owner from the task), and its descriptors out of reach.
		"chown 42 /proc/1/fd; test \"$(stat -c %u /proc/1/fd)\" = 42",
		"chown 42 /proc/1/fd; su pkg -c 'ls -l /proc/1/fd/ | grep -q socket'",
	} {
		if r := attackRun(t, sb, "root", probe); r.ok() {
			t.Errorf("%q succeeded as root with the build capabilities, want it refused:\n%v", probe, r)
		}
	}

	plain := sandbox.Spec{User: "root", WritableRoot: true}
	root.Apply(&plain)
	if got := capEff(t, attackCreate(t, b, plain), "root"); got != 0 {
		t.Errorf("root's CapEff = %#x without RootCaps, want none", got)
	}
	for _, bad := range []sandbox.Spec{
		{RootCaps: []string{"CHOWN"}}, // no writable root
		{WritableRoot: true, Layers: spec.Layers, RootCaps: []string{"SYS_ADMIN"}},
		{WritableRoot: true, Layers: spec.Layers, RootCaps: []string{"CHOWN", "CHOWN"}},
	} {
		if err := bad.Validate(); err == nil {
			t.Errorf("Validate(RootCaps %v, WritableRoot %v) = nil, want an error", bad.RootCaps, bad.WritableRoot)
		}
	}
}

// capEff is the effective capability set of a command run as user in sb.
func capEff(t *testing.T, sb sandbox.Sandbox, user string) uint64 {
	t.Helper()
	out := attackMust(t, sb, user, "grep ^CapEff: /proc/self/status")
	v, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(out, "CapEff:")), 16, 64)
	if err != nil {
		t.Fatalf("CapEff of %q: %v", out, err)
	}
	return v
}

// TestGVisorWritableRootRW: a writable root on gvisor is gVisor's
// in-memory overlay of the root alone, so it goes with a read-write
// workspace and read-write mounts, whose writes reach the host, while the
// root's stay out of the image's layers. And a cow workspace goes with a
// read-write mount.
func TestGVisorWritableRootRW(t *testing.T) {
	b := newGVisorBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{sandbox.WorkspaceRW, sandbox.WorkspaceCOW} {
		t.Run(mode, func(t *testing.T) {
			ws, mnt := t.TempDir(), t.TempDir()
			spec := sandbox.Spec{
				Runtime: sandbox.RuntimeGVisor, WritableRoot: mode == sandbox.WorkspaceRW, Workspace: ws, WorkspaceMode: mode,
				Mounts: []sandbox.Mount{{Source: mnt, Target: "/data"}},
			}
			root.Apply(&spec)
			sb := sandboxtest.Create(t, b, spec)
			cmd := "echo ws > /workspace/a && echo data > /data/b && cat /workspace/a /data/b"
			if spec.WritableRoot {
				cmd += " && echo root > /bin/c && cat /bin/c"
			}
			want := map[bool]string{true: "ws\ndata\nroot\n", false: "ws\ndata\n"}[spec.WritableRoot]
			if out := attackMust(t, sb, "root", cmd); out != want {
				t.Errorf("writes: %q, want %q", out, want)
			}
			if data, err := os.ReadFile(filepath.Join(mnt, "b")); err != nil || string(data) != "data\n" {
				t.Errorf("the read-write mount's file on the host: %q, %v", data, err)
			}
			_, err := os.Stat(filepath.Join(ws, "a"))
			if reached := err == nil; reached != (mode == sandbox.WorkspaceRW) {
				t.Errorf("%s workspace: the write reached the host = %v", mode, reached)
			}
			for _, l := range spec.Layers {
				if _, err := os.Stat(filepath.Join(l, "bin", "c")); err == nil {
					t.Errorf("a write into the sandbox's root reached layer %s", l)
				}
			}
		})
	}
}

// TestImageDestroyDetached: a sandbox of an image is torn down detached as
// one on the host's root is (DestroyDetached: its processes killed, not
// waited for), and its layers' locks are released when it returns, so the
// image store's garbage collection may take them at once.
func TestImageDestroyDetached(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: uid ranges are root mode's")
	}
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir(), UIDSlotDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var spec sandbox.Spec
	root.Apply(&spec)
	sb, err := b.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	ls := sb.(*linux.Sandbox)
	dir := linux.CgroupV2Dir(ls)
	if dir == "" || linux.SlotFile(ls) == "" {
		sb.Destroy(ctx)
		t.Skip("no cgroup2 group or no uid slot: DestroyDetached is Destroy here")
	}
	if !linux.Detachable(ls) {
		t.Error("a sandbox of an image is not torn down detached")
	}
	if _, err := ls.Start(ctx, sandbox.Command{Argv: []string{"sh", "-c", "sleep 1000 & exec sleep 1000"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the commands to start", func() bool { return procs(t, dir) >= 3 })
	pids := cgroupPIDs(t, dir)
	if err := ls.DestroyDetached(ctx); err != nil {
		t.Fatal(err)
	}
	// Killed: each is gone, exiting or has SIGKILL pending, or (a thread
	// that has taken its SIGKILL but not yet set PF_EXITING shows
	// neither, a window a loaded machine shows) is gone soon after;
	// a `sleep 1000` not killed would not.
	for _, pid := range pids {
		if !killedOrGone(t, pid) {
			waitFor(t, fmt.Sprintf("process %d of the image sandbox to die after DestroyDetached", pid), func() bool {
				return killedOrGone(t, pid)
			})
		}
	}
	for _, l := range root.Layers {
		fd, err := syscall.Open(l, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
			t.Errorf("layer %s still locked after DestroyDetached: %v", l, err)
		}
		syscall.Close(fd)
	}
	waitFor(t, "the group to empty", func() bool { return procs(t, dir) == 0 })
}

// TestImageRootsApart: two live sandboxes of one image, each with its
// root writable, write the same paths of the root; each reads back its
// own writes only, and the image's layers on the host are unchanged.
func TestImageRootsApart(t *testing.T) {
	b := attackBackend(t)
	s := imageStore(t, filepath.Join(t.TempDir(), "images"), false, nil)
	root, err := s.Root(context.Background(), testImage)
	if err != nil {
		t.Fatal(err)
	}
	var sbs []sandbox.Sandbox
	for range 2 {
		spec := sandbox.Spec{User: "root", WritableRoot: true}
		root.Apply(&spec)
		sbs = append(sbs, attackCreate(t, b, spec))
	}
	// The first also removes a file of the image, which the second keeps.
	attackMust(t, sbs[0], "", "echo 0 > /written && echo 0 > /etc/written && rm /IMAGE-MARKER")
	attackMust(t, sbs[1], "", "echo 1 > /written && echo 1 > /etc/written")
	for i, want := range []string{"0\n0", "1\n1\nmarker"} {
		got := strings.TrimSpace(attackMust(t, sbs[i], "", "cat /written /etc/written; test -e /IMAGE-MARKER && echo marker; true"))
		if got != want {
			t.Errorf("sandbox %d reads %q of its root, want its own writes %q", i, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(root.Layers[0], "IMAGE-MARKER")); err != nil {
		t.Errorf("a sandbox's removal reached the image's layer: %v", err)
	}
	for _, l := range root.Layers {
		for _, p := range []string{"written", "etc/written"} {
			if _, err := os.Lstat(filepath.Join(l, p)); err == nil {
				t.Errorf("a sandbox's write reached the image's layer: %s", filepath.Join(l, p))
			}
		}
	}
}
