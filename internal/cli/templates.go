package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/template"
)

// TemplateCmd is `airlock template`: the tenant's environment templates,
// kept in the run store with every version (this host's, or the server's
// at AIRLOCK_URL).
//
// Subcommands that live in files of their own (template build) are
// fields of TemplateMore, which kong embeds here: adding one is adding a
// field there, nothing in this file.
type TemplateCmd struct {
	Create       TemplateCreateCmd `cmd:"" help:"Store a template (a YAML file, flags, or both: flags win) as the next version of NAME; its image is resolved to its digest now."`
	Ls           TemplateLsCmd     `cmd:"" help:"List the templates, each at its latest version."`
	Show         TemplateShowCmd   `cmd:"" help:"Print a template's stored document (NAME: the latest version, NAME@vN: version N), or its versions."`
	Rm           TemplateRmCmd     `cmd:"" help:"Remove a template, every version of it."`
	TemplateMore `embed:""`
}

// templateNameError is the usage error of a malformed template name.
func templateNameError(name string) error {
	return usageError{Err: fmt.Errorf("template name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
		name, host.MaxPolicyNameLen)}
}

// TemplateCreateCmd is `airlock template create NAME [-f FILE] [flags]`.
type TemplateCreateCmd struct {
	Name    string            `arg:"" help:"Template name: 1 to 64 of a-z, 0-9, '.', '_' and '-', starting with a letter or digit." placeholder:"NAME"`
	File    string            `short:"f" name:"file" help:"Template document (YAML): image, start, ready, env, workdir, user, limits, policy, pool (docs/images.md)." placeholder:"FILE"`
	Image   string            `help:"The image its sandboxes' root is made of (airlock image ls)." placeholder:"REF"`
	Start   string            `help:"Command (run by /bin/sh -c) started in the background in each sandbox, for its life." placeholder:"CMD"`
	Ready   string            `help:"Readiness check (run by /bin/sh -c) run until it exits 0 before a sandbox is handed over." placeholder:"CMD"`
	Timeout time.Duration     `name:"ready-timeout" help:"How long the readiness check may take to pass (default 30s)." placeholder:"DURATION"`
	Env     map[string]string `help:"Environment variable of its commands (repeatable)." placeholder:"KEY=VALUE"`
	Workdir string            `help:"Working directory of its commands (absolute)." placeholder:"DIR"`
	User    string            `help:"User of its commands (a name of the image or a uid)." placeholder:"USER"`
	Memory  string            `help:"Default memory limit, like 512M." placeholder:"SIZE"`
	CPUs    float64           `name:"cpus" help:"Default CPU limit." placeholder:"N"`
	Pids    int64             `help:"Default process limit." placeholder:"N"`
	Policy  string            `help:"Stored policy its sandboxes are held to (airlock policy ls)." placeholder:"NAME"`
	Pool    *int              `help:"Sandboxes to keep ready for the E2B API (0 to 32)." placeholder:"N"`
	JSON    bool              `name:"json" help:"Print the version as one JSON object: name, version, hash, image, created, source, by, new."`
}

