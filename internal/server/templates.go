package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// TemplateOf is v as the API answers it (without its document).
func TemplateOf(v store.TemplateVersion) api.Template {
	return api.Template{Name: v.Name, Version: v.Version, Hash: v.Hash, Image: v.Image, Created: v.CreatedAt.UTC(), Source: v.Source, By: v.By}
}

// ImageResolver resolves an image reference to the image by digest
// (image.Store.Resolve). An image it does not have is an error wrapping
// ErrNoImage.
type ImageResolver func(ctx context.Context, ref string) (string, error)

// ErrNoImage is wrapped by an ImageResolver's error of an image it lacks.
var ErrNoImage = errors.New("no such image")

// TemplateInputError is a template document that cannot be stored: it
// does not parse or validate, its image is not in the host's store, or its
// policy is not one of the tenant's stored policies. Its text is for the
// one who sent the document.
type TemplateInputError struct{ Err error }

func (e *TemplateInputError) Error() string { return e.Err.Error() }
func (e *TemplateInputError) Unwrap() error { return e.Err }

// PutTemplate stores doc, read from source, as the next version of the
// view's tenant's template name, by by: parsed and validated, its image
// resolved to a digest with resolve (nil refuses every image: the server
// has no image store), its policy checked to be one of the tenant's stored
// policies, and written in canonical form. Bad input is a
// *TemplateInputError.
func PutTemplate(ctx context.Context, view *store.TenantStore, resolve ImageResolver, name, source, by string, doc []byte) (api.Template, error) {
	if err := store.ValidateTemplateName(name); err != nil {
		return api.Template{}, &TemplateInputError{Err: fmt.Errorf("template name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
			clipText(name, 80), store.MaxPolicyNameLen)}
	}
	t, err := template.Parse(doc)
	if err != nil {
		return api.Template{}, &TemplateInputError{Err: err}
	}
	if resolve == nil {
		return api.Template{}, &TemplateInputError{Err: fmt.Errorf("image %s: this server keeps no images", t.Image)}
	}
	ref, err := resolve(ctx, t.Image)
	if errors.Is(err, ErrNoImage) {
		return api.Template{}, &TemplateInputError{Err: fmt.Errorf("image %s: not in the host's image store (airlock image pull or import it first)", t.Image)}
	}
	if err != nil {
		return api.Template{}, fmt.Errorf("resolve image %s: %w", t.Image, err)
	}
	if t.Policy != "" {
		_, err := view.GetPolicy(ctx, t.Policy, "")
		if errors.Is(err, store.ErrNotFound) {
			return api.Template{}, &TemplateInputError{Err: fmt.Errorf("policy %s: no such stored policy (airlock policy ls lists them)", t.Policy)}
		}
		if err != nil {
			return api.Template{}, fmt.Errorf("check policy %s: %w", t.Policy, err)
		}
	}
	t.Image = ref
	canon, err := template.Marshal(t)
	if err != nil {
		return api.Template{}, err
	}
	v, created, err := view.PutTemplate(ctx, store.TemplateVersion{Name: name, Image: ref, Document: canon, Source: source, By: by})
	if errors.Is(err, store.ErrInvalid) {
		return api.Template{}, &TemplateInputError{Err: err}
	}
	if err != nil {
		return api.Template{}, err
	}
	out := TemplateOf(v)
	out.New = &created
	return out, nil
}

// putTemplate stores a template document (the body, YAML) as the next
// version of the tenant's template {name}: 201 for a new version, 200 when
// the latest version had it already.
func (s *Server) putTemplate(w http.ResponseWriter, r *http.Request, c *call) error {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, store.MaxTemplateLen))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		return err
	case err != nil:
		return badRequest("the request body could not be read")
	case len(b) == 0:
		return badRequest("the body must be the template document (YAML)")
	}
	out, err := PutTemplate(r.Context(), c.view, s.o.ResolveImage, r.PathValue("name"), "api", c.p.KeyID, b)
	var in *TemplateInputError
	if errors.As(err, &in) {
		return badRequest("%s", clientText(in.Err))
	}
	if err != nil {
		return err
	}
	status := http.StatusOK
	if *out.New {
		status = http.StatusCreated
		c.log.Info("template stored", "template", out.Name, "version", out.Version, "image", out.Image)
	}
	writeJSON(w, status, out)
	return nil
}

