package e2b

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/interp"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	envtemplate "github.com/airlockrun/airlock/internal/template"
)

// DefaultTemplate is the template E2B clients ask for by default; it is
// defaultDocument: airlock's strict default policy (no network at all)
// with every port exposed, as in E2B.
const DefaultTemplate = "base"

// defaultDocument is the policy of an E2B sandbox whose template names
// none: airlock's default (no network at all) with every port of the
// sandbox exposed, public, as E2B exposes them, so that getHost(port)
// works as E2B users expect. Public means what it says: a sandbox id is
// no secret (it is in every URL and log line), so anyone who can reach
// the data plane's address can reach the port. That is E2B's contract,
// the data plane listens where the operator puts it (loopback unless
// configured), and create's network.allowPublicTraffic: false makes
// every port need the sandbox's traffic access token. A tenant's
// stored policy says for itself which ports it exposes: none unless it
// has a ports section.
func defaultDocument() *policy.Document {
	d := policy.Default()
	d.Ports.Expose = []policy.PortRule{{Ports: policy.PortRange{First: 1, Last: 65535}, Access: policy.AccessPublic}}
	return d
}

// template is what a template name resolves to.
type template struct {
	name string
	doc  *policy.Document
	// raw is the stored document; nil for the default policy.
	raw []byte
	// source names the policy version (and the template version), for
	// the audit log and the sandbox's record.
	source string
	// env is the tenant's stored template (package template) the name
	// resolved to, nil for a policy or snapshot: its image (by digest),
	// environment, working directory, user, start command and readiness
	// check; doc is its policy's with its limits.
	env *envtemplate.Template
	// version is env's version.
	version int64
}

// errNoTemplate is a template name that is not one of the tenant's
// policies.
var errNoTemplate = errors.New("no such template")

// resolveTemplate maps a template name to what a sandbox is made of: the
// default template to policy.Default; any other name to the latest
// version of the tenant's stored template of that name (its policy, or
// the default, with its limits), else, for interp.Name, to the built-in
// code interpreter, else to the latest version of the tenant's stored
// policy of that name.
func (s *Server) resolveTemplate(ctx context.Context, tenant, name string) (template, error) {
	if name == "" || name == DefaultTemplate {
		return template{name: DefaultTemplate, doc: defaultDocument(), source: "default policy"}, nil
	}
	if store.ValidatePolicyName(name) != nil {
		return template{}, errNoTemplate
	}
	view := store.ForTenant(s.o.Store, tenant)
	tv, err := view.GetTemplate(ctx, name, 0)
	switch {
	case err == nil:
		return s.storedTemplate(ctx, view, tv)
	case !errors.Is(err, store.ErrNotFound):
		return template{}, fmt.Errorf("e2b: template %s: %w", name, err)
	}
	if name == interp.Name {
		// Built in, after the tenant's own of the name: the code
		// interpreter's server on the host's root, in the default
		// policy's sandbox.
		return template{name: name, doc: defaultDocument(), env: interp.Template(), source: "built-in template " + name + " (the host's root), default policy, every port public"}, nil
	}
	v, err := view.GetPolicy(ctx, name, "")
	switch {
	case errors.Is(err, store.ErrNotFound):
		return template{}, errNoTemplate
	case err != nil:
		return template{}, fmt.Errorf("e2b: template %s: %w", name, err)
	}
	doc, err := policy.Parse(v.Document)
	if err != nil {
		return template{}, &publicError{status: 400, msg: fmt.Sprintf("template %s: its policy (v%d) does not load", name, v.Version)}
	}
	if err := s.hostResources(name, doc); err != nil {
		return template{}, err
	}
	return template{name: name, doc: doc, raw: v.Document, source: fmt.Sprintf("policy %s v%d", name, v.Version)}, nil
}

