package host

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/api"
)

// TestDrainGate: before drain every request reaches the API; after it,
// readiness and the requests that start new work are answered 503 in the
// API's error shape, and the rest still reaches the API.
func TestDrainGate(t *testing.T) {
	gate := &drainGate{next: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})}
	ts := httptest.NewServer(gate)
	defer ts.Close()
	tests := []struct {
		method, path string
		refused      bool
	}{
		{"GET", "/readyz", true},
		{"GET", "/healthz", false},
		{"POST", "/v1/runs", true},
		{"POST", "/v1/uploads", true},
		{"POST", "/v1/runs/run_01J0000000000000000000000A/fork", true},
		{"POST", "/v1/runs/run_01J0000000000000000000000A/resume", false},
		{"POST", "/v1/runs/run_01J0000000000000000000000A/cancel", false},
		{"POST", "/v1/runs/run_01J0000000000000000000000A/pause", false},
		{"GET", "/v1/runs", false},
		{"GET", "/v1/runs/run_01J0000000000000000000000A/events/stream", false},
		{"GET", "/v1/runs/run_01J0000000000000000000000A/artifacts/fork", false},
		{"POST", "/v1/approvals/x/approve", false},
	}
	do := func(method, path string) (int, []byte) {
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for _, tt := range tests {
		if st, _ := do(tt.method, tt.path); st != http.StatusTeapot {
			t.Errorf("%s %s before the drain = %d, want it served", tt.method, tt.path, st)
		}
	}
	gate.drain()
	for _, tt := range tests {
		st, b := do(tt.method, tt.path)
		if !tt.refused {
			if st != http.StatusTeapot {
				t.Errorf("%s %s while draining = %d, want it served", tt.method, tt.path, st)
			}
			continue
		}
		var eb api.ErrorBody
		if st != http.StatusServiceUnavailable || json.Unmarshal(b, &eb) != nil || eb.Code != api.CodeUnavailable || !strings.HasPrefix(eb.RequestID, "req_") {
			t.Errorf("%s %s while draining = %d %s, want 503 unavailable", tt.method, tt.path, st, b)
		}
	}
}