func (s *Server) listTemplates(w http.ResponseWriter, r *http.Request, c *call) error {
	vs, err := c.view.ListTemplates(r.Context())
	if err != nil {
		return err
	}
	out := api.TemplateList{Templates: []api.Template{}}
	for _, v := range vs {
		out.Templates = append(out.Templates, TemplateOf(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) templateVersions(w http.ResponseWriter, r *http.Request, c *call) error {
	name := r.PathValue("name")
	if store.ValidateTemplateName(name) != nil {
		return errNoTemplate
	}
	vs, err := c.view.TemplateVersions(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return errNoTemplate
	}
	if err != nil {
		return err
	}
	out := api.TemplateVersionList{Versions: []api.Template{}}
	for _, v := range vs {
		out.Versions = append(out.Versions, TemplateOf(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// templateVersion answers one version of the tenant's template {name},
// with its document: {ref} is vN or "latest".
func (s *Server) templateVersion(w http.ResponseWriter, r *http.Request, c *call) error {
	name, ref := r.PathValue("name"), r.PathValue("ref")
	if store.ValidateTemplateName(name) != nil {
		return errNoTemplate
	}
	var version int64
	if ref != "latest" {
		n, ok := strings.CutPrefix(ref, "v")
		v, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil || v < 1 || n[0] == '+' {
			return badRequest("version %q: want vN or latest", clipText(ref, 80))
		}
		version = v
	}
	v, err := c.view.GetTemplate(r.Context(), name, version)
	if errors.Is(err, store.ErrNotFound) {
		return errNoTemplate
	}
	if err != nil {
		return err
	}
	out := TemplateOf(v)
	out.Document = string(v.Document)
	writeJSON(w, http.StatusOK, out)
	return nil
}

// deleteTemplate removes every version of the tenant's template {name}.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request, c *call) error {
	name := r.PathValue("name")
	if store.ValidateTemplateName(name) != nil {
		return errNoTemplate
	}
	n, err := c.view.DeleteTemplate(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return errNoTemplate
	}
	if err != nil {
		return err
	}
	c.log.Info("template removed", "template", name, "versions", n)
	writeJSON(w, http.StatusOK, api.TemplateDeleted{Name: name, Versions: n})
	return nil
}

// RunTemplate is the stored template a new run starts from, as NewRun
// writes it into the run.
type RunTemplate struct {
	// Run is what the run's configuration records of it: its name,
	// version, hash, start command and readiness check.
	Run engine.RunTemplate
	// Image is its image by digest (the version's); Env its environment;
	// Limits its limits, over its policy's.
	Image  string
	Env    []string
	Limits template.Limits
}

// write writes t's image and limits into doc, which it may change, and
// reports whether they changed it; a changed document is checked as a
// whole.
func (t *RunTemplate) write(doc *policy.Document) (*policy.Document, bool, error) {
	before := doc.Canonical()
	t.Limits.Apply(&doc.Sandbox.Limits)
	doc.Sandbox.Image = t.Image
	after := doc.Canonical()
	if bytes.Equal(after, before) {
		return doc, false, nil
	}
	changed, err := policy.Parse(after)
	if err != nil {
		return nil, false, badRequest("template %s v%d: its policy with its image and limits: %s", t.Run.Name, t.Run.Version, clientText(err))
	}
	return changed, true, nil
}

// splitTemplateRef reads NAME or NAME@vN (version 0: the latest).
func splitTemplateRef(arg string) (name string, version int64, err error) {
	name, ref, at := strings.Cut(arg, "@")
	if store.ValidateTemplateName(name) != nil {
		return "", 0, badRequest("template name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", clipText(name, 80), store.MaxPolicyNameLen)
	}
	if !at {
		return name, 0, nil
	}
	n, ok := strings.CutPrefix(ref, "v")
	v, perr := strconv.ParseInt(n, 10, 64)
	if !ok || perr != nil || v < 1 || n[0] == '+' {
		return "", 0, badRequest("template %q: after the @ give vN", clipText(arg, 100))
	}
	return name, v, nil
}

// templateRun resolves the stored template ref (NAME or NAME@vN) of the
// view's tenant that a new run starts from: its version, and the policy
// it names (the latest version of the tenant's stored policy; the
// built-in default when it names none), checked as any policy a tenant
// gives. A template with a working directory or user is refused, as the
// command line refuses it: the run's tools work in /workspace as the
// sandbox's user.
func (s *Server) templateRun(ctx context.Context, view *store.TenantStore, ref string) (RunPolicy, error) {
	name, version, err := splitTemplateRef(ref)
	if err != nil {
		return RunPolicy{}, err
	}
	v, err := view.GetTemplate(ctx, name, version)
	if errors.Is(err, store.ErrNotFound) {
		return RunPolicy{}, errNoTemplate
	}
	if err != nil {
		return RunPolicy{}, err
	}
	t, err := template.Parse(v.Document)
	if err != nil {
		return RunPolicy{}, badRequest("template %s v%d does not load: %s", v.Name, v.Version, clientText(err))
	}
	if t.Workdir != "" || t.User != "" {
		return RunPolicy{}, badRequest("template %s v%d: its workdir and user are for sandboxes (E2B, airlock sandbox); a run works in /workspace as the sandbox's user", v.Name, v.Version)
	}
	pol := RunPolicy{Parsed: policy.Default()}
	if t.Policy != "" {
		pol, err = s.resolvePolicy(ctx, view, t.Policy, "")
		if errors.Is(err, errNoPolicy) {
			return RunPolicy{}, badRequest("template %s v%d: its policy %s is not stored", v.Name, v.Version, t.Policy)
		}
		if err != nil {
			return RunPolicy{}, err
		}
	}
	pol.Template = &RunTemplate{
		Run:   engine.RunTemplate{Name: v.Name, Version: v.Version, Hash: v.Hash, Start: t.Start, Ready: t.Ready},
		Image: v.Image, Env: t.EnvList(), Limits: t.Limits,
	}
	return pol, nil
}
