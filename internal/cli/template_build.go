package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// TemplateBuildCmd is `airlock template build -f Dockerfile [CONTEXT]`.
type TemplateBuildCmd struct {
	File     string   `short:"f" help:"The Dockerfile (default CONTEXT/Dockerfile)." placeholder:"PATH"`
	Context  string   `arg:"" optional:"" default:"." help:"The build context: the directory COPY and ADD read (default the current directory)." placeholder:"CONTEXT"`
	Tag      []string `short:"t" help:"Name the image NAME[:TAG] (repeatable)." placeholder:"NAME:TAG" sep:"none"`
	BuildArg []string `name:"build-arg" help:"Set the Dockerfile's ARG NAME to VALUE, or with NAME alone to its value in this environment (repeatable)." placeholder:"NAME[=VALUE]" sep:"none"`
	NoCache  bool     `name:"no-cache" help:"Run every step, ignoring the step cache (and then updating it)."`
	Quiet    bool     `short:"q" help:"Print only the image's digest, not the steps and their output."`
	JSON     bool     `name:"json" help:"Print the image as one JSON object (the steps go to stderr)."`
	// The build policy: RUN steps get no network unless it allows hosts,
	// reached only through airlock's egress proxy, which injects the
	// credentials it binds (never in the image).
	EgressFlags
}

// Run builds the image.
func (c *TemplateBuildCmd) Run(env *Env) error {
	args := map[string]string{}
	for _, a := range c.BuildArg {
		k, v, ok := strings.Cut(a, "=")
		if k == "" {
			return usageError{Err: fmt.Errorf("--build-arg %q: want NAME=VALUE or NAME", a)}
		}
		if !ok {
			// As docker: NAME alone takes airlock's environment's value,
			// and is not set when that has none.
			if v = env.Getenv(k); v == "" {
				continue
			}
		}
		args[k] = v
	}
	file := c.File
	if file == "" {
		file = filepath.Join(c.Context, "Dockerfile")
	}
	df, err := os.ReadFile(file)
	if err != nil {
		return usageError{Err: fmt.Errorf("dockerfile: %w", err)}
	}
	if fi, err := os.Stat(c.Context); err != nil || !fi.IsDir() {
		return usageError{Err: fmt.Errorf("build context %s: not a directory", c.Context)}
	}
	doc := policy.Default()
	if c.Policy != "" {
		if doc, err = readPolicyFile(c.Policy); err != nil {
			return usageError{Err: fmt.Errorf("--policy: %w", err)}
		}
	}
	netPolicy, err := c.network(doc)
	if err != nil {
		return usageError{Err: err}
	}
	h, err := host.New(hostConfig(env, hostOptions{keyFile: c.KeyFile}))
	if err != nil {
		return err
	}
	defer h.Close()
	log := env.Stdout
	if c.JSON {
		log = env.Stderr
	}
	if c.Quiet {
		log = nil
	}
	o := host.BuildOptions{Log: log, Limits: sandboxDefaults(doc).Limits}
	if t := time.Duration(doc.Sandbox.Limits.CommandTimeout); t > 0 {
		o.StepTimeout = t
	}
	if netPolicy != nil {
		o.Network = func(ctx context.Context, spec *sandbox.Spec) (func(), error) {
			spec.ID = sandbox.NewID()
			eg, err := startEgress(ctx, env, spec.ID, netPolicy, &c.EgressFlags)
			if err != nil {
				return nil, err
			}
			eg.Apply(spec)
			return func() { eg.close(env.Stderr) }, nil
		}
	}
	res, err := h.BuildImage(env.Ctx, o, host.BuildRequest{
		Dockerfile: df, Context: c.Context, BuildArgs: args, Tags: c.Tag, NoCache: c.NoCache,
	})
	var de *host.DockerfileError
	var re *host.BuildRunError
	switch {
	case errors.As(err, &re):
		return reportedError{Err: err, Code: 1}
	case errors.As(err, &de):
		return usageError{Err: err}
	case err != nil:
		return imageError(err)
	}
	switch {
	case c.JSON:
		return sandboxcli.WriteJSON(env.Stdout, res.Image)
	case c.Quiet:
		fmt.Fprintln(env.Stdout, res.Image.Digest)
		return nil
	}
	names := "(no name)"
	if len(res.Image.Names) > 0 {
		names = strings.Join(res.Image.Names, ", ")
	}
	fmt.Fprintf(env.Stdout, "built %s %s (%d layers, %d of %d steps cached)\n", names, res.Image.Digest, len(res.Image.Layers), res.Cached, res.Steps)
	return nil
}
