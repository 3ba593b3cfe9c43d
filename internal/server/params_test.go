package server_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
)

// TestParamBounds: every whole-number parameter of the API is read with
// the same bounds checks. The largest seq is a valid cursor past the end
// of every log (an empty page; a final run's stream answers 204), one
// past it, negative, signed or non-numeric values are bad requests, and
// an empty one is the default.
func TestParamBounds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "admin")
	queued := h.createRun(key, map[string]any{"task": "stays queued", "script": finishScript})
	ended := h.createRun(key, map[string]any{"task": "is cancelled", "script": finishScript})
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+ended.ID+"/cancel", key, nil)
	h.waitStatus(key, ended.ID, event.StatusCancelled)
	const (
		maxSeq  = "9223372036854775807"
		pastMax = "9223372036854775808"
	)
	events := "/v1/runs/" + queued.ID + "/events"
	stream := "/v1/runs/" + ended.ID + "/events/stream"
	for _, tt := range []struct {
		name    string
		path    string
		headers []string
		status  int
		// events is how many events a 200 page holds; -1: any, but some.
		events int
	}{
		{"events after the largest seq", events + "?after=" + maxSeq, nil, http.StatusOK, 0},
		{"events after one past it", events + "?after=" + pastMax, nil, http.StatusBadRequest, 0},
		{"events after -1", events + "?after=-1", nil, http.StatusBadRequest, 0},
		{"events after +1", events + "?after=%2B1", nil, http.StatusBadRequest, 0},
		{"events after x", events + "?after=x", nil, http.StatusBadRequest, 0},
		{"events after nothing", events + "?after=", nil, http.StatusOK, -1},
		{"events limit 0", events + "?limit=0", nil, http.StatusBadRequest, 0},
		{"events limit past the page", events + "?limit=1001", nil, http.StatusBadRequest, 0},
		{"events limit the largest", events + "?limit=" + maxSeq, nil, http.StatusBadRequest, 0},
		{"events limit one past it", events + "?limit=" + pastMax, nil, http.StatusBadRequest, 0},
		{"events limit 1", events + "?limit=1", nil, http.StatusOK, 1},
		{"stream after the largest seq", stream + "?after=" + maxSeq, nil, http.StatusNoContent, 0},
		{"stream after one past it", stream + "?after=" + pastMax, nil, http.StatusBadRequest, 0},
		{"stream Last-Event-ID the largest", stream, []string{"Last-Event-ID", maxSeq}, http.StatusNoContent, 0},
		{"stream Last-Event-ID one past it", stream, []string{"Last-Event-ID", pastMax}, http.StatusBadRequest, 0},
		{"stream Last-Event-ID -1", stream, []string{"Last-Event-ID", "-1"}, http.StatusBadRequest, 0},
		{"credits after the largest id", "/v1/credits?after=" + maxSeq, nil, http.StatusOK, 0},
		{"credits after one past it", "/v1/credits?after=" + pastMax, nil, http.StatusBadRequest, 0},
		{"credits limit -5", "/v1/credits?limit=-5", nil, http.StatusBadRequest, 0},
		{"runs limit one past the largest", "/v1/runs?limit=" + pastMax, nil, http.StatusBadRequest, 0},
		{"runs limit 501", "/v1/runs?limit=501", nil, http.StatusBadRequest, 0},
		{"runs limit nothing", "/v1/runs?limit=", nil, http.StatusOK, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := h.do("GET", tt.path, key, nil, tt.headers...)
			if r.status != tt.status {
				t.Fatalf("GET %s %v = %d %s, want %d", tt.path, tt.headers, r.status, r.body, tt.status)
			}
			switch {
			case r.status == http.StatusBadRequest:
				if e := r.errBody(t); e.Code != api.CodeBadRequest || !strings.Contains(e.Message, "want a whole number") {
					t.Errorf("GET %s: %+v, want a message naming the bounds", tt.path, e)
				}
			case r.status == http.StatusOK && strings.HasPrefix(tt.path, events):
				var page api.EventPage
				r.json(t, &page)
				if tt.events >= 0 && len(page.Events) != tt.events || tt.events < 0 && len(page.Events) == 0 {
					t.Errorf("GET %s: %d events, want %d", tt.path, len(page.Events), tt.events)
				}
				for _, ev := range page.Events {
					if ev.RunID != queued.ID {
						t.Errorf("GET %s: an event of run %s", tt.path, ev.RunID)
					}
				}
			case r.status == http.StatusOK && strings.HasPrefix(tt.path, "/v1/credits"):
				var c api.Credits
				r.json(t, &c)
				if len(c.Entries) != 0 {
					t.Errorf("GET %s: %d entries, want none", tt.path, len(c.Entries))
				}
			}
		})
	}
}