// document is the template the file and flags make, as YAML.
func (c *TemplateCreateCmd) document() ([]byte, string, error) {
	t := &template.Template{}
	source := "flags"
	if c.File != "" {
		b, err := os.ReadFile(c.File)
		if err != nil {
			return nil, "", err
		}
		if t, err = template.Decode(b); err != nil {
			return nil, "", fmt.Errorf("%s: %w", c.File, err)
		}
		source = c.File
	}
	set := func(dst *string, v string) {
		if v != "" {
			*dst = v
		}
	}
	set(&t.Image, c.Image)
	set(&t.Workdir, c.Workdir)
	set(&t.User, c.User)
	set(&t.Policy, c.Policy)
	if c.Start != "" {
		t.Start = template.Command{"/bin/sh", "-c", c.Start}
	}
	if c.Ready != "" {
		if t.Ready == nil {
			t.Ready = &template.Ready{Timeout: policy.Duration(template.DefaultReadyTimeout)}
		}
		t.Ready.Command = template.Command{"/bin/sh", "-c", c.Ready}
	}
	if c.Timeout != 0 {
		if t.Ready == nil {
			return nil, "", errors.New("--ready-timeout needs a readiness check (--ready or the file's ready)")
		}
		t.Ready.Timeout = policy.Duration(c.Timeout)
	}
	for k, v := range c.Env {
		if t.Env == nil {
			t.Env = map[string]string{}
		}
		t.Env[k] = v
	}
	if c.Memory != "" {
		m, err := policy.ParseSize(c.Memory)
		if err != nil {
			return nil, "", fmt.Errorf("--memory: %w", err)
		}
		t.Limits.Memory = m
	}
	if c.CPUs != 0 {
		t.Limits.CPUs = c.CPUs
	}
	if c.Pids != 0 {
		t.Limits.Pids = c.Pids
	}
	if c.Pool != nil {
		t.Pool = *c.Pool
	}
	if err := t.Validate(); err != nil {
		return nil, "", fmt.Errorf("template: %w", err)
	}
	b, err := template.Marshal(t)
	return b, source, err
}

// Run stores the template and prints "NAME vN IMAGE (new)" or
// "(unchanged)".
func (c *TemplateCreateCmd) Run(env *Env) error {
	if host.ValidTemplateName(c.Name) != nil {
		return templateNameError(c.Name)
	}
	doc, source, err := c.document()
	if err != nil {
		return usageError{Err: err}
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	v, err := b.putTemplate(env.Ctx, c.Name, source, doc)
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, v)
	}
	what := "new"
	if v.New == nil || !*v.New {
		what = "unchanged"
	}
	fmt.Fprintf(env.Stdout, "%s v%d %s (%s)\n", v.Name, v.Version, v.Image, what)
	return nil
}

// writeTemplates prints versions as JSON lines or as a table.
func writeTemplates(w io.Writer, vs []api.Template, asJSON bool) error {
	if asJSON {
		return sandboxcli.WriteJSON(w, vs...)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tVERSION\tIMAGE\tCREATED\tSOURCE\tBY")
	for _, v := range vs {
		fmt.Fprintf(tw, "%s\tv%d\t%s\t%s\t%s\t%s\n", v.Name, v.Version, v.Image, v.Created.Local().Format("2006-01-02 15:04:05"),
			orDash(clip(oneLine(v.Source), 50)), orDash(v.By))
	}
	return tw.Flush()
}

// TemplateLsCmd is `airlock template ls`.
type TemplateLsCmd struct {
	JSON bool `name:"json" help:"One JSON object per template, at its latest version: name, version, hash, image, created, source, by."`
}

// Run lists the templates by name.
func (c *TemplateLsCmd) Run(env *Env) error {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	vs, err := b.templates(env.Ctx)
	if err != nil {
		return err
	}
	return writeTemplates(env.Stdout, vs, c.JSON)
}

// TemplateShowCmd is `airlock template show NAME[@vN]`. (A version is
// not a --version flag: that is the command line's own.)
type TemplateShowCmd struct {
	Ref      string `arg:"" name:"template" help:"NAME (the latest version) or NAME@vN." placeholder:"NAME[@vN]"`
	Versions bool   `help:"List the template's versions, newest first, instead of a document."`
	JSON     bool   `name:"json" help:"One JSON object: the version with its document (with --versions: one per version, without)."`
}

// Run prints the stored document, or the versions.
func (c *TemplateShowCmd) Run(env *Env) error {
	name, version, err := templateRef(c.Ref)
	if err != nil {
		return err
	}
	if c.Versions && version != 0 {
		return usageError{Err: errors.New("--versions lists every version: give NAME, not NAME@vN")}
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	if c.Versions {
		vs, err := b.templateVersions(env.Ctx, name)
		if err != nil {
			return err
		}
		return writeTemplates(env.Stdout, vs, c.JSON)
	}
	v, err := b.template(env.Ctx, name, version)
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, v)
	}
	fmt.Fprintf(env.Stdout, "# template %s v%d, %s\n", v.Name, v.Version, v.Hash)
	_, err = io.WriteString(env.Stdout, v.Document)
	return err
}

