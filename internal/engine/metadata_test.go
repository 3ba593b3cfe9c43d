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
	"github.com/airlockrun/airlock/internal/policy"
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

// TestCreatePolicyHash: a run records the policy hash of the document it
// is held to (the built-in default's when it has none, not the hash of
// empty input), the same for the same document in another form; a run
// whose flags changed the policy given records that policy's hash and
// version too; a document that does not parse is refused.
func TestCreatePolicyHash(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: noSandboxBackend{}})
	if err != nil {
		t.Fatal(err)
	}
	script := []byte("turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: ok}\n")
	create := func(req engine.Request) (store.Run, event.PolicyResolved) {
		t.Helper()
		req.Task, req.Config, req.Script = "t", engine.Config{Model: "script:s.yaml"}, script
		r, err := eng.Create(ctx, req)
		if err != nil {
			t.Fatalf("Create(%+v) = %v", req, err)
		}
		evs, err := eng.Events(ctx, r.ID)
		if err != nil || len(evs) < 2 || evs[1].Type != event.TypePolicyResolved {
			t.Fatalf("events %+v, %v", evs, err)
		}
		var p event.PolicyResolved
		if err := json.Unmarshal(evs[1].Payload, &p); err != nil {
			t.Fatal(err)
		}
		if p.PolicyHash != r.PolicyHash {
			t.Fatalf("policy.resolved hash %s, the run's %s", p.PolicyHash, r.PolicyHash)
		}
		return r, p
	}
	def := policy.Default().Hash()
	if r, p := create(engine.Request{}); r.PolicyHash != def || p.BaseHash != "" || p.Source != "default (deny all egress)" {
		t.Errorf("default run: hash %s, %+v; want the default's %s", r.PolicyHash, p, def)
	}
	doc := []byte("budgets:\n  max_steps: 9\nsandbox:\n  limits:\n    memory: 2G\n")
	same := []byte("sandbox: {limits: {memory: 2048M}}\nbudgets: {max_steps: 9}   # the same policy\n")
	want, err := policy.HashOf(doc)
	if err != nil {
		t.Fatal(err)
	}
	r1, _ := create(engine.Request{Policy: doc})
	r2, _ := create(engine.Request{Policy: same})
	if r1.PolicyHash != want || r2.PolicyHash != want || want == def {
		t.Errorf("one policy in two forms: hashes %s and %s, want %s", r1.PolicyHash, r2.PolicyHash, want)
	}

	// Flags on a file recorded as a version of its name.
	flagged := []byte("budgets:\n  max_steps: 3\nsandbox:\n  limits:\n    memory: 2G\n")
	flaggedHash, err := policy.HashOf(flagged)
	if err != nil {
		t.Fatal(err)
	}
	r, p := create(engine.Request{Policy: flagged, Flags: true, BasePolicy: doc, PolicySource: "prod.yaml", PolicyName: "prod"})
	if r.PolicyHash != flaggedHash || p.BaseHash != want || p.Version != "prod@v1" || p.Source != "prod.yaml" {
		t.Errorf("flagged run: hash %s, %+v; want prod@v1 %s + flags -> %s", r.PolicyHash, p, want, flaggedHash)
	}
	v, err := st.GetPolicy(ctx, "local", "prod", "v1")
	if err != nil || !bytes.Equal(v.Document, doc) || v.PolicyHash != want {
		t.Errorf("stored version %+v, %v; want the file, byte for byte, with its policy hash %s", v, err, want)
	}
	// Flags on the built-in default.
	if r, p := create(engine.Request{Policy: flagged, Flags: true}); r.PolicyHash != flaggedHash || p.BaseHash != def || p.Version != "" {
		t.Errorf("flags on the default: hash %s, %+v; want %s + flags -> %s", r.PolicyHash, p, def, flaggedHash)
	}
	// A stored version the caller read: named, not recorded again.
	if _, p := create(engine.Request{Policy: doc, PolicyVersion: "prod@v1", PolicySource: "policy prod v1"}); p.Version != "prod@v1" || p.BaseHash != "" {
		t.Errorf("stored version: %+v", p)
	}
	for _, req := range []engine.Request{
		{Policy: []byte("budgets: {max_steps: -1}\n")},
		{Policy: doc, Flags: true, BasePolicy: []byte("sandbx: {}\n")},
	} {
		req.Task, req.Config, req.Script = "t", engine.Config{Model: "script:s.yaml"}, script
		if _, err := eng.Create(ctx, req); !errors.Is(err, engine.ErrInvalid) {
			t.Errorf("Create(a policy that does not parse) = %v, want ErrInvalid", err)
		}
	}
}
