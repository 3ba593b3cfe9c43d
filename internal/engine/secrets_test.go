package engine_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
)

// Realistic fake credentials (never real ones), and their rules.
const (
	fakeAWSKey    = "AKIAZ7QKXJ2RW5TLM3VN"                     // aws-access-token
	fakeGitHubPAT = "ghp_Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i" // github-pat
	fakeStripeKey = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"         // stripe-access-token
)

// TestSecretsNeverReachTheLog: a key pasted into the task, a token a
// command prints and a key the model writes into the workspace are each
// found by the secret scanner and redacted, in the log, in what the model
// is fed and in the patch, with the rule that found them named; the run
// goes on.
func TestSecretsNeverReachTheLog(t *testing.T) {
	h := newHarness(t)
	ws := t.TempDir()
	if err := os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("GITHUB_TOKEN="+fakeGitHubPAT+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "cat notes.txt"}
  - tool_calls:
      - name: run_command
        args: {command: "printf 'STRIPE=%s\n' \"$(printf sk_live_)4eC39HqLyjWDarjtT1zdp7dc\" > billing.env"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	cfg := engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}}
	o := h.run("deploy with AWS key "+fakeAWSKey+" please", script, cfg)
	if o.Status != event.StatusCompleted {
		t.Fatalf("run: %s (%s)", o.Status, o.Reason)
	}
	evs := h.verifyLog(o.RunID)
	for _, e := range evs {
		for _, v := range []string{fakeAWSKey, fakeGitHubPAT, fakeStripeKey} {
			if strings.Contains(string(e.Payload), v) {
				t.Errorf("event %d (%s) holds %s: %s", e.Seq, e.Type, v, e.Payload)
			}
		}
	}
	var created event.RunCreated
	if err := json.Unmarshal(evs[0].Payload, &created); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(created.Task, "[redacted:aws-access-token]") || !slices.Equal(created.Secrets, []string{"aws-access-token"}) {
		t.Errorf("run.created task %q, secrets %v", created.Task, created.Secrets)
	}
	fins := h.finished(o.RunID)
	if !strings.Contains(fins[0].Output, "GITHUB_TOKEN=[redacted:github-pat]") || !slices.Equal(fins[0].Secrets, []string{"github-pat"}) {
		t.Errorf("cat's result %q, secrets %v", fins[0].Output, fins[0].Secrets)
	}
	patch := h.patchOf(o)
	if !strings.Contains(patch, "+STRIPE=[redacted:stripe-access-token]") || strings.Contains(patch, fakeStripeKey) {
		t.Errorf("patch:\n%s", patch)
	}
	// The original notes.txt line is not the run's change: not in the
	// patch, and not what made the patch's findings.
	for _, e := range evs {
		if e.Type == event.TypeArtifactStored {
			var a event.ArtifactStored
			_ = json.Unmarshal(e.Payload, &a)
			if a.Kind == "patch" && (!slices.Equal(a.Secrets, []string{"stripe-access-token"}) || a.SecretsKept) {
				t.Errorf("patch artifact %+v", a)
			}
		}
	}
}

// TestSecretsPolicy: secrets.task refuse stops a run with a pasted key
// before anything is recorded; keep leaves the task, results and patch as
// they are; a token in a call's arguments is asked about (the policy hook,
// as a host wires it).
func TestSecretsPolicy(t *testing.T) {
	var doc *policy.Document
	h := newHarness(t, func(o *engine.Options) {
		o.Policy = func(_ context.Context, q engine.PolicyQuery) event.PolicyDecision { return engine.DecideTool(doc, q) }
	})
	parse := func(s string) *policy.Document {
		d, err := policy.Parse([]byte(s))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	doc = parse("secrets:\n  task: refuse\n")
	cfg := engine.PolicyConfig(doc)
	cfg.Model = "script:test.yaml"
	_, err := h.eng.Create(context.Background(), engine.Request{Task: "use " + fakeAWSKey, Config: cfg, Script: []byte("turns: [{tool_calls: [{name: finish, args: {summary: x}}]}]")})
	if !errors.Is(err, engine.ErrInvalid) || !strings.Contains(err.Error(), "aws-access-token") {
		t.Fatalf("Create with a key in the task, secrets.task refuse = %v", err)
	}

	doc = parse("secrets:\n  task: keep\n  results: keep\n  patch: keep\n  arguments: deny\n")
	cfg = engine.PolicyConfig(doc)
	cfg.Sandboxes = []engine.SandboxConfig{{Name: "main"}}
	script := `
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo ` + fakeGitHubPAT + `"}
  - tool_calls:
      - name: run_command
        args: {command: "printf '%s%s\n' sk_live_ 4eC39HqLyjWDarjtT1zdp7dc > k.env; cat k.env"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	o := h.run("use "+fakeAWSKey, script, cfg)
	if o.Status != event.StatusCompleted {
		t.Fatalf("run: %s (%s)", o.Status, o.Reason)
	}
	evs := h.verifyLog(o.RunID)
	var created event.RunCreated
	_ = json.Unmarshal(evs[0].Payload, &created)
	if !strings.Contains(created.Task, fakeAWSKey) {
		t.Errorf("secrets.task keep: task %q", created.Task)
	}
	var denied *event.PolicyDecision
	for _, e := range evs {
		if e.Type == event.TypePolicyDecision {
			var d event.PolicyDecision
			_ = json.Unmarshal(e.Payload, &d)
			if d.Decision == "deny" {
				denied = &d
			}
		}
	}
	if denied == nil || denied.Rule != "secrets.arguments" || !slices.Equal(denied.Secrets, []string{"github-pat"}) {
		t.Errorf("the call carrying a token: decision %+v", denied)
	}
	fins := h.finished(o.RunID)
	if fins[0].Outcome != "denied" || !strings.Contains(fins[1].Output, fakeStripeKey) {
		t.Errorf("results: %+v", fins)
	}
	if patch := h.patchOf(o); !strings.Contains(patch, fakeStripeKey) {
		t.Errorf("secrets.patch keep: patch\n%s", patch)
	}
}
