// Package build builds OCI images from a Dockerfile (the subset package
// dockerfile parses) into the host's image store: `airlock template build`.
//
// FROM resolves an image of the store (pulling one it lacks); each RUN runs
// in an airlock sandbox whose root is the image so far (the overlay of its
// layers), made writable (sandbox.Spec.WritableRoot), under the build's
// network (none unless Options.Network gives one: the build policy's egress
// proxy, which injects credentials on the host, so none enters the image);
// what the step changed in the root (a root checkpoint of its upper layer,
// sandbox.CheckpointRequest.Root) becomes the step's layer. COPY and ADD
// make layers of files of the build context, read through an os.Root
// confined to it. ENV, WORKDIR, USER, LABEL, CMD and ENTRYPOINT edit the
// config. The result is committed to the store (image.Store.Commit) under
// its tags: exported and pushed as any pulled image.
//
// Invariants:
//   - Layers are untrusted: a RUN step's are what its commands wrote, and
//     the store checks and unpacks them as a pulled layer's (AddLayer).
//   - Nothing outside the context is read for COPY/ADD: no "..", no
//     absolute source, no symlink that leads out (refused, naming it).
//   - Steps are cached by (the parent's key, the instruction after
//     substitution, the hash of the files a COPY/ADD takes): a rebuild
//     whose steps are all cached makes no sandbox.
//
// Importers: internal/host.
package build

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/airlockrun/airlock/internal/dockerfile"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Options configure a build.
type Options struct {
	// Store is where the base comes from and the result goes.
	Store *image.Store
	// Backend makes the sandboxes RUN steps run in.
	Backend sandbox.Backend
	// Network, if set, gives a RUN step's sandbox its network (the build
	// policy's egress proxy) by editing its spec; the returned function
	// is called once the sandbox is gone. Nil: no network.
	Network func(ctx context.Context, spec *sandbox.Spec) (release func(), err error)
	// Limits bound each RUN step's sandbox; zero fields take
	// sandbox.DefaultLimits'.
	Limits sandbox.Limits
	// StepTimeout bounds each RUN step; 0 means 30 minutes.
	StepTimeout time.Duration
	// Cache is the file of the step cache; "" keeps no cache.
	Cache string
	// Log gets each step as it starts and the RUN steps' output; nil
	// discards them.
	Log io.Writer
}

// Request is one build.
type Request struct {
	// Dockerfile is its text.
	Dockerfile []byte
	// Context is the build context directory COPY and ADD read.
	Context string
	// BuildArgs set ARGs (--build-arg NAME=VALUE).
	BuildArgs map[string]string
	// Tags name the result (NAME[:TAG]).
	Tags []string
	// NoCache runs every step, ignoring (and then updating) the cache.
	NoCache bool
}

// Result is a finished build.
type Result struct {
	Image image.Image
	// Steps and Cached count the steps that make layers (RUN, COPY, ADD)
	// and those of them the cache served.
	Steps, Cached int
}

// RunError is a RUN step that did not succeed.
type RunError struct {
	Line        int
	Instruction string
	Result      sandbox.Result
	// Tail is the end of its output (stdout and stderr, interleaved).
	Tail string
}

func (e *RunError) Error() string {
	how := fmt.Sprintf("exit status %d", e.Result.ExitCode)
	switch {
	case e.Result.Outcome == sandbox.OutcomeSignaled:
		how = fmt.Sprintf("killed by signal %d", e.Result.Signal)
	case e.Result.Outcome != sandbox.OutcomeExited:
		how = string(e.Result.Outcome)
		if e.Result.Message != "" {
			how += ": " + e.Result.Message
		}
	}
	msg := fmt.Sprintf("Dockerfile line %d: %s: %s", e.Line, e.Instruction, how)
	if e.Tail != "" {
		msg += "\noutput (last lines):\n" + e.Tail
	}
	return msg
}

// tailBytes is how much of a failed step's output its error keeps.
const tailBytes = 2048

