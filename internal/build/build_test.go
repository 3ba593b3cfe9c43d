package build_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/airlockrun/airlock/internal/build"
	"github.com/airlockrun/airlock/internal/dockerfile"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

var executorPath string

func TestMain(m *testing.M) {
	if os.Geteuid() == 0 {
		p, remove, err := sandboxtest.BuildExecutor()
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		executorPath = p
		code := m.Run()
		remove()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// baseImage is the busybox image the builds start from.
const baseImage = "localhost/busybox:test"

// counting is the real backend, counting the sandboxes it makes: a
// cached rebuild makes none.
type counting struct {
	sandbox.Backend
	made atomic.Int64
}

func (c *counting) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Sandbox, error) {
	c.made.Add(1)
	return c.Backend.Create(ctx, spec)
}

type env struct {
	store   *image.Store
	backend *counting
	native  *linux.Backend
	cache   string
}

func newEnv(t testing.TB) *env {
	t.Helper()
	if executorPath == "" {
		t.Skip("needs root to create sandboxes")
	}
	s, err := image.Open(filepath.Join(t.TempDir(), "images"), image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := layout.Write(t.TempDir(), empty.Index)
	if err == nil {
		err = p.AppendImage(imagetest.Busybox(t))
	}
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(context.Background(), string(p), []string{baseImage}); err != nil {
		t.Fatal(err)
	}
	native, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(t.TempDir(), "run")})
	if err != nil {
		t.Fatal(err)
	}
	return &env{store: s, backend: &counting{Backend: native}, native: native, cache: filepath.Join(t.TempDir(), "build-cache.json")}
}

func (e *env) build(t testing.TB, dockerfile, contextDir string, args map[string]string, tags ...string) (build.Result, string, error) {
	t.Helper()
	return e.buildWith(t, build.Options{}, dockerfile, contextDir, args, tags...)
}

// buildWith builds with o, the env's store, backend and cache filled in.
func (e *env) buildWith(t testing.TB, o build.Options, dockerfile, contextDir string, args map[string]string, tags ...string) (build.Result, string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	o.Store, o.Backend, o.Cache, o.Log = e.store, e.backend, e.cache, &log
	res, err := build.Build(ctx, o,
		build.Request{Dockerfile: []byte(dockerfile), Context: contextDir, BuildArgs: args, Tags: tags})
	return res, log.String(), err
}

