package e2b_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/template"
)

// busyboxStore is an image store holding the busybox test image as
// localhost/busybox:test; it skips t without busybox-static.
func busyboxStore(t *testing.T) *image.Store {
	t.Helper()
	img := imagetest.Busybox(t)
	dir := t.TempDir()
	s, err := image.Open(filepath.Join(dir, "images"), image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Import(context.Background(), imagetest.DockerArchive(t, dir, img, "localhost/busybox:test"), nil); err != nil {
		t.Fatal(err)
	}
	return s
}

// putTemplate stores doc as tenant's template name, its image resolved
// in images, as airlock template create does.
func (h *harness) putTemplate(images *image.Store, tenant, name, doc string) store.TemplateVersion {
	h.t.Helper()
	tp, err := template.Parse([]byte(doc))
	if err != nil {
		h.t.Fatal(err)
	}
	if tp.Image, err = images.Resolve(context.Background(), tp.Image); err != nil {
		h.t.Fatal(err)
	}
	b, err := template.Marshal(tp)
	if err != nil {
		h.t.Fatal(err)
	}
	v, _, err := h.store.PutTemplate(context.Background(), store.TemplateVersion{Tenant: tenant, Name: name, Image: tp.Image, Document: b})
	if err != nil {
		h.t.Fatal(err)
	}
	return v
}

// sh runs script with the image's /bin/sh (it has no bash) in s.
func (h *harness) sh(s sbx, script string) runResult {
	h.t.Helper()
	return parseRun(h.t, h.stream(s, "process.Process/Start",
		map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}, "stdin": false}, nil))
}

// TestStoredTemplates: Sandbox.create('name') makes the tenant's stored
// template of that name (before a stored policy of the name): its image's
// root, env, workdir, limits over its policy's; its start command ran and
// its readiness check passed before create returned; the record says
// which version and image. A readiness check that fails is a create that
// fails, saying why, with no sandbox left; another tenant has no such
// template.
func TestStoredTemplates(t *testing.T) {
	images := busyboxStore(t)
	h := newHarness(t, harnessOptions{images: images})
	h.putPolicy("alpha", "web", "sandbox:\n  limits:\n    memory: 512M\n")
	v := h.putTemplate(images, "alpha", "web", `
image: localhost/busybox:test
start: echo started > /tmp/started; exec sleep 600
ready:
  command: test -e /tmp/started
  timeout: 20s
env: {FOO: bar}
workdir: /tmp
limits: {memory: 256M}
policy: web
`)
	s := h.create("alpha", map[string]any{"templateID": "web"})
	r := h.sh(s, "cat /tmp/started; echo $FOO $PWD; cat /IMAGE-MARKER")
	if r.exit != 0 || r.stdout != "started\nbar /tmp\nfrom-the-image\n" {
		t.Fatalf("a command in the template's sandbox = %+v, want the start command's file, the env, workdir and image", r)
	}
	var l []struct {
		TemplateID string `json:"templateID"`
		MemoryMB   int    `json:"memoryMB"`
	}
	_ = json.Unmarshal(h.api("alpha", "GET", "/v2/sandboxes", nil).body, &l)
	if len(l) != 1 || l[0].TemplateID != "web" || l[0].MemoryMB != 256 {
		t.Errorf("list = %+v, want the web template with the template's 256 MB", l)
	}
	p, err := recordOf(t, h.store, s.ID).events[0].Unpack()
	if err != nil {
		t.Fatal(err)
	}
	want := "template web v1, image " + v.Image + ", policy web v1"
	if c := p.(*event.SandboxCreated); c.Template != "web" || c.TemplateSource != want {
		t.Errorf("sandbox.created = %+v, want template web, source %q", c, want)
	}

	h.putTemplate(images, "alpha", "never", "image: localhost/busybox:test\nready:\n  command: echo not yet; exit 3\n  timeout: 1s\n")
	res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": "never"})
	if res.status != 400 || !strings.Contains(string(res.body), "template never v1: template readiness check did not pass within 1s") ||
		!strings.Contains(string(res.body), "the last exited 3): not yet") {
		t.Errorf("create from a template that never gets ready = %s, want 400 saying why", res)
	}
	_ = json.Unmarshal(h.api("alpha", "GET", "/v2/sandboxes", nil).body, &l)
	if len(l) != 1 {
		t.Errorf("sandboxes after a failed create = %+v, want only the first", l)
	}
	if res := h.api("beta", "POST", "/v2/sandboxes", map[string]any{"templateID": "web"}); res.status != 404 {
		t.Errorf("another tenant's template = %s, want 404", res)
	}
}