// builder is one build in progress.
type builder struct {
	o     Options
	req   Request
	df    *dockerfile.File
	cache *cache
	log   io.Writer

	base      string            // the FROM image's digest; "" for scratch
	baseLayer []image.LayerInfo // its layers
	layers    []image.NewLayer  // the layers made so far
	cfg       image.Config      // the config so far
	args      map[string]string // ARGs declared so far, with their values
	key       string            // the cache key of the image so far
	cmdSet    bool              // CMD was given in this Dockerfile
	// wdPending is set when a WORKDIR came after the last RUN, which
	// would have made it: the build ends with a step that does.
	wdPending bool
	res       Result

	// global are the ARGs declared before the first FROM: FROM lines
	// expand them.
	global map[string]string
	// stages are the stages before the current one, in order.
	stages []stage
	name   string // the current stage's name ("" for none)
}

// stage is a finished stage of a multi-stage build: what a later FROM or
// COPY --from takes from it.
type stage struct {
	name      string
	base      string
	baseLayer []image.LayerInfo
	layers    []image.NewLayer
	cfg       image.Config
	key       string
}

// layerInfos are the stage's layers, lowest first.
func (s stage) layerInfos() []image.LayerInfo {
	all := slices.Clone(s.baseLayer)
	for _, l := range s.layers {
		all = append(all, l.Layer)
	}
	return all
}

// current is the stage being built, as a later stage would see it.
func (b *builder) current() stage {
	return stage{name: b.name, base: b.base, baseLayer: b.baseLayer, layers: slices.Clone(b.layers), cfg: b.cfg, key: b.key}
}

// Build builds req and stores the image.
func Build(ctx context.Context, o Options, req Request) (Result, error) {
	df, err := dockerfile.Parse(bytes.NewReader(req.Dockerfile))
	if err != nil {
		return Result{}, err
	}
	if o.Store == nil {
		return Result{}, errors.New("build: no image store")
	}
	b := &builder{o: o, req: req, df: df, log: o.Log, args: map[string]string{}}
	if b.log == nil {
		b.log = io.Discard
	}
	if b.cache, err = loadCache(o.Cache); err != nil {
		return Result{}, err
	}
	release, err := o.Store.Pin()
	if err != nil {
		return Result{}, err
	}
	defer release()
	n := len(df.Instructions)
	for i, in := range df.Instructions {
		if in.Cmd == "FROM" && i > 0 && b.global != nil {
			// The stage before ends here.
			if err := b.endStage(ctx, df.Instructions[i-1]); err != nil {
				return Result{}, err
			}
			b.stages = append(b.stages, b.current())
		}
		fmt.Fprintf(b.log, "step %d/%d: %s\n", i+1, n, in.String())
		if err := b.step(ctx, in); err != nil {
			return Result{}, stepError(in, err)
		}
	}
	if err := b.endStage(ctx, df.Instructions[n-1]); err != nil {
		return Result{}, err
	}
	if err := b.cache.save(); err != nil {
		fmt.Fprintf(b.log, "airlock: build cache not saved: %v\n", err)
	}
	img, err := o.Store.Commit(ctx, b.base, b.layers, b.cfg, req.Tags)
	if err != nil {
		return Result{}, err
	}
	b.res.Image = img
	return b.res, nil
}

// endStage ends the current stage at instruction last: a WORKDIR after the
// stage's last RUN is made, as docker's WORKDIR makes the directory at once
// (a sandbox of the image starts there). An image FROM scratch may have no
// mkdir: its Dockerfile makes the directory itself.
func (b *builder) endStage(ctx context.Context, last dockerfile.Instruction) error {
	if !b.wdPending || b.base == "" {
		return nil
	}
	in := dockerfile.Instruction{Line: last.Line, Cmd: "RUN", Exec: true, Argv: []string{"mkdir", "-p", b.cfg.WorkingDir}}
	fmt.Fprintf(b.log, "making the working directory %s\n", b.cfg.WorkingDir)
	if err := b.run(ctx, in); err != nil {
		return stepError(in, err)
	}
	return nil
}

// internal marks a step's error that is not the Dockerfile's or the
// context's fault (a sandbox or the store failed): it keeps its chain
// (image.ErrNotFound for a base the store lacks, say) instead of becoming
// a dockerfile.Error.
type internal struct{ err error }

func (e internal) Error() string { return e.err.Error() }
func (e internal) Unwrap() error { return e.err }

// stepError is err of step in as Build returns it: a RunError as it is,
// an internal error wrapped with the line, anything else (what the
// Dockerfile or the context got wrong) a dockerfile.Error.
func stepError(in dockerfile.Instruction, err error) error {
	var de *dockerfile.Error
	var re *RunError
	var ie internal
	switch {
	case errors.As(err, &de), errors.As(err, &re):
		return err
	case errors.As(err, &ie):
		return fmt.Errorf("step at Dockerfile line %d (%s): %w", in.Line, in.Cmd, ie.err)
	}
	return &dockerfile.Error{Line: in.Line, Msg: fmt.Sprintf("%s: %v", in.Cmd, err)}
}