// writeContext makes a build context of files (name -> content; a name
// ending in "@" is a symlink to the content).
func writeContext(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, strings.TrimSuffix(name, "@"))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		if strings.HasSuffix(name, "@") {
			err = os.Symlink(body, p)
		} else {
			err = os.WriteFile(p, []byte(body), 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const appDockerfile = `# the test's app image
ARG GREETING=hello
FROM ` + baseImage + `
ARG GREETING
ENV APP_HOME=/opt/app \
    MODE="built image"
WORKDIR $APP_HOME
COPY app.sh lib/ ./
ADD --chmod=0750 app.sh /usr/local/bin/app
RUN echo "$GREETING from run" > /opt/app/greeting && \
    rm /IMAGE-MARKER && \
    mkdir -p /var/data && chmod 1777 /var/data && \
    echo private > /root/private && chmod 600 /root/private
RUN ["/bin/sh", "-c", "echo exec form > /opt/app/exec"]
USER 1000
RUN touch /var/data/made-by-user
LABEL org.example.name="app image"
CMD ["/bin/sh", "/opt/app/app.sh"]
`

// TestBuild: a Dockerfile over the busybox image with RUN steps that
// write and delete files (as root, then as the USER), COPY, ENV, WORKDIR,
// USER, ARG, LABEL and CMD; a sandbox started from the result sees exactly
// that; a rebuild makes no sandbox and the same image.
func TestBuild(t *testing.T) {
	e := newEnv(t)
	dir := writeContext(t, map[string]string{
		"app.sh":            "echo \"app: $MODE\"\ncat /opt/app/greeting\n",
		"lib/util.txt":      "util\n",
		"lib/skip.log":      "ignored\n",
		"lib/link@":         "util.txt",
		".dockerignore":     "# logs stay out\n**/*.log\n",
		"not-copied/x":      "x",
		"Dockerfile.unused": "FROM nothing",
	})
	res, log, err := e.build(t, appDockerfile, dir, map[string]string{"GREETING": "hi"}, "localhost/app:1")
	if err != nil {
		t.Fatalf("Build = %v\nlog:\n%s", err, log)
	}
	if res.Steps != 5 || res.Cached != 0 || e.backend.made.Load() != 3 {
		t.Errorf("first build: %d steps, %d cached, %d sandboxes; want 5, 0, 3", res.Steps, res.Cached, e.backend.made.Load())
	}
	img := res.Image
	want := image.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "IMAGE_ENV=from-image", "APP_HOME=/opt/app", "MODE=built image"},
		WorkingDir: "/opt/app", User: "1000",
		Cmd:    []string{"/bin/sh", "/opt/app/app.sh"},
		Labels: map[string]string{"org.example.name": "app image"},
	}
	if diff := cmp.Diff(want, img.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if len(img.Layers) != 1+5 {
		t.Errorf("%d layers, want the base's and 5 (COPY, ADD, 3 RUN)", len(img.Layers))
	}

	root, err := e.store.Root(context.Background(), "localhost/app:1")
	if err != nil {
		t.Fatal(err)
	}
	var spec sandbox.Spec
	root.Apply(&spec)
	sb := sandboxtest.Create(t, e.native, spec)
	argv, err := root.Command(nil)
	if err != nil {
		t.Fatal(err)
	}
	var out, errb sandboxtest.SyncBuffer
	r, err := sandbox.Run(context.Background(), sb, sandbox.Command{Argv: argv, Stdout: &out, Stderr: &errb, Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("the image's command: %+v, %v\n%s", r, err, errb.String())
	}
	if got, want := out.String(), "app: built image\nhi from run\n"; got != want {
		t.Errorf("the image's command printed %q, want %q", got, want)
	}
	var probe sandboxtest.SyncBuffer
	r, err = sandbox.Run(context.Background(), sb, sandbox.Command{Argv: []string{"/bin/sh", "-c", `
		pwd; id -u
		test -e /IMAGE-MARKER || echo marker-deleted
		cat /opt/app/exec /opt/app/util.txt; readlink /opt/app/link
		test -e /opt/app/skip.log || echo log-ignored
		test -e /opt/app/lib || echo contents-copied
		stat -c '%u:%g' /opt/app/app.sh /var/data /var/data/made-by-user
		stat -c '%a' /usr/local/bin/app
		echo "$GREETING"
	`}, Stdout: &probe, Stderr: &errb, Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("probe: %+v, %v\n%s", r, err, errb.String())
	}
	wantOut := strings.Join([]string{
		"/opt/app", "1000", "marker-deleted", "exec form", "util", "util.txt", "log-ignored", "contents-copied",
		"0:0", "0:0", "1000:1000", "750",
		"", // a build arg is not kept in the image
	}, "\n") + "\n"
	if probe.String() != wantOut {
		t.Errorf("inside the built image:\n%s\nwant:\n%s", probe.String(), wantOut)
	}

	// A file only root may read is in the layer (the step's changes are
	// read with the executor's identity, not the sandbox user's).
	var private sandboxtest.SyncBuffer
	r, err = sandbox.Run(context.Background(), sb, sandbox.Command{Argv: []string{"cat", "/root/private"}, User: "root", Stdout: &private, Stderr: &errb, Timeout: time.Minute})
	if err != nil || r.ExitCode != 0 || private.String() != "private\n" {
		t.Errorf("cat /root/private as root: %q, %+v, %v\n%s", private.String(), r, err, errb.String())
	}

	// A rebuild: every step cached, no sandbox, the same image.
	before := e.backend.made.Load()
	again, log, err := e.build(t, appDockerfile, dir, map[string]string{"GREETING": "hi"}, "localhost/app:2")
	if err != nil {
		t.Fatalf("rebuild = %v\n%s", err, log)
	}
	if made := e.backend.made.Load() - before; made != 0 || again.Cached != again.Steps {
		t.Errorf("rebuild made %d sandboxes, %d of %d steps cached; want none made, all cached", made, again.Cached, again.Steps)
	}
	if again.Image.Digest != img.Digest {
		t.Errorf("rebuild digest %s, want %s", again.Image.Digest, img.Digest)
	}
	// Another build arg: the steps after it run again, not the COPY.
	other, log, err := e.build(t, appDockerfile, dir, map[string]string{"GREETING": "hey"})
	if err != nil {
		t.Fatalf("build with another arg = %v\n%s", err, log)
	}
	if other.Cached != 2 || other.Image.Digest == img.Digest {
		t.Errorf("build with another arg: %d cached (want the COPY and ADD alone), digest %s", other.Cached, other.Image.Digest)
	}
	// A changed context file: its COPY and what follows run again.
	if err := os.WriteFile(filepath.Join(dir, "lib/util.txt"), []byte("changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	changed, log, err := e.build(t, appDockerfile, dir, map[string]string{"GREETING": "hi"})
	if err != nil {
		t.Fatalf("build with a changed file = %v\n%s", err, log)
	}
	if changed.Cached != 0 {
		t.Errorf("build with a changed context file: %d steps cached, want 0 (the steps after a changed one have another parent)", changed.Cached)
	}
}

// TestBuildRefused: what a build does not do is refused before any
// sandbox is made, naming the line and why.
func TestBuildRefused(t *testing.T) {
	e := newEnv(t)
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := writeContext(t, map[string]string{
		"ok":             "ok",
		"out@":           filepath.Join(outside, "secret"),
		"dir/up@":        "../../" + filepath.Base(outside),
		"abs/link@":      "/etc/passwd",
		"archive.tar.gz": "\x1f\x8b\x08\x00rest",
		"skipped.txt":    "x",
		".dockerignore":  "skipped.txt\n",
	})
	from := "FROM " + baseImage + "\n"
	tests := []struct {
		name, dockerfile string
		msg              string
	}{
		{"healthcheck", from + "HEALTHCHECK CMD true\n", "line 2: HEALTHCHECK is not supported"},
		{"add url", from + "ADD https://example.com/x /x\n", "line 2: ADD: ADD https://example.com/x: URLs and git repositories are not supported"},
		{"add git", from + "ADD git@github.com:a/b.git /b\n", "URLs and git repositories are not supported"},
		{"add archive", from + "ADD archive.tar.gz /x\n", "a local archive"},
		{"copy dotdot", from + "COPY ../x /x\n", "outside the build context"},
		{"copy symlink out", from + "COPY out /x\n", "leads out of the build context"},
		{"copy dir with link out", from + "COPY dir /x\n", "out of the build context: refused"},
		{"copy dir with absolute link", from + "COPY abs /x\n", "out of the build context: refused"},
		{"copy ignored", from + "COPY skipped.txt /x\n", "excluded by .dockerignore"},
		{"copy missing", from + "COPY nothere /x\n", "nothere"},
		{"glob matches nothing", from + "COPY *.none /x/\n", "no file of the build context matches"},
		{"chown by name", from + "COPY --chown=app ok /x\n", "want numeric UID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := e.build(t, tt.dockerfile, dir, nil)
			if err == nil || !strings.Contains(err.Error(), tt.msg) {
				t.Errorf("Build = %v, want an error with %q", err, tt.msg)
			}
			var de *dockerfile.Error
			if !errors.As(err, &de) {
				t.Errorf("Build = %T, want a *dockerfile.Error naming the line", err)
			}
		})
	}
	if n := e.backend.made.Load(); n != 0 {
		t.Errorf("refused builds made %d sandboxes", n)
	}
	// A base the store lacks (and no registry serves) keeps the store's
	// error, for the caller to tell (the command line: bad input).
	_, _, err := e.build(t, "FROM localhost:1/missing:1\n", dir, nil)
	if err == nil || !strings.Contains(err.Error(), "step at Dockerfile line 1 (FROM): base image localhost:1/missing:1") {
		t.Errorf("Build(FROM a missing image) = %v", err)
	}
}

// TestBuildRunFails: a failing RUN reports its line, exit status and the
// end of its output, and stores nothing under the tag.
func TestBuildRunFails(t *testing.T) {
	e := newEnv(t)
	df := "FROM " + baseImage + "\nRUN echo building\nRUN echo about to fail; echo oops >&2; exit 3\n"
	_, _, err := e.build(t, df, t.TempDir(), nil, "localhost/failed:1")
	var re *build.RunError
	if !errors.As(err, &re) {
		t.Fatalf("Build = %v, want a RunError", err)
	}
	if re.Line != 3 || re.Result.ExitCode != 3 || !strings.Contains(re.Tail, "about to fail") || !strings.Contains(re.Tail, "oops") {
		t.Errorf("RunError = line %d, exit %d, tail %q", re.Line, re.Result.ExitCode, re.Tail)
	}
	if msg := err.Error(); !strings.Contains(msg, "Dockerfile line 3") || !strings.Contains(msg, "exit status 3") {
		t.Errorf("error text %q, want the line and the exit status", msg)
	}
	if _, err := e.store.Inspect("localhost/failed:1"); !errors.Is(err, image.ErrNotFound) {
		t.Errorf("Inspect(the failed build's tag) = %v, want ErrNotFound", err)
	}
}

// TestBuildConfig: instructions that only edit the config make no
// sandbox and no layer: a shell-form CMD runs through /bin/sh -c, an
// ENTRYPOINT drops the CMD the base had (as docker), substitution uses
// ARGs and ENV (ENV wins), LABELs merge.
func TestBuildConfig(t *testing.T) {
	e := newEnv(t)
	df := `FROM ` + baseImage + `
ARG V=from-arg
ENV A=$V B=${MISSING:-dflt}
ENV V=from-env
ENV C=$V
USER 1000:1000
WORKDIR /
ENTRYPOINT ["/bin/echo"]
LABEL a=1
LABEL b="two words"
`
	res, log, err := e.build(t, df, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	want := image.Config{
		Env:        []string{"PATH=/usr/bin:/bin", "IMAGE_ENV=from-image", "A=from-arg", "B=dflt", "V=from-env", "C=from-env"},
		WorkingDir: "/", User: "1000:1000",
		Entrypoint: []string{"/bin/echo"},
		Labels:     map[string]string{"a": "1", "b": "two words"},
	}
	if diff := cmp.Diff(want, res.Image.Config); diff != "" {
		t.Errorf("config (-want +got):\n%s", diff)
	}
	if len(res.Image.Layers) != 1 || e.backend.made.Load() != 0 {
		t.Errorf("%d layers, %d sandboxes; want the base's layer alone and none", len(res.Image.Layers), e.backend.made.Load())
	}
	res, log, err = e.build(t, "FROM "+baseImage+"\nCMD echo $HOME\n", t.TempDir(), nil)
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	if got, want := res.Image.Config.Cmd, []string{"/bin/sh", "-c", "echo $HOME"}; !cmp.Equal(got, want) {
		t.Errorf("shell-form CMD = %q, want %q", got, want)
	}
}

// TestBuildTrailingWorkdir: a WORKDIR after the last RUN is made all the
// same (a sandbox of the image starts there), once: a rebuild makes no
// sandbox.
func TestBuildTrailingWorkdir(t *testing.T) {
	e := newEnv(t)
	df := "FROM " + baseImage + "\nRUN echo first\nWORKDIR /srv/late\nENV X=1\n"
	res, log, err := e.build(t, df, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	root, err := e.store.Root(context.Background(), res.Image.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(root.Layers[len(root.Layers)-1], "srv/late")); err != nil || !fi.IsDir() {
		t.Errorf("srv/late in the last layer: %v, %v; want the working directory made", fi, err)
	}
	made := e.backend.made.Load()
	again, log, err := e.build(t, df, t.TempDir(), nil)
	if err != nil || again.Image.Digest != res.Image.Digest || e.backend.made.Load() != made {
		t.Errorf("rebuild = %s, %v (%d sandboxes made); want %s from the cache\n%s", again.Image.Digest, err, e.backend.made.Load()-made, res.Image.Digest, log)
	}
}

// TestBuildRunAsPackageManager: a RUN step as root does what package
// managers do (sandbox.BuildCaps): chown to a package's user and switch
// to it; the layer records the owner.
func TestBuildRunAsPackageManager(t *testing.T) {
	e := newEnv(t)
	ctxDir := t.TempDir()
	if err := os.WriteFile(filepath.Join(ctxDir, "payload"), []byte("made\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	df := "FROM " + baseImage + `
COPY payload /tmp/
RUN echo 'pkg:x:42:42::/srv/pkg:/bin/sh' >> /etc/passwd && echo 'pkg:x:42:' >> /etc/group && mkdir -p /srv/pkg && chown pkg:pkg /srv/pkg && \
    su pkg -c 'cat /tmp/payload > /srv/pkg/by-pkg' && rm /tmp/payload && chown root:root /srv/pkg/by-pkg && chmod 4755 /srv/pkg/by-pkg
`
	res, log, err := e.build(t, df, ctxDir, nil)
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	root, err := e.store.Root(context.Background(), res.Image.Digest)
	if err != nil {
		t.Fatal(err)
	}
	top := root.Layers[len(root.Layers)-1]
	for _, c := range []struct {
		path     string
		uid, gid uint32
		mode     os.FileMode
	}{
		{"srv/pkg", 42, 42, os.ModeDir | 0o755},
		{"srv/pkg/by-pkg", 0, 0, os.ModeSetuid | 0o755},
	} {
		fi, err := os.Lstat(filepath.Join(top, c.path))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != c.uid || st.Gid != c.gid || fi.Mode() != c.mode {
			t.Errorf("%s: %d:%d %v in the layer, want %d:%d %v", c.path, st.Uid, st.Gid, fi.Mode(), c.uid, c.gid, c.mode)
		}
	}
}

// TestBuildStages: a multi-stage build copies a directory, a file and a
// file of /tmp out of an earlier stage (by name and by index), a stage may
// start FROM another, and only the last stage's layers make the image; a
// rebuild is all cache hits and makes no sandbox.
func TestBuildStages(t *testing.T) {
	e := newEnv(t)
	df := "ARG BASE=" + baseImage + `
FROM $BASE AS build
RUN mkdir -p /out/sub && echo bin > /out/app && chmod 750 /out/app && echo lib > /out/sub/lib && \
    ln -s app /out/link && echo tmp > /tmp/t && echo secret > /build-only
FROM build AS more
RUN echo more > /out/more
FROM ${BASE}
COPY --from=build /out /opt/app/
COPY --from=0 /out/app /usr/local/bin/
COPY --from=MORE /out/more /tmp/t /extra/
RUN cat /opt/app/sub/lib /usr/local/bin/app /extra/more /extra/t > /check && readlink /opt/app/link >> /check && \
    stat -c %a:%u /usr/local/bin/app >> /check && test ! -e /build-only && test ! -e /out
`
	res, log, err := e.build(t, df, t.TempDir(), nil)
	if err != nil {
		t.Fatalf("Build = %v\n%s", err, log)
	}
	root, err := e.store.Root(context.Background(), res.Image.Digest)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root.Layers[len(root.Layers)-1], "check"))
	if want := "lib\nbin\nmore\ntmp\napp\n750:0\n"; err != nil || string(b) != want {
		t.Errorf("/check = %q, %v; want %q", b, err, want)
	}
	base, err := e.store.Root(context.Background(), baseImage)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(root.Layers), len(base.Layers)+4; got != want {
		t.Errorf("the image has %d layers, want the base's %d and 4 (three COPY, one RUN)", got, len(base.Layers))
	}
	made := e.backend.made.Load()
	again, log, err := e.build(t, df, t.TempDir(), nil)
	if err != nil || again.Image.Digest != res.Image.Digest || e.backend.made.Load() != made || again.Cached != again.Steps {
		t.Errorf("rebuild = %s, %v (%d sandboxes made, %d of %d steps cached); want %s from the cache\n%s",
			again.Image.Digest, err, e.backend.made.Load()-made, again.Cached, again.Steps, res.Image.Digest, log)
	}
	for _, bad := range []struct{ df, msg string }{
		{"FROM " + baseImage + " AS a\nFROM " + baseImage + "\nCOPY --from=a /no/such /x\n", "source /no/such: in a"},
		{"FROM " + baseImage + " AS a\nFROM " + baseImage + "\nCOPY --from=a /bin/* /x/\n", "wildcards"},
	} {
		if _, log, err := e.build(t, bad.df, t.TempDir(), nil); err == nil || !strings.Contains(err.Error(), bad.msg) {
			t.Errorf("Build(%q) = %v, want an error with %q\n%s", bad.df, err, bad.msg, log)
		}
	}
}

// TestBuildNetwork: a RUN step has no network unless the build gives one
// (Options.Network: the build policy's egress proxy); then it reaches the
// host's proxy socket and no further, and what it fetched is in its layer.
func TestBuildNetwork(t *testing.T) {
	e := newEnv(t)
	dir, err := os.MkdirTemp("", "airlock-build-net-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var seen atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Add(1)
		fmt.Fprintf(w, "proxy served %s\n", r.URL.Path)
	})}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = srv.Serve(ln) // returns once Close is called
	}()
	t.Cleanup(func() {
		srv.Close()
		<-served
	})

	df := "FROM " + baseImage + "\nRUN wget -q -O /fetched http://deps.test/pkg-1.0\n"
	var released atomic.Int64
	withProxy := build.Options{Network: func(ctx context.Context, spec *sandbox.Spec) (func(), error) {
		spec.Network, spec.ProxySocket = sandbox.NetworkProxy, sock
		return func() { released.Add(1) }, nil
	}}
	res, log, err := e.buildWith(t, withProxy, df, t.TempDir(), nil, "localhost/fetched:1")
	if err != nil {
		t.Fatalf("Build through the proxy = %v\n%s", err, log)
	}
	if seen.Load() != 1 || released.Load() != 1 {
		t.Errorf("the proxy saw %d requests, the network was released %d times; want 1, 1", seen.Load(), released.Load())
	}
	root, err := e.store.Root(context.Background(), res.Image.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root.Layers[len(root.Layers)-1], "fetched")); err != nil || string(b) != "proxy served /pkg-1.0\n" {
		t.Errorf("/fetched in the step's layer = %q, %v", b, err)
	}

	// Without a network the same step fails (and is not served from the
	// cache: the step that succeeded was the same instruction, so use
	// another).
	_, _, err = e.build(t, "FROM "+baseImage+"\nRUN wget -q -T 5 -O /fetched http://deps.test/pkg-2.0\n", t.TempDir(), nil)
	var re *build.RunError
	if !errors.As(err, &re) {
		t.Fatalf("Build without a network = %v, want a RunError", err)
	}
	if seen.Load() != 1 {
		t.Errorf("the proxy saw %d requests, want the first build's alone", seen.Load())
	}
}

// BenchmarkRebuildCached: a rebuild of the test app's Dockerfile with
// every step cached (the target is at most 1 s).
func BenchmarkRebuildCached(b *testing.B) {
	e := newEnv(b)
	dir := writeContext(b, map[string]string{"app.sh": "echo app\n", "lib/util.txt": "util\n"})
	if _, log, err := e.build(b, appDockerfile, dir, nil, "localhost/app:bench"); err != nil {
		b.Fatalf("Build = %v\n%s", err, log)
	}
	made := e.backend.made.Load()
	for b.Loop() {
		if _, log, err := e.build(b, appDockerfile, dir, nil, "localhost/app:bench"); err != nil {
			b.Fatalf("rebuild = %v\n%s", err, log)
		}
	}
	if e.backend.made.Load() != made {
		b.Fatal("a cached rebuild made a sandbox")
	}
}
