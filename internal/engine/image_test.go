package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/image/imagetest"
)

const finishOnly = `
turns:
  - tool_calls:
      - name: finish
        args: {summary: "done"}
`

// TestRunOnImage: a run that names an image by tag records it by digest
// when it is created, and its sandboxes are made of it: the image's files
// and environment, not the host's. A name the store does not have is
// refused before anything is recorded.
func TestRunOnImage(t *testing.T) {
	images, err := image.Open(filepath.Join(t.TempDir(), "images"), image.Options{})
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
	imported, err := images.Import(context.Background(), string(p), []string{"localhost/busybox:1"})
	if err != nil {
		t.Fatal(err)
	}
	want := "localhost/busybox@" + imported[0].Digest
	h := newHarness(t, func(o *engine.Options) { o.Images = images })

	_, err = h.eng.Create(ctxT(t, time.Minute), engine.Request{Task: "t", Config: engine.Config{Model: "script:x", Image: "localhost/missing:1"}, Script: []byte(finishOnly)})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "no such image") {
		t.Errorf("Create with an image the store lacks = %v, want ErrInvalid naming it", err)
	}

	_, err = h.eng.Create(ctxT(t, time.Minute), engine.Request{Task: "t", Config: engine.Config{Model: "script:x", Image: "localhost/busybox:1", RootFS: "/srv/root"}, Script: []byte(finishOnly)})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "exclude") {
		t.Errorf("Create with an image and a rootfs = %v, want ErrInvalid", err)
	}

	r := h.start("look around", `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "cat /IMAGE-MARKER; echo env=$IMAGE_ENV; test -e /usr/bin/python3 && echo host-python; true"}
  - tool_calls:
      - name: finish
        args: {summary: "looked"}
`, engine.Config{Image: "localhost/busybox:1"})
	if _, err := h.eng.Drive(ctxT(t, 2*time.Minute), r.ID); err != nil {
		t.Fatalf("Drive = %v", err)
	}
	evs := h.verifyLog(r.ID)
	var created event.RunCreated
	var cfg engine.Config
	if err := json.Unmarshal(evs[0].Payload, &created); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(created.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.Image != want {
		t.Errorf("run.created records image %q, want %q", cfg.Image, want)
	}
	provisioned := 0
	for _, e := range evs {
		if e.Type != event.TypeSandboxProvisioned {
			continue
		}
		provisioned++
		var sp event.SandboxProvisioned
		if err := json.Unmarshal(e.Payload, &sp); err != nil {
			t.Fatal(err)
		}
		if sp.Image != want {
			t.Errorf("sandbox.provisioned image %q, want %q", sp.Image, want)
		}
	}
	if provisioned == 0 {
		t.Error("no sandbox was provisioned")
	}
	out := h.finished(r.ID)[0].Output
	if !strings.Contains(out, "from-the-image") || !strings.Contains(out, "env=from-image") || strings.Contains(out, "host-python") {
		t.Errorf("the command saw %q, want the image's marker and environment and no host python", out)
	}
}