// expander substitutes the ARGs and ENV so far (ENV wins).
func (b *builder) expander() dockerfile.Expander {
	env := map[string]string{}
	maps.Copy(env, b.args)
	for _, e := range b.cfg.Env {
		k, v, _ := strings.Cut(e, "=")
		env[k] = v
	}
	return dockerfile.Expander{Escape: b.df.Escape, Lookup: func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	}}
}

// chain returns the cache key of the image so far after a step that says s.
func chain(key, s string) string {
	h := sha256.Sum256([]byte(key + "\x00" + s))
	return hex.EncodeToString(h[:])
}

func (b *builder) step(ctx context.Context, in dockerfile.Instruction) error {
	x := b.expander()
	switch in.Cmd {
	case "ARG":
		pairs, err := x.Pairs("ARG", in.Args)
		if err != nil {
			return err
		}
		for _, p := range pairs {
			v, given := b.req.BuildArgs[p.Key]
			if !given {
				v = p.Value
			}
			// Not in the key: an ARG's value counts where it is used (the
			// instructions expanded, a RUN's environment), as in docker.
			b.args[p.Key] = v
		}
		return nil
	case "FROM":
		if b.global == nil {
			b.global = maps.Clone(b.args)
		}
		return b.from(ctx, dockerfile.Expander{Escape: b.df.Escape, Lookup: func(k string) (string, bool) {
			v, ok := b.global[k]
			return v, ok
		}}, in)
	case "ENV":
		pairs, err := x.Pairs("ENV", in.Args)
		if err != nil {
			return err
		}
		var env []string
		for _, p := range pairs {
			env = append(env, p.Key+"="+p.Value)
		}
		b.cfg.Env = image.MergeEnv(b.cfg.Env, env)
		b.key = chain(b.key, "ENV "+strings.Join(env, "\x00"))
		return nil
	case "LABEL":
		pairs, err := x.Pairs("LABEL", in.Args)
		if err != nil {
			return err
		}
		b.cfg.Labels = maps.Clone(b.cfg.Labels)
		if b.cfg.Labels == nil {
			b.cfg.Labels = map[string]string{}
		}
		for _, p := range pairs {
			b.cfg.Labels[p.Key] = p.Value
		}
		return nil
	case "WORKDIR":
		dir, err := x.Word(in.Args)
		if err != nil {
			return err
		}
		if !path.IsAbs(dir) {
			dir = path.Join("/", b.cfg.WorkingDir, dir)
		}
		b.cfg.WorkingDir = path.Clean(dir)
		b.key = chain(b.key, "WORKDIR "+b.cfg.WorkingDir)
		b.wdPending = b.cfg.WorkingDir != "/"
		return nil
	case "USER":
		u, err := x.Word(in.Args)
		if err != nil {
			return err
		}
		b.cfg.User = u
		b.key = chain(b.key, "USER "+u)
		return nil
	case "CMD", "ENTRYPOINT":
		argv := in.Argv
		if !in.Exec {
			argv = nil
			if in.Args != "" {
				argv = []string{"/bin/sh", "-c", in.Args}
			}
		}
		if in.Cmd == "CMD" {
			b.cfg.Cmd, b.cmdSet = argv, true
		} else {
			b.cfg.Entrypoint = argv
			if !b.cmdSet {
				b.cfg.Cmd = nil // as docker: an ENTRYPOINT drops the base's CMD
			}
		}
		return nil
	case "RUN":
		return b.run(ctx, in)
	case "COPY", "ADD":
		return b.copy(ctx, x, in)
	}
	return fmt.Errorf("instruction %s is not built", in.Cmd)
}