// storedTemplate is what the tenant's stored template version tv makes a
// sandbox of: its document, and its policy's (the default when it names
// none) with its limits over the policy's.
func (s *Server) storedTemplate(ctx context.Context, view *store.TenantStore, tv store.TemplateVersion) (template, error) {
	t, err := envtemplate.Parse(tv.Document)
	if err != nil {
		return template{}, &publicError{status: 400, msg: fmt.Sprintf("template %s: its version %d does not load", tv.Name, tv.Version)}
	}
	if s.o.Images == nil {
		return template{}, &publicError{status: 400, msg: fmt.Sprintf("template %s: this server keeps no images to make its sandboxes of", tv.Name)}
	}
	tpl := template{name: tv.Name, doc: defaultDocument(), env: t, version: tv.Version}
	pol := "the default policy"
	if t.Policy != "" {
		v, err := view.GetPolicy(ctx, t.Policy, "")
		switch {
		case errors.Is(err, store.ErrNotFound):
			return template{}, &publicError{status: 400, msg: fmt.Sprintf("template %s: its policy %s is not stored", tv.Name, t.Policy)}
		case err != nil:
			return template{}, fmt.Errorf("e2b: template %s: policy %s: %w", tv.Name, t.Policy, err)
		}
		if tpl.doc, err = policy.Parse(v.Document); err != nil {
			return template{}, &publicError{status: 400, msg: fmt.Sprintf("template %s: its policy %s (v%d) does not load", tv.Name, t.Policy, v.Version)}
		}
		if err := s.hostResources(tv.Name, tpl.doc); err != nil {
			return template{}, err
		}
		tpl.raw = v.Document
		pol = fmt.Sprintf("policy %s v%d", v.Name, v.Version)
	}
	t.ApplySandbox(&tpl.doc.Sandbox)
	tpl.source = fmt.Sprintf("template %s v%d, image %s, %s", tv.Name, tv.Version, tv.Image, pol)
	return tpl, nil
}

// applyTemplate makes spec the sandbox of tpl's stored template, if it is
// one: its image's root, its environment, working directory and user.
func (s *Server) applyTemplate(ctx context.Context, tpl template, spec *sandbox.Spec) error {
	t := tpl.env
	if t == nil {
		return nil
	}
	spec.Env = append(spec.Env, t.EnvList()...)
	spec.Dir, spec.User = t.Workdir, t.User
	if t.Image == "" {
		return nil // a built-in template: the host's root
	}
	if err := s.o.Images.Apply(ctx, t.Image, spec); err != nil {
		return fmt.Errorf("e2b: template %s v%d: image %s: %w", tpl.name, tpl.version, t.Image, err)
	}
	return nil
}

// hostResources refuses template name's policy doc if it names host
// resources and the server does not trust tenants' policies with them.
func (s *Server) hostResources(name string, doc *policy.Document) error {
	if s.o.TrustTenantPolicies {
		return nil
	}
	// Why: a tenant's policy that names host directories, a root
	// filesystem, pinned addresses, CIDR rules or the host's secrets
	// would reach the host's own resources.
	if bad := doc.HostResources(); len(bad) > 0 {
		return &publicError{status: 403, msg: fmt.Sprintf("template %s: %s name host resources, which this server does not let tenants use", name, strings.Join(bad, ", "))}
	}
	return nil
}

// specOf is the sandbox a policy document describes, without its network
// (Options.Network attaches that).
func specOf(doc *policy.Document) sandbox.Spec {
	sb := doc.Sandbox
	// E2B's sandbox is a whole writable machine whose user has sudo:
	// both unless the template's policy says otherwise. On gVisor a
	// writable root is its in-memory overlay of every mount, which the
	// egress socket's cannot be part of: the root stays read-only there
	// unless the policy asks for it.
	writable := sb.Root == policy.RootWritable || sb.Root == "" && sb.Runtime != policy.RuntimeGVisor
	s := sandbox.Spec{RootFS: sb.RootFS, Runtime: sb.Runtime, WritableRoot: writable, Sudo: sb.Sudo == nil || *sb.Sudo}
	if sb.Workspace.Source != "" {
		s.Workspace, s.WorkspaceMode = sb.Workspace.Source, sb.Workspace.Mode
	}
	for _, m := range sb.Mounts {
		s.Mounts = append(s.Mounts, sandbox.Mount{Source: m.Source, Target: m.Target, ReadOnly: m.Mode != policy.MountRW})
	}
	s.Limits = sandbox.Limits{
		MemoryBytes: int64(sb.Limits.Memory), DiskBytes: int64(sb.Limits.Disk), Pids: sb.Limits.Pids,
		CPUs: sb.Limits.CPUs, RequireHard: sb.RequireHardLimits,
	}
	s.TTL = time.Duration(sb.Limits.TTL)
	return s
}

// specOf is specOf for this server's backend: one whose sandboxes keep
// their image's root read-only (Options.ReadOnlyRoot: a pod's) gives E2B's
// default, a writable root, only to a policy that asks for it (which that
// backend then refuses, saying why).
func (s *Server) specOf(doc *policy.Document) sandbox.Spec {
	spec := specOf(doc)
	if s.o.ReadOnlyRoot && doc.Sandbox.Root == "" {
		spec.WritableRoot = false
	}
	return spec
}

// needsNetwork reports whether doc lets a sandbox reach anything: only
// then does it get an egress proxy; otherwise it has no route at all.
func needsNetwork(doc *policy.Document) bool {
	n := doc.Network
	return len(n.Allow) > 0 || len(n.Credentials) > 0 || n.Default == policy.Ask || n.Default == policy.Allow || doc.LLM.Enabled
}
