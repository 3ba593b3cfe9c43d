package engine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
)

// TestSandboxEvents: a command of a scripted run reports progress and
// declares an artifact through airlock-event; the run's log has them,
// marked as the sandbox's, and the file is the run's artifact. Declared
// artifacts that are symlinks, FIFOs, devices or outside the workspace,
// malformed lines and unknown kinds are refused and counted, and the run
// completes regardless.
func TestSandboxEvents(t *testing.T) {
	h := newHarness(t)
	script := `
turns:
  - tool_calls:
      - name: run_command
        args:
          command: >-
            airlock-event progress --pct 40 "running tests" &&
            echo '<h1>report</h1>' > report.html && airlock-event artifact report.html --type text/html &&
            ln -s /etc/passwd passwd-link && airlock-event artifact passwd-link &&
            ln -s /etc/shadow shadow-link && airlock-event artifact shadow-link &&
            mkfifo pipe && airlock-event artifact pipe &&
            ln -s /etc etc-link && airlock-event artifact etc-link/passwd &&
            airlock-event artifact /etc/passwd && airlock-event artifact /dev/zero &&
            mkdir -p big && head -c 2000000 /dev/zero > big/f && airlock-event artifact big/f &&
            echo 'not json' | airlock-event lines && airlock-event emit shell '{"cmd":"rm -rf /"}' &&
            airlock-event test --name unit --status pass &&
            airlock-event log "token ` + "ghp_" + `Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i" && echo done
  - tool_calls:
      - name: finish
        args: {summary: done}
`
	cfg := engine.Config{Events: engine.Events{ArtifactMaxSize: 1 << 20}}
	o := h.run("events", script, cfg)
	if o.Status != event.StatusCompleted {
		t.Fatalf("status %s (%s), want completed", o.Status, o.Reason)
	}
	var progress, tests, logs []event.SandboxEvent
	artifacts := map[string]event.SandboxEvent{}
	var dropped *event.SandboxEventsDropped
	for _, e := range h.verifyLog(o.RunID) {
		p, err := e.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		switch p := p.(type) {
		case *event.SandboxEvent:
			if p.Source != event.SourceSandbox || p.Sandbox != engine.DefaultSandbox {
				t.Errorf("sandbox event %+v: want source sandbox, sandbox %s", p, engine.DefaultSandbox)
			}
			switch p.Kind {
			case "progress":
				progress = append(progress, *p)
			case "test":
				tests = append(tests, *p)
			case "artifact":
				artifacts[p.Path] = *p
			case "log":
				logs = append(logs, *p)
			default:
				t.Errorf("recorded a sandbox event of kind %q: %+v", p.Kind, p)
			}
		case *event.SandboxEventsDropped:
			dropped = p
		}
	}
	if len(progress) != 1 || progress[0].Message != "running tests" || progress[0].Pct == nil || *progress[0].Pct != 40 {
		t.Errorf("progress events %+v, want one of 40%% running tests", progress)
	}
	if len(tests) != 1 || tests[0].Name != "unit" || tests[0].Status != "pass" {
		t.Errorf("test events %+v, want unit passed", tests)
	}
	if len(logs) != 1 || logs[0].Message != "token [redacted:github-pat]" || strings.Join(logs[0].Secrets, ",") != "github-pat" {
		t.Errorf("log events %+v, want the token redacted", logs)
	}
	if a := artifacts["/workspace/report.html"]; a.Artifact != "sandbox/report.html" || a.Refused != "" {
		t.Errorf("report.html's event = %+v, want it stored as sandbox/report.html", a)
	}
	for _, p := range []string{"/workspace/passwd-link", "/workspace/shadow-link", "/workspace/pipe", "/workspace/etc-link/passwd", "/etc/passwd", "/dev/zero", "/workspace/big/f"} {
		if a, ok := artifacts[p]; !ok || a.Refused == "" || a.Artifact != "" {
			t.Errorf("artifact %s: event %+v (seen %t), want it refused", p, a, ok)
		}
	}
	want := event.SandboxEventsDropped{Sandbox: engine.DefaultSandbox, Malformed: 1, UnknownKind: 1, Artifacts: 7}
	if dropped == nil || *dropped != want {
		t.Errorf("sandbox.events_dropped = %+v, want %+v", dropped, want)
	}
	var found bool
	for _, a := range o.Artifacts {
		switch {
		case a.Name == "sandbox/report.html":
			found = true
			r, err := h.blobs.Open(context.Background(), a.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if got := mustRead(t, r); got != "<h1>report</h1>\n" || a.MediaType != "text/html" {
				t.Errorf("sandbox/report.html = %q (%s), want the report as text/html", got, a.MediaType)
			}
		case strings.HasPrefix(a.Name, "sandbox/"):
			t.Errorf("artifact %s stored, want only sandbox/report.html", a.Name)
		}
	}
	if !found {
		t.Errorf("no artifact sandbox/report.html among %+v", o.Artifacts)
	}
}