// from starts a stage: from an earlier stage it names, else from an
// image, pulled if the store lacks it.
func (b *builder) from(ctx context.Context, x dockerfile.Expander, in dockerfile.Instruction) error {
	word, name, err := in.Stage()
	if err != nil {
		return err
	}
	ref, err := x.Word(word)
	if err != nil {
		return err
	}
	if ref == "" {
		return errors.New("FROM names no image (an empty ARG?)")
	}
	// ARGs before FROM are for FROM alone; those after it are declared
	// anew in each stage, as is everything else.
	b.args = map[string]string{}
	b.name, b.layers, b.cmdSet, b.wdPending = name, nil, false, false
	if st, ok := b.stage(ref); ok {
		b.base, b.baseLayer, b.layers, b.cfg = st.base, st.baseLayer, slices.Clone(st.layers), st.cfg
		b.key = chain("", "FROM stage "+st.key)
		return nil
	}
	if ref == "scratch" {
		b.base, b.baseLayer, b.cfg = "", nil, image.Config{}
		b.key = chain("", "FROM scratch")
		return nil
	}
	img, err := b.image(ctx, "base image", ref)
	if err != nil {
		return err
	}
	b.base, b.baseLayer, b.cfg = img.Digest, img.Layers, img.Config
	b.cfg.Created = time.Time{}
	b.key = chain("", "FROM "+img.Digest)
	return nil
}

// stage finds an earlier stage by name (any case) or index.
func (b *builder) stage(ref string) (stage, bool) {
	if n, err := strconv.Atoi(ref); err == nil && n >= 0 && n < len(b.stages) {
		return b.stages[n], true
	}
	for _, st := range b.stages {
		if st.name != "" && st.name == strings.ToLower(ref) {
			return st, true
		}
	}
	return stage{}, false
}

// image returns the store's image ref (what it is for the build: its
// errors say), pulling it if the store lacks it.
func (b *builder) image(ctx context.Context, what, ref string) (image.Image, error) {
	img, err := b.o.Store.Inspect(ref)
	if errors.Is(err, image.ErrNotFound) {
		fmt.Fprintf(b.log, "pulling %s\n", ref)
		img, err = b.o.Store.Pull(ctx, ref, image.Auth{})
	}
	if err != nil {
		return image.Image{}, internal{fmt.Errorf("%s %s: %w", what, ref, err)}
	}
	return img, nil
}

// layerDirs are the directories of the image so far, lowest first.
func (b *builder) layerDirs(ctx context.Context) ([]string, error) {
	return b.o.Store.LayerDirs(ctx, b.current().layerInfos())
}

// cached looks key up; a hit whose layer the store no longer holds is a
// miss.
func (b *builder) cached(key string) (entry, bool) {
	if b.req.NoCache {
		return entry{}, false
	}
	e, ok := b.cache.get(key)
	if ok && e.Layer != nil && !b.o.Store.HasLayer(*e.Layer) {
		return entry{}, false
	}
	return e, ok
}

// addStep records a step's result (its layer, or none) under key.
func (b *builder) addStep(key, createdBy string, l *image.LayerInfo, hit bool) {
	b.res.Steps++
	if hit {
		b.res.Cached++
	}
	if l != nil {
		b.layers = append(b.layers, image.NewLayer{Layer: *l, CreatedBy: createdBy})
	}
	b.cache.put(key, entry{Layer: l})
	b.key = key
}

// run carries out a RUN step in a sandbox on the image so far.
func (b *builder) run(ctx context.Context, in dockerfile.Instruction) error {
	argv := in.Argv
	if !in.Exec {
		argv = []string{"/bin/sh", "-c", in.Args}
	}
	// The build args take part in a RUN as its environment: in its key too.
	key := chain(b.key, in.String()+"\x00"+strings.Join(b.argEnv(), "\x00"))
	if e, ok := b.cached(key); ok {
		fmt.Fprintln(b.log, " cached")
		b.addStep(key, in.String(), e.Layer, true)
		b.wdPending = false
		return nil
	}
	if len(b.baseLayer)+len(b.layers) == 0 {
		return errors.New("RUN on an empty image (FROM scratch with no files): nothing to run")
	}
	l, err := b.runSandbox(ctx, in, argv)
	var re *RunError
	if err != nil && !errors.As(err, &re) {
		return internal{err}
	}
	if err != nil {
		return err
	}
	b.addStep(key, in.String(), l, false)
	b.wdPending = false
	return nil
}

// argEnv are the ARGs the image's environment does not set, as a RUN
// step's extra environment (not kept in the image).
func (b *builder) argEnv() []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(b.args)) {
		if !slices.ContainsFunc(b.cfg.Env, func(e string) bool { return strings.HasPrefix(e, k+"=") }) {
			out = append(out, k+"="+b.args[k])
		}
	}
	return out
}

