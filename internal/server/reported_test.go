package server_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestStreamSandboxEvents: what a run's command reports through
// airlock-event reaches API clients on the run's SSE stream, marked as the
// sandbox's, under the policy's events section (a custom kind it lists).
func TestStreamSandboxEvents(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{drive: true})
	admin := h.key("alpha", "admin")
	key := h.key("alpha", "runs:read", "runs:write")
	h.must(http.StatusCreated, "POST", "/v1/policies/reports", admin, []byte("events:\n  kinds:\n    - name: coverage\n"))
	run := h.createRun(key, map[string]any{"task": "report", "policy": "reports", "script": `turns:
  - tool_calls:
      - name: run_command
        args: {command: "airlock-event progress --pct 40 'running tests' && airlock-event emit coverage '{\"pct\":81}' && airlock-event emit bogus '{}'"}
  - tool_calls:
      - name: finish
        args: {summary: ok}
`})
	evs, _, status := h.stream(key, "/v1/runs/"+run.ID+"/events/stream", nil)
	if status != http.StatusOK {
		t.Fatalf("stream = %d", status)
	}
	var got []string
	for _, e := range evs {
		if strings.HasPrefix(e.event, "sandbox.event") {
			got = append(got, e.event+" "+e.data)
		}
	}
	joined := strings.Join(got, "\n")
	for _, want := range []string{`"source":"sandbox","sandbox":"main","kind":"progress","message":"running tests","pct":40`, `"kind":"coverage","data":{"pct":81}`, `sandbox.events_dropped`, `"unknown_kind":1`} {
		if !strings.Contains(joined, want) {
			t.Errorf("the stream's sandbox events lack %s:\n%s", want, joined)
		}
	}
}
