package server_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/server"
)

// imageStore is an image store holding one small image, tagged
// localhost/tiny:1, and its resolver as the host wires it.
func imageStore(t *testing.T) server.ImageResolver {
	t.Helper()
	dir := t.TempDir()
	s, err := image.Open(filepath.Join(dir, "images"), image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img := imagetest.Image(t, "", v1.Config{Env: []string{"PATH=/bin"}}, imagetest.Layer(t, imagetest.File{Name: "hello", Mode: 0o644, Body: []byte("hi\n")}))
	if _, err := s.Import(context.Background(), imagetest.DockerArchive(t, dir, img, "localhost/tiny:1"), nil); err != nil {
		t.Fatal(err)
	}
	return func(ctx context.Context, ref string) (string, error) {
		d, err := s.Resolve(ctx, ref)
		if errors.Is(err, image.ErrNotFound) {
			return "", server.ErrNoImage
		}
		return d, err
	}
}

// TestTemplates: a create resolves the image to its digest and checks the
// policy, stores a canonical version (again: unchanged), reads list it;
// another tenant sees none of it; writes need admin; delete removes every
// version; bad documents are bad requests that say why.
func TestTemplates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{resolveImage: imageStore(t)})
	admin, reader, other := h.key("alpha", "admin"), h.key("alpha", "runs:read"), h.key("beta", "admin")
	h.must(http.StatusCreated, "POST", "/v1/policies/web", admin, []byte("budgets:\n  max_steps: 5\n"))

	doc := []byte("image: localhost/tiny:1\nstart: sleep 100\nready:\n  command: [\"true\"]\npolicy: web\npool: 1\n")
	var v api.Template
	h.must(http.StatusCreated, "POST", "/v1/templates/web", admin, doc).json(t, &v)
	if v.Name != "web" || v.Version != 1 || !strings.HasPrefix(v.Image, "localhost/tiny@sha256:") || !*v.New || v.Source != "api" || !strings.HasPrefix(v.By, "key_") {
		t.Fatalf("create = %+v", v)
	}
	h.must(http.StatusOK, "POST", "/v1/templates/web", admin, doc).json(t, &v)
	if v.Version != 1 || *v.New {
		t.Fatalf("create again = %+v, want version 1 unchanged", v)
	}
	h.must(http.StatusCreated, "POST", "/v1/templates/web", admin, []byte("image: localhost/tiny:1\npool: 2\n"))

	var got api.Template
	h.must(http.StatusOK, "GET", "/v1/templates/web/versions/v1", reader, nil).json(t, &got)
	if got.Version != 1 || !strings.Contains(got.Document, "image: "+v.Image+"\n") || !strings.Contains(got.Document, "policy: web\n") {
		t.Fatalf("version 1 = %+v, want its canonical document with the image by digest", got)
	}
	h.must(http.StatusOK, "GET", "/v1/templates/web/versions/latest", reader, nil).json(t, &got)
	if got.Version != 2 || !strings.Contains(got.Document, "pool: 2\n") {
		t.Fatalf("latest = %+v", got)
	}
	var list api.TemplateList
	h.must(http.StatusOK, "GET", "/v1/templates", reader, nil).json(t, &list)
	if len(list.Templates) != 1 || list.Templates[0].Version != 2 || list.Templates[0].Document != "" {
		t.Fatalf("list = %+v", list)
	}
	var vs api.TemplateVersionList
	h.must(http.StatusOK, "GET", "/v1/templates/web/versions", reader, nil).json(t, &vs)
	if len(vs.Versions) != 2 || vs.Versions[0].Version != 2 {
		t.Fatalf("versions = %+v", vs)
	}

	// Another tenant: nothing of alpha's.
	h.must(http.StatusOK, "GET", "/v1/templates", other, nil).json(t, &list)
	if len(list.Templates) != 0 {
		t.Fatalf("beta's list = %+v", list)
	}
	for _, p := range []string{"/v1/templates/web/versions", "/v1/templates/web/versions/latest"} {
		if e := h.do("GET", p, other, nil).errBody(t); e.Code != api.CodeNotFound {
			t.Errorf("beta GET %s = %+v, want not_found", p, e)
		}
	}
	if e := h.do("DELETE", "/v1/templates/web", other, nil).errBody(t); e.Code != api.CodeNotFound {
		t.Errorf("beta DELETE = %+v, want not_found", e)
	}
	// beta has no policy web: its template naming it is refused.
	if e := h.do("POST", "/v1/templates/web", other, doc).errBody(t); e.Code != api.CodeBadRequest || !strings.Contains(e.Message, "policy web: no such stored policy") {
		t.Errorf("beta create naming alpha's policy = %+v", e)
	}

	// Writes need admin.
	for _, q := range []struct{ method, path string }{{"POST", "/v1/templates/web"}, {"DELETE", "/v1/templates/web"}} {
		if e := h.do(q.method, q.path, reader, doc).errBody(t); e.Code != api.CodeForbidden {
			t.Errorf("%s %s with runs:read = %+v, want forbidden", q.method, q.path, e)
		}
	}

	for name, tc := range map[string]struct{ doc, want string }{
		"unknown key": {"image: localhost/tiny:1\nimagez: x\n", "field imagez not found"},
		"no image":    {"pool: 1\n", "image: missing"},
		"not stored":  {"image: localhost/none:1\n", "image localhost/none:1: not in the host's image store"},
		"invalid":     {"image: localhost/tiny:1\nworkdir: rel\npool: 40\n", "pool 40"},
	} {
		if e := h.do("POST", "/v1/templates/bad", admin, []byte(tc.doc)).errBody(t); e.Code != api.CodeBadRequest || !strings.Contains(e.Message, tc.want) {
			t.Errorf("%s: create = %+v, want bad_request with %q", name, e, tc.want)
		}
	}
	if e := h.do("POST", "/v1/templates/Bad", admin, doc).errBody(t); e.Code != api.CodeBadRequest {
		t.Errorf("bad name = %+v", e)
	}
	if e := h.do("GET", "/v1/templates/web/versions/x1", reader, nil).errBody(t); e.Code != api.CodeBadRequest {
		t.Errorf("bad ref = %+v", e)
	}

	var del api.TemplateDeleted
	h.must(http.StatusOK, "DELETE", "/v1/templates/web", admin, nil).json(t, &del)
	if del.Versions != 2 {
		t.Fatalf("delete = %+v, want 2 versions", del)
	}
	if e := h.do("GET", "/v1/templates/web/versions/latest", reader, nil).errBody(t); e.Code != api.CodeNotFound {
		t.Errorf("after delete = %+v, want not_found", e)
	}
}

// TestTemplatesWithoutImages: a server without an image store refuses
// every template, saying why.
func TestTemplatesWithoutImages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	admin := h.key("alpha", "admin")
	if e := h.do("POST", "/v1/templates/web", admin, []byte("image: a:1\n")).errBody(t); e.Code != api.CodeBadRequest || !strings.Contains(e.Message, "keeps no images") {
		t.Errorf("create = %+v", e)
	}
}