func (b *builder) runSandbox(ctx context.Context, in dockerfile.Instruction, argv []string) (*image.LayerInfo, error) {
	dirs, err := b.layerDirs(ctx)
	if err != nil {
		return nil, err
	}
	spec := sandbox.Spec{WritableRoot: true, RootCaps: sandbox.BuildCaps, Limits: b.limits()}
	image.Root{Layers: dirs, Config: b.cfg}.Apply(&spec)
	// A step with no USER runs as root, as docker's do (not as airlock's
	// sandbox user): the image's root-owned files are its to change. The
	// step's USER is given with its command.
	spec.User = "root"
	if b.o.Network != nil {
		release, err := b.o.Network(ctx, &spec)
		if err != nil {
			return nil, fmt.Errorf("network: %w", err)
		}
		defer release()
	}
	sb, err := b.o.Backend.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("create the step's sandbox: %w", err)
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sb.Destroy(dctx)
	}()
	cp, ok := sb.(sandbox.Checkpointer)
	if !ok {
		return nil, errors.New("the sandbox backend cannot checkpoint a root: it cannot build images")
	}
	mark, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{Root: true, MarkOnly: true}, nil)
	if err != nil {
		return nil, fmt.Errorf("mark the root: %w", err)
	}
	dir := b.cfg.WorkingDir
	if dir == "" {
		dir = "/"
	}
	if _, err := sb.Stat(ctx, dir); err != nil {
		// As docker's WORKDIR: the directory exists for the step (and, made
		// now, is in its layer), made by the image's root.
		var out bytes.Buffer
		res, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"mkdir", "-p", dir}, User: "root", Dir: "/", Stdout: &out, Stderr: &out, Timeout: time.Minute})
		if err == nil && (res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0) {
			err = fmt.Errorf("mkdir -p: exit status %d: %s", res.ExitCode, strings.TrimSpace(out.String()))
		}
		if err != nil {
			return nil, fmt.Errorf("working directory %s: %w", dir, err)
		}
	}
	user, _, _ := strings.Cut(b.cfg.User, ":")
	out := &tail{max: tailBytes, w: b.log}
	timeout := b.o.StepTimeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	res, err := sandbox.Run(ctx, sb, sandbox.Command{
		Argv: argv, Env: b.argEnv(), Dir: dir, User: user,
		Stdout: out, Stderr: out, Timeout: timeout,
	})
	if err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}
	if res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0 {
		return nil, &RunError{Line: in.Line, Instruction: in.String(), Result: res, Tail: out.String()}
	}
	return b.commitRoot(ctx, cp, mark.Baseline)
}

// commitRoot streams the root's changes since baseline into the store as
// a layer; nil when the step changed nothing.
func (b *builder) commitRoot(ctx context.Context, cp sandbox.Checkpointer, baseline string) (*image.LayerInfo, error) {
	pr, pw := io.Pipe()
	var res sandbox.CheckpointResult
	var info image.LayerInfo
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error {
		var err error
		res, err = cp.Checkpoint(gctx, sandbox.CheckpointRequest{Root: true, Since: baseline}, pw)
		pw.CloseWithError(err)
		if err != nil {
			return fmt.Errorf("read the step's changes: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		var err error
		info, err = b.o.Store.AddLayer(gctx, pr)
		pr.CloseWithError(err)
		if err != nil {
			return fmt.Errorf("store the step's layer: %w", err)
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return nil, err
	}
	if res.Entries == 0 {
		return nil, nil
	}
	return &info, nil
}

func (b *builder) limits() sandbox.Limits {
	l := b.o.Limits
	d := sandbox.DefaultLimits
	if l.MemoryBytes == 0 {
		l.MemoryBytes = d.MemoryBytes
	}
	if l.Pids == 0 {
		l.Pids = d.Pids
	}
	if l.CPUs == 0 {
		l.CPUs = d.CPUs
	}
	if l.DiskBytes == 0 {
		l.DiskBytes = d.DiskBytes
	}
	return l
}

// tail passes writes to w and keeps the last max bytes. A sandbox
// writes stdout and stderr from its own goroutines.
type tail struct {
	mu  sync.Mutex
	max int
	w   io.Writer
	buf []byte // guarded by mu
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	_, _ = t.w.Write(p)
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimRight(string(t.buf), "\n")
}
