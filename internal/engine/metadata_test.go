package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// noSandboxBackend refuses sandboxes: Create makes none.
type noSandboxBackend struct{}

func (noSandboxBackend) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, errors.New("this test makes no sandboxes")
}

// scrubHunter2 is a store redactor that scrubs "hunter2", as the host's
// redactor scrubs the secrets it knows.
type scrubHunter2 struct{}

func (scrubHunter2) Bytes(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte("hunter2"), []byte("[redacted]"))
}

// TestCreateMetadata: Create records the request's metadata in the run's
// run.created event, redacted like the rest of it; metadata out of bounds
// is invalid, and nothing is recorded.
func TestCreateMetadata(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: scrubHunter2{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: noSandboxBackend{}, LockDir: filepath.Join(dir, "locks")})
	if err != nil {
		t.Fatal(err)
	}
	script := []byte("turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: ok}\n")
	for _, tc := range []struct {
		name string
		md   map[string]string
		want map[string]string // nil: refused
	}{
		{"none", nil, map[string]string{}},
		{"labels", map[string]string{"ticket": "OPS-42", "team": "infra"}, map[string]string{"ticket": "OPS-42", "team": "infra"}},
		{"redacted", map[string]string{"note": "pw hunter2"}, map[string]string{"note": "pw [redacted]"}},
		{"bad key", map[string]string{"a b": "x"}, nil},
		{"long value", map[string]string{"k": strings.Repeat("x", event.MaxMetadataValueLen+1)}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, err := st.ListRuns(ctx, store.RunFilter{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := eng.Create(ctx, engine.Request{Task: "t", Config: engine.Config{Model: "script:t.yaml"}, Script: script, Metadata: tc.md})
			if tc.want == nil {
				after, _ := st.ListRuns(ctx, store.RunFilter{})
				if !errors.Is(err, engine.ErrInvalid) || len(after) != len(before) {
					t.Fatalf("Create with metadata %v = %v (runs %d, before %d), want ErrInvalid and nothing recorded", tc.md, err, len(after), len(before))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			evs, err := st.Events(ctx, r.ID, 1, 1)
			if err != nil || len(evs) != 1 || evs[0].Type != event.TypeRunCreated {
				t.Fatalf("first event %v, %v", evs, err)
			}
			var created event.RunCreated
			if err := json.Unmarshal(evs[0].Payload, &created); err != nil {
				t.Fatal(err)
			}
			if len(created.Metadata) != len(tc.want) {
				t.Fatalf("run.created metadata %v, want %v", created.Metadata, tc.want)
			}
			for k, v := range tc.want {
				if created.Metadata[k] != v {
					t.Errorf("run.created metadata %v, want %v", created.Metadata, tc.want)
				}
			}
		})
	}
}
