package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/interp"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// The tenants' environment templates on this host, as its command line
// manages and uses them.

// RunTemplate is what a run's sandboxes take of the stored template they
// start from (engine.Config.Template).
type RunTemplate = engine.RunTemplate

// MergeEnv returns base with over applied, as an image's environment and
// a sandbox's are merged (image.MergeEnv).
func MergeEnv(base, over []string) []string { return image.MergeEnv(base, over) }

// ValidTemplateName checks a template's name as ValidPolicyName does a
// policy's.
func ValidTemplateName(name string) error { return store.ValidateTemplateName(name) }

// TemplateNotFoundError reports a template, or a version of one, that does
// not exist.
type TemplateNotFoundError struct {
	Name    string
	Version int64
}

func (e *TemplateNotFoundError) Error() string {
	if e.Version == 0 {
		return fmt.Sprintf("no template %q (airlock template ls lists them)", e.Name)
	}
	return fmt.Sprintf("template %s has no version %d (airlock template show %s --versions lists them)", e.Name, e.Version, e.Name)
}

// ResolveImage is the host's server.ImageResolver: ref by digest, from the
// host's image store.
func (h *Host) ResolveImage(ctx context.Context, ref string) (string, error) {
	s, err := h.Images()
	if err != nil {
		return "", err
	}
	d, err := s.Resolve(ctx, ref)
	if errors.Is(err, image.ErrNotFound) {
		return "", fmt.Errorf("%w: %w", server.ErrNoImage, err)
	}
	return d, err
}

// PutTemplate stores doc, read from source, as the next version of
// tenant's template name, by by (server.PutTemplate), unless the latest
// version is it already (then out.New is false). Bad input is an
// InputError.
func (h *Host) PutTemplate(ctx context.Context, tenant, name, source, by string, doc []byte) (api.Template, error) {
	rs, err := h.run()
	if err != nil {
		return api.Template{}, err
	}
	out, err := server.PutTemplate(ctx, store.ForTenant(rs.store, tenant), h.ResolveImage, name, source, by, doc)
	var in *server.TemplateInputError
	if errors.As(err, &in) {
		return out, &InputError{Err: in.Err}
	}
	return out, err
}

// Templates lists tenant's templates at their latest versions.
func (h *Host) Templates(ctx context.Context, tenant string) ([]api.Template, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	vs, err := rs.store.ListTemplates(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return templatesOf(vs), nil
}

// TemplateVersions lists the versions of tenant's template name, newest
// first; a TemplateNotFoundError when there is none.
func (h *Host) TemplateVersions(ctx context.Context, tenant, name string) ([]api.Template, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	vs, err := rs.store.TemplateVersions(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &TemplateNotFoundError{Name: name}
	}
	if err != nil {
		return nil, err
	}
	return templatesOf(vs), nil
}

func templatesOf(vs []store.TemplateVersion) []api.Template {
	out := make([]api.Template, len(vs))
	for i, v := range vs {
		out[i] = server.TemplateOf(v)
	}
	return out
}

// Template reads version of tenant's template name (0: the latest), with
// its document; a TemplateNotFoundError when there is none.
func (h *Host) Template(ctx context.Context, tenant, name string, version int64) (api.Template, error) {
	rs, err := h.run()
	if err != nil {
		return api.Template{}, err
	}
	v, err := rs.store.GetTemplate(ctx, tenant, name, version)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.Template{}, &TemplateNotFoundError{Name: name, Version: version}
	case errors.Is(err, store.ErrInvalid):
		return api.Template{}, &InputError{Err: err}
	case err != nil:
		return api.Template{}, err
	}
	out := server.TemplateOf(v)
	out.Document = string(v.Document)
	return out, nil
}

// DeleteTemplate removes every version of tenant's template name and
// returns how many there were; a TemplateNotFoundError when there is none.
func (h *Host) DeleteTemplate(ctx context.Context, tenant, name string) (int64, error) {
	rs, err := h.run()
	if err != nil {
		return 0, err
	}
	n, err := rs.store.DeleteTemplate(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, &TemplateNotFoundError{Name: name}
	}
	return n, err
}

// LoadTemplate reads a stored template version's document (api.Template
// with its Document) as a template.
func LoadTemplate(v api.Template) (*template.Template, error) {
	t, err := template.Parse([]byte(v.Document))
	if err != nil {
		return nil, fmt.Errorf("template %s v%d does not load: %w", v.Name, v.Version, err)
	}
	return t, nil
}

// BuiltinTemplate returns the template built into airlock by name, if
// name is one: interp.Name, the code interpreter (no image: the host's
// root). A stored template of the name is looked up first by callers.
func BuiltinTemplate(name string) (*template.Template, bool) {
	if name == interp.Name {
		return interp.Template(), true
	}
	return nil, false
}

// HandoffPrepare is what a handed-off `airlock sandbox run --template`
// asks its sandbox host to do before the command (handoff.Prepare.How):
// the template's start command and readiness check.
type HandoffPrepare struct {
	Start template.Command `json:"start,omitempty"`
	Ready *template.Ready  `json:"ready,omitempty"`
}

// TemplateHandoff is the preparation a handed-off run of version v of
// this host's stored template t asks of its sandbox host: t's start
// command and readiness check, and the pool of t's prepared sandboxes
// (this host's tenant's template at this version) with t.Pool of them.
func TemplateHandoff(t *template.Template, v api.Template) (*handoff.Prepare, error) {
	how, err := json.Marshal(HandoffPrepare{Start: t.Start, Ready: t.Ready})
	if err != nil {
		return nil, fmt.Errorf("template %s v%d: %w", v.Name, v.Version, err)
	}
	pool := fmt.Sprintf("%s/%s@v%d %s", event.LocalTenant, v.Name, v.Version, v.Hash)
	return &handoff.Prepare{How: how, Pool: pool, Size: t.Pool}, nil
}

// PrepareHandoff brings sb to readiness as how (a HandoffPrepare) says:
// handoff.Server.Prepare of airlock sandbox daemon and airlock serve. The
// caller is this host's own user (the socket's peer check), and what it
// runs runs in the sandbox only.
func PrepareHandoff(ctx context.Context, sb sandbox.Sandbox, how json.RawMessage) error {
	var p HandoffPrepare
	if err := json.Unmarshal(how, &p); err != nil {
		return fmt.Errorf("a template's preparation: %w", err)
	}
	t := &template.Template{Image: "-", Start: p.Start, Ready: p.Ready}
	if err := t.Validate(); err != nil {
		return fmt.Errorf("a template's preparation: %w", err)
	}
	return template.Prepare(ctx, sb, t)
}