// TestStoredTemplatePausedRestart: a paused sandbox of a stored template
// resumes, after its server restarted, on the template's image with its
// environment and start command, its files kept.
func TestStoredTemplatePausedRestart(t *testing.T) {
	images := busyboxStore(t)
	o := harnessOptions{images: images}
	h := newHarness(t, o)
	h.putTemplate(images, "alpha", "web", "image: localhost/busybox:test\nstart: echo started > /tmp/started; exec sleep 600\nenv: {FOO: bar}\n")
	s := h.createRaw("alpha", map[string]any{"templateID": "web", "timeout": 3600})
	if r := h.sh(s, "echo kept > kept.txt"); r.exit != 0 {
		t.Fatalf("write: %+v", r)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	h.serve(t, o, h.store)
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}); res.status != 201 {
		t.Fatalf("resume after a restart = %s, want 201", res)
	}
	r := h.sh(s, "cat kept.txt /IMAGE-MARKER; echo $FOO; for i in $(seq 50); do test -e /tmp/started && break; sleep 0.1; done; cat /tmp/started")
	if r.exit != 0 || r.stdout != "kept\nfrom-the-image\nbar\nstarted\n" {
		t.Errorf("after a resume across a restart = %+v, want the file, the image's root, the env and the start command's file", r)
	}
}

// TestStoredTemplatesWarmPool: a template with pool: N is served from
// sandboxes made and prepared ahead (its start command ran, its readiness
// check passed before the create asked: the pool's hits), one per create,
// never shared.
func TestStoredTemplatesWarmPool(t *testing.T) {
	images := busyboxStore(t)
	h := newHarness(t, harnessOptions{images: images, warm: true})
	h.putTemplate(images, "alpha", "web", "image: localhost/busybox:test\nstart: cat /proc/sys/kernel/random/uuid > /tmp/started; exec sleep 600\nready:\n  command: test -e /tmp/started\npool: 2\n")
	first := h.create("alpha", map[string]any{"templateID": "web"}) // prepared inline; the pool fills
	if r := h.sh(first, "cat /tmp/started"); r.exit != 0 {
		t.Fatalf("the first sandbox was not prepared: %+v", r)
	}
	deadline := time.Now().Add(time.Minute)
	for h.pool.Stats().Idle < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the warm pool holds %d sandboxes, want 2", h.pool.Stats().Idle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	hits := h.pool.Stats().Hits
	var seen []string
	for range 2 {
		s := h.create("alpha", map[string]any{"templateID": "web"})
		r := h.sh(s, "cat /tmp/started; ls /workspace | wc -l")
		lines := strings.Fields(r.stdout)
		if r.exit != 0 || len(lines) != 2 || lines[1] != "0" {
			t.Fatalf("a warm sandbox: %+v", r)
		}
		if slices.Contains(seen, lines[0]) {
			t.Errorf("two creates got the same prepared sandbox")
		}
		seen = append(seen, lines[0])
		h.sh(s, "echo mine > /workspace/f")
	}
	if got := h.pool.Stats().Hits - hits; got != 2 {
		t.Errorf("warm pool hits = %d, want 2", got)
	}
}

// TestStoredTemplatesWithoutImages: a server without an image store
// refuses a stored template, saying why.
func TestStoredTemplatesWithoutImages(t *testing.T) {
	images := busyboxStore(t)
	h := newHarness(t, harnessOptions{})
	h.putTemplate(images, "alpha", "web", "image: localhost/busybox:test\n")
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": "web"}); res.status != 400 || !strings.Contains(string(res.body), "keeps no images") {
		t.Errorf("create = %s, want 400", res)
	}
}

var _ e2b.Images = (*image.Store)(nil)

// TestStoredTemplateSnapshot: a sandbox created from a snapshot of a
// stored template's sandbox boots on the template's image, with its
// environment and working directory, its start command run again, and
// the snapshot's workspace; so does one created after the server
// restarted (the snapshot's record keeps the template).
func TestStoredTemplateSnapshot(t *testing.T) {
	images := busyboxStore(t)
	o := harnessOptions{images: images}
	h := newHarness(t, o)
	h.putTemplate(images, "alpha", "web", `
image: localhost/busybox:test
start: echo started > /tmp/started; exec sleep 600
ready:
  command: test -e /tmp/started
env: {FOO: bar}
workdir: /tmp
`)
	s := h.createRaw("alpha", map[string]any{"templateID": "web", "timeout": 3600})
	if r := h.sh(s, "echo kept > /workspace/kept.txt"); r.exit != 0 {
		t.Fatalf("write: %+v", r)
	}
	sn := h.snapshot("alpha", s.ID, map[string]any{"name": "web-kept"})
	const look = "cat /workspace/kept.txt /IMAGE-MARKER /tmp/started; echo $FOO $PWD"
	const want = "kept\nfrom-the-image\nstarted\nbar /tmp\n"
	for _, ref := range []string{sn.ID, "web-kept"} {
		c := h.createRaw("alpha", map[string]any{"templateID": ref})
		if r := h.sh(c, look); r.exit != 0 || r.stdout != want {
			t.Errorf("a sandbox created from snapshot %s = %+v, want stdout %q: the workspace on the template's image, prepared", ref, r, want)
		}
		h.api("alpha", "DELETE", "/sandboxes/"+c.ID, nil)
	}
	h.serve(t, o, h.store)
	c := h.createRaw("alpha", map[string]any{"templateID": sn.ID})
	if r := h.sh(c, look); r.exit != 0 || r.stdout != want {
		t.Errorf("created from the snapshot after a restart = %+v, want stdout %q", r, want)
	}
}