// TemplateRmCmd is `airlock template rm NAME`.
type TemplateRmCmd struct {
	Name string `arg:"" help:"Template name." placeholder:"NAME"`
	JSON bool   `name:"json" help:"One JSON object: name, versions (how many were removed)."`
}

// Run removes the template and says how many versions it had.
func (c *TemplateRmCmd) Run(env *Env) error {
	if host.ValidTemplateName(c.Name) != nil {
		return templateNameError(c.Name)
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	n, err := b.deleteTemplate(env.Ctx, c.Name)
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, api.TemplateDeleted{Name: c.Name, Versions: n})
	}
	versions := "versions"
	if n == 1 {
		versions = "version"
	}
	fmt.Fprintf(env.Stdout, "removed %s (%d %s)\n", c.Name, n, versions)
	return nil
}

// The backends' templates: this host's store (the local tenant's), or
// the server's (the API key's tenant's). A template that does not exist
// is a usage error.

func notFoundUsage(err error) error {
	var nf *host.TemplateNotFoundError
	if errors.As(err, &nf) {
		return usageError{Err: nf}
	}
	return err
}

func (b *localBackend) putTemplate(ctx context.Context, name, source string, doc []byte) (api.Template, error) {
	return do(b, func(h *host.Host) (api.Template, error) {
		return h.PutTemplate(ctx, event.LocalTenant, name, source, whoami(b.env), doc)
	})
}

func (b *localBackend) templates(ctx context.Context) ([]api.Template, error) {
	return do(b, func(h *host.Host) ([]api.Template, error) { return h.Templates(ctx, event.LocalTenant) })
}

func (b *localBackend) templateVersions(ctx context.Context, name string) ([]api.Template, error) {
	vs, err := do(b, func(h *host.Host) ([]api.Template, error) { return h.TemplateVersions(ctx, event.LocalTenant, name) })
	return vs, notFoundUsage(err)
}

func (b *localBackend) template(ctx context.Context, name string, version int64) (api.Template, error) {
	v, err := do(b, func(h *host.Host) (api.Template, error) { return h.Template(ctx, event.LocalTenant, name, version) })
	return v, notFoundUsage(err)
}

func (b *localBackend) deleteTemplate(ctx context.Context, name string) (int64, error) {
	n, err := do(b, func(h *host.Host) (int64, error) { return h.DeleteTemplate(ctx, event.LocalTenant, name) })
	return n, notFoundUsage(err)
}

// putTemplate uploads the document; the server resolves its image in its
// own image store and records the key's id as who stored it. The file
// name stays here: the server records "api" as the source.
func (b *remoteBackend) putTemplate(ctx context.Context, name, _ string, doc []byte) (api.Template, error) {
	v, err := b.c.PutTemplate(ctx, name, doc)
	if err != nil {
		return api.Template{}, b.fail(err)
	}
	return v, nil
}

