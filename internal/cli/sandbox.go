package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// The exit-status errors of package sandboxcli, under the names the
// commands here use.
type (
	usageError    = sandboxcli.UsageError
	reportedError = sandboxcli.ReportedError
	exitCode      = sandboxcli.ExitCode
)

// DaemonCmd is `airlock sandbox daemon`: sandboxcli's, which also prepares
// the sandboxes of handed-off `sandbox run --template` (from the
// template's warm pool when it has one).
type DaemonCmd struct {
	sandboxcli.DaemonCmd
}

// Run serves until SIGINT or SIGTERM.
func (c *DaemonCmd) Run(env *Env) error { return c.DaemonCmd.Serve(&env.Env, host.PrepareHandoff) }

// RunCmd is `airlock sandbox run`: sandboxcli's, with a policy document
// and egress through airlock's proxy.
type RunCmd struct {
	sandboxcli.RunCmd
	EgressFlags
	ImageFlag
	TemplateFlag
}

// ImageFlag is --image of the sandbox commands.
type ImageFlag struct {
	Image string `help:"Make the sandbox's root this image of the host's store (airlock image ls) instead of the host's system directories (default: the policy's sandbox.image). Its config gives the environment, working directory and user, and, when no command is given, the command." placeholder:"REF"`
}

// apply makes spec's root the image the flag names, else doc's
// sandbox.image, if either does; it returns the image's root (zero when
// none).
func (f *ImageFlag) apply(env *Env, spec *sandbox.Spec, doc *policy.Document) (host.ImageRoot, error) {
	ref, from := f.Image, "--image"
	if ref == "" && doc != nil {
		ref, from = doc.Sandbox.Image, "sandbox.image"
	}
	if ref == "" {
		return host.ImageRoot{}, nil
	}
	if spec.RootFS != "" {
		return host.ImageRoot{}, usageError{Err: fmt.Errorf("%s and a root filesystem (--rootfs or sandbox.rootfs) exclude each other", from)}
	}
	root, err := imageRoot(env, ref)
	if err != nil {
		return root, fmt.Errorf("%s: %w", from, err)
	}
	root.Apply(spec)
	return root, nil
}

// Run creates a sandbox, runs the command, destroys the sandbox.
func (c *RunCmd) Run(env *Env) error {
	var spec sandbox.Spec
	var netPolicy *policy.Network
	var doc *policy.Document
	var root host.ImageRoot
	var prep *sandboxcli.Preparation
	if c.Template != "" {
		u, err := c.TemplateFlag.load(env, &c.EgressFlags, c.Image)
		if err != nil {
			return err
		}
		if spec, netPolicy, root, err = u.spec(env, &c.SpecFlags, &c.EgressFlags); err != nil {
			return err
		}
		doc = u.doc
		if prep, err = u.preparation(); err != nil {
			return err
		}
	} else {
		var err error
		if spec, netPolicy, doc, err = sandboxSpec(&c.SpecFlags, &c.EgressFlags); err != nil {
			return usageError{Err: err}
		}
		if root, err = c.ImageFlag.apply(env, &spec, doc); err != nil {
			return err
		}
	}
	if len(root.Layers) > 0 && (len(c.Command) == 0 || len(c.Command) == 1 && c.Command[0] == "--") {
		// No command: the image's own.
		argv, err := root.Command(nil)
		if err != nil {
			return usageError{Err: err}
		}
		c.Command = append([]string{"--"}, argv...)
	}
	var egress sandboxcli.Egress
	if netPolicy != nil {
		egress = func(ctx context.Context, spec *sandbox.Spec) (func(), error) {
			spec.ID = sandbox.NewID()
			eg, err := startEgress(ctx, env, spec.ID, netPolicy, &c.EgressFlags)
			if err != nil {
				return nil, err
			}
			eg.Apply(spec)
			return func() { eg.close(env.Stderr) }, nil
		}
	}
	return c.StartPrepared(&env.Env, spec, sandboxDefaults(doc), egress, prep)
}

// sandboxSpec turns sandbox and egress flags into a sandbox spec and the
// egress policy (nil when airlock runs no proxy), reporting every bad
// value. What the flags leave unset comes from --policy's document, else
// from the built-in default, which is returned too.
func sandboxSpec(f *sandboxcli.SpecFlags, e *EgressFlags) (sandbox.Spec, *policy.Network, *policy.Document, error) {
	doc := policy.Default()
	if e.Policy != "" {
		d, err := readPolicyFile(e.Policy)
		if err != nil {
			return sandbox.Spec{}, nil, nil, fmt.Errorf("--policy: %w", err)
		}
		doc = d
	}
	return specOf(f, e, doc, e.Policy != "")
}

// specOf is sandboxSpec of a policy document already read; stored says
// the document is a policy given (a file or a stored one), whose network
// section the sandbox's proxy enforces, not the built-in default.
func specOf(f *sandboxcli.SpecFlags, e *EgressFlags, doc *policy.Document, stored bool) (sandbox.Spec, *policy.Network, *policy.Document, error) {
	n, nerr := e.network(doc)
	if n == nil && nerr == nil && stored {
		n, nerr = &doc.Network, doc.Network.Validate()
	}
	egress := n != nil || stored || len(e.Allow) > 0 || len(e.Resolve) > 0
	s, serr := f.Spec(sandboxDefaults(doc), egress)
	return s, n, doc, errors.Join(nerr, serr)
}

// sandboxDefaults is the sandbox section of doc as sandboxcli takes it.
func sandboxDefaults(doc *policy.Document) sandboxcli.Defaults { return host.SandboxDefaults(doc) }
