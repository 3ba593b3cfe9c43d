package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestAgentRunEgress: an agent run under a policy gives its sandbox the
// egress proxy; what the model's commands reach, and what they are refused,
// is recorded as egress.decision events in the run's own log.
func TestAgentRunEgress(t *testing.T) {
	t.Parallel()
	agentRunEgress(t)
}

// TestAgentRunEgressGVisor is TestAgentRunEgress on the gvisor runtime
// (--runtime gvisor): the same egress through the host's proxy, and the
// run records the runtime it got.
func TestAgentRunEgressGVisor(t *testing.T) {
	t.Parallel()
	needGVisor(t)
	agentRunEgress(t, "--runtime", "gvisor")
}

// needGVisor skips t where the gvisor runtime cannot run.
func needGVisor(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("gvisor runtime: needs root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("gvisor runtime: runsc is not installed (scripts/ci-deps.sh installs it)")
	}
}

func agentRunEgress(t *testing.T, flags ...string) {
	h := newHome(t)
	needTool(t, "curl")
	pol := h.writePolicy(t, up.policy(policyOptions{echoMethods: "GET"}))
	e := up.echo.port
	script := fmt.Sprintf(`
turns:
  - tool_calls:
      - name: run_command
        args: {command: "curl -sS --fail https://%s:%d/agent-allowed"}
      - name: run_command
        args: {command: "curl -sS -o /dev/null -w '%%{http_code}' http://%s:%d/agent-denied"}
  - tool_calls:
      - name: finish
        args: {summary: "fetched"}
`, echoName, e, deniedName, e)
	sp := filepath.Join(h.dir, "script.yaml")
	if err := os.WriteFile(sp, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	r := h.airlock(t, "", append(append([]string{"run", "--script", sp, "--policy", pol}, flags...), "fetch a page")...)
	if r.code != 0 {
		t.Fatalf("airlock run failed\n%s", r)
	}
	if !strings.Contains(r.stdout, "egress allowed "+echoName) || !strings.Contains(r.stdout, "egress denied "+deniedName) {
		t.Errorf("the timeline does not show the egress decisions\n%s", r)
	}
	ls := h.airlock(t, "", "runs", "ls", "--json")
	var run struct{ ID string }
	if err := json.Unmarshal([]byte(strings.TrimSpace(ls.stdout)), &run); err != nil {
		t.Fatalf("runs ls: %v\n%s", err, ls)
	}
	evs := h.airlock(t, "", "runs", "events", run.ID, "--json")
	var allowed, denied int
	for _, line := range strings.Split(strings.TrimSpace(evs.stdout), "\n") {
		var ev struct {
			Type    string
			Payload struct {
				Decision, Host, Path, Sandbox string
			}
		}
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type != "egress.decision" {
			continue
		}
		if ev.Payload.Sandbox != "main" {
			t.Errorf("egress decision names sandbox %q", ev.Payload.Sandbox)
		}
		switch {
		case ev.Payload.Decision == "allowed" && ev.Payload.Host == echoName:
			allowed++
		case ev.Payload.Decision == "denied" && ev.Payload.Host == deniedName:
			denied++
		}
	}
	if allowed != 1 || denied != 1 {
		t.Errorf("egress decisions in the run's log: %d allowed, %d denied; want 1 and 1\n%s", allowed, denied, evs.stdout)
	}
	if v := h.airlock(t, "", "runs", "verify", run.ID); v.code != 0 {
		t.Errorf("the log with egress decisions does not verify\n%s", v)
	}
	if slices.Contains(flags, "gvisor") && !strings.Contains(evs.stdout, `"backend":"gvisor"`) {
		t.Errorf("the run's log does not record the gvisor runtime its sandbox got\n%s", evs.stdout)
	}
	up.echo.saw(t, echoName, "GET", "/agent-allowed")
	up.echo.neverSaw(t, "/agent-denied")
}