func (b *remoteBackend) templates(ctx context.Context) ([]api.Template, error) {
	vs, err := b.c.Templates(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	return vs, nil
}

func (b *remoteBackend) templateVersions(ctx context.Context, name string) ([]api.Template, error) {
	vs, err := b.c.TemplateVersions(ctx, name)
	if client.IsCode(err, api.CodeNotFound) {
		return nil, usageError{Err: &host.TemplateNotFoundError{Name: name}}
	}
	if err != nil {
		return nil, b.fail(err)
	}
	return vs, nil
}

func (b *remoteBackend) template(ctx context.Context, name string, version int64) (api.Template, error) {
	v, err := b.c.Template(ctx, name, version)
	if client.IsCode(err, api.CodeNotFound) {
		return v, usageError{Err: &host.TemplateNotFoundError{Name: name, Version: version}}
	}
	if err != nil {
		return v, b.fail(err)
	}
	return v, nil
}

func (b *remoteBackend) deleteTemplate(ctx context.Context, name string) (int64, error) {
	n, err := b.c.DeleteTemplate(ctx, name)
	if client.IsCode(err, api.CodeNotFound) {
		return 0, usageError{Err: &host.TemplateNotFoundError{Name: name}}
	}
	if err != nil {
		return 0, b.fail(err)
	}
	return n, nil
}

// templateRef reads a --template argument: NAME (the latest version) or
// NAME@vN. A malformed one is a usage error.
func templateRef(arg string) (name string, version int64, err error) {
	name, v, at := strings.Cut(arg, "@")
	if host.ValidTemplateName(name) != nil {
		return "", 0, templateNameError(name)
	}
	if at {
		n, ok := strings.CutPrefix(v, "v")
		var perr error
		version, perr = strconv.ParseInt(n, 10, 64)
		if !ok || perr != nil || version < 1 || strings.HasPrefix(n, "+") {
			return "", 0, usageError{Err: fmt.Errorf("%q: after the @ give vN, like v2", arg)}
		}
	}
	return name, version, nil
}

// TemplateFlag is --template of the sandbox commands and run.
type TemplateFlag struct {
	Template string `help:"Start from this stored template (airlock template ls): NAME (its latest version) or NAME@vN; code-interpreter-v1 is built in (the code interpreter's server on port 49999, on the host's root). Its image, environment, working directory, user, limits and policy apply (flags win), and its start command and readiness check run before the command." placeholder:"NAME"`
}

// usedTemplate is a stored template version a sandbox or run starts from.
type usedTemplate struct {
	v api.Template // its name, version, hash and image by digest
	t *template.Template
	// doc is its policy's document (the built-in default when it names
	// none) with its limits; policyRef "NAME@vN" of that policy, or "".
	doc       *policy.Document
	policyRef string
}

// load reads the template f names, and its policy. --policy and --image
// exclude it (the template names both): usage errors, as a template or
// policy that does not exist is.
func (f *TemplateFlag) load(env *Env, e *EgressFlags, image string) (usedTemplate, error) {
	switch {
	case e != nil && e.Policy != "":
		return usedTemplate{}, usageError{Err: errors.New("--template and --policy exclude each other: the template names its policy")}
	case image != "":
		return usedTemplate{}, usageError{Err: errors.New("--template and --image exclude each other: the template names its image")}
	}
	name, version, err := templateRef(f.Template)
	if err != nil {
		return usedTemplate{}, fmt.Errorf("--template: %w", err)
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return usedTemplate{}, err
	}
	defer b.close()
	u := usedTemplate{doc: policy.Default()}
	u.v, err = b.template(env.Ctx, name, version)
	var nf *host.TemplateNotFoundError
	if errors.As(err, &nf) && version == 0 {
		// Built in, after a stored template of the name: the code
		// interpreter's server on the host's root (no image).
		if t, ok := host.BuiltinTemplate(name); ok {
			u.v, u.t = api.Template{Name: name}, t
			return u, nil
		}
	}
	if err != nil {
		return u, fmt.Errorf("--template: %w", err)
	}
	if u.t, err = host.LoadTemplate(u.v); err != nil {
		return u, err
	}
	if u.t.Policy != "" {
		pv, err := b.policy(env.Ctx, u.t.Policy)
		if err != nil {
			return u, fmt.Errorf("template %s v%d: policy %s: %w", u.v.Name, u.v.Version, u.t.Policy, err)
		}
		if u.doc, err = policy.Parse([]byte(pv.Document)); err != nil {
			return u, fmt.Errorf("template %s v%d: policy %s v%d does not load: %w", u.v.Name, u.v.Version, pv.Name, pv.Version, err)
		}
		u.policyRef = fmt.Sprintf("%s@v%d", pv.Name, pv.Version)
	}
	u.t.ApplySandbox(&u.doc.Sandbox)
	return u, nil
}

// preparation brings a sandbox of u to readiness: here, or by a sandbox
// host (airlock sandbox daemon, airlock serve) that keeps u.t.Pool of them
// ready, for a stored template. A built-in one (its files are not for the
// wire) is prepared here only.
func (u usedTemplate) preparation() (*sandboxcli.Preparation, error) {
	t := u.t
	p := &sandboxcli.Preparation{Run: func(ctx context.Context, sb sandbox.Sandbox) error { return template.Prepare(ctx, sb, t) }}
	if u.v.Version == 0 || len(t.Files) > 0 {
		return p, nil
	}
	h, err := host.TemplateHandoff(t, u.v)
	if err != nil {
		return nil, err
	}
	p.Handoff = h
	return p, nil
}

// spec is the sandbox of the template, the flags over it: its image's
// root (by the digest the version recorded), the image's environment
// under the template's under the flags', the template's working directory
// and user where no flag sets them, its policy's limits and egress.
func (u usedTemplate) spec(env *Env, f *sandboxcli.SpecFlags, e *EgressFlags) (sandbox.Spec, *policy.Network, host.ImageRoot, error) {
	spec, n, _, err := specOf(f, e, u.doc, u.policyRef != "")
	if err != nil {
		return spec, nil, host.ImageRoot{}, usageError{Err: err}
	}
	if spec.RootFS != "" {
		return spec, nil, host.ImageRoot{}, usageError{Err: errors.New("--template and a root filesystem (--rootfs or the policy's sandbox.rootfs) exclude each other")}
	}
	spec.Env = host.MergeEnv(u.t.EnvList(), spec.Env)
	if spec.Dir == "" {
		spec.Dir = u.t.Workdir
	}
	if spec.User == "" {
		spec.User = u.t.User
	}
	if u.v.Image == "" {
		return spec, n, host.ImageRoot{}, nil // a built-in template: the host's root
	}
	root, err := imageRoot(env, u.v.Image)
	if err != nil {
		return spec, nil, root, fmt.Errorf("template %s v%d: image %s: %w", u.v.Name, u.v.Version, u.v.Image, err)
	}
	root.Apply(&spec)
	return spec, n, root, nil
}

// useTemplate makes the run start from --template: its policy (the
// stored version it names, as --policy NAME@vN), its image by digest, its
// environment under --env's, its limits under the flags', and its start
// command and readiness check, with its name and version, for the engine
// to run in each sandbox and record.
func (c *AgentRunCmd) useTemplate(env *Env, q *host.RunRequest) error {
	f := TemplateFlag{Template: c.Template}
	u, err := f.load(env, &EgressFlags{Policy: c.Policy}, c.Image)
	if err != nil {
		return err
	}
	if u.v.Version == 0 {
		// The built-in code interpreter: an agent run has the run_code
		// tool, which starts the same server in its sandbox.
		return usageError{Err: fmt.Errorf("--template %s: built in for sandbox run and create and the E2B API; an agent run's run_code tool starts the code interpreter itself", c.Template)}
	}
	if u.t.Workdir != "" || u.t.User != "" {
		// The agent's tools work in /workspace as the sandbox's user;
		// saying nothing would run them elsewhere than the template says.
		return usageError{Err: fmt.Errorf("--template %s: its workdir and user are for sandbox run and create and the E2B API; an agent run works in /workspace as the sandbox's user", c.Template)}
	}
	c.Policy, c.Image = u.policyRef, u.v.Image
	c.Env = host.MergeEnv(u.t.EnvList(), c.Env)
	c.templateLimits = &u.t.Limits
	q.Template = &host.RunTemplate{Name: u.v.Name, Version: u.v.Version, Hash: u.v.Hash, Start: u.t.Start, Ready: u.t.Ready}
	return nil
}
