package cli_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestRunsShowSandboxEvents: what a run's command reports through
// airlock-event shows in the live timeline and in runs show, text and
// JSON; a terminal escape it sends does not reach the terminal.
func TestRunsShowSandboxEvents(t *testing.T) {
	home, exe := serveHome(t, "alev-")
	script := filepath.Join(home, "script.yaml")
	if err := os.WriteFile(script, []byte(`turns:
  - tool_calls:
      - name: run_command
        args: {command: "airlock-event progress --pct 40 'running tests' && airlock-event log --level warn \"$(printf 'a\\033[2Jb')\" && echo x > r.txt && airlock-event artifact r.txt && echo nope | airlock-event lines"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var live bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &live, "run", "report", "--script", script); code != 0 {
		t.Fatalf("airlock run = %d\n%s", code, live.String())
	}
	for _, want := range []string{"sandbox [main] progress 40% running tests", "sandbox [main] artifact /workspace/r.txt -> sandbox/r.txt"} {
		if !strings.Contains(live.String(), want) {
			t.Errorf("the live timeline lacks %q:\n%s", want, live.String())
		}
	}
	id := regexp.MustCompile(`run_[0-9A-Z]+`).FindString(live.String())
	if id == "" {
		t.Fatalf("no run id in:\n%s", live.String())
	}
	var show bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &show, "runs", "show", id); code != 0 {
		t.Fatalf("runs show = %d", code)
	}
	for _, want := range []string{
		"progress [main] 40% running tests\n",
		"sandbox  [main] log warn: a\uFFFD[2Jb\n",
		"sandbox  [main] artifact /workspace/r.txt -> sandbox/r.txt\n",
		"artifact sandbox/r.txt ",
		"dropped  [main] 1 refused by the host (1 malformed), 0 dropped in the sandbox (none), 0 artifacts not stored\n",
	} {
		if !strings.Contains(show.String(), want) {
			t.Errorf("runs show lacks %q:\n%s", want, show.String())
		}
	}
	if strings.Contains(show.String()+live.String(), "\033[2J") {
		t.Error("a terminal escape the sandbox sent reached the output")
	}
	show.Reset()
	if code := airlockIn(t, ctx, home, exe, &show, "runs", "show", id, "--json"); code != 0 {
		t.Fatalf("runs show --json = %d", code)
	}
	var v struct {
		Sandbox struct {
			Progress []struct {
				Source, Sandbox, Message string
				Pct                      float64
			} `json:"progress"`
			Total   int `json:"total"`
			Dropped []struct {
				Malformed int64 `json:"malformed"`
			} `json:"dropped"`
		} `json:"sandbox_events"`
	}
	if err := json.Unmarshal(show.Bytes(), &v); err != nil {
		t.Fatalf("runs show --json: %v\n%s", err, show.String())
	}
	s := v.Sandbox
	if len(s.Progress) != 1 || s.Progress[0].Pct != 40 || s.Progress[0].Source != "sandbox" || s.Total != 3 || len(s.Dropped) != 1 || s.Dropped[0].Malformed != 1 {
		t.Errorf("runs show --json sandbox_events = %+v", s)
	}
}
