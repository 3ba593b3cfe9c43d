package e2b_test

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"
)

// TestSDKMemoryPause drives the newest SDK through pause() with its
// default (memory kept) and keepMemory: false, and an auto-pause at the
// timeout that a request resumes (testdata/pause.js).
func TestSDKMemoryPause(t *testing.T) {
	needRoot(t)
	node := needNode(t)
	dir := installSDKs(t)
	h := newHarness(t, harnessOptions{})
	script, err := filepath.Abs("testdata/pause.js")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	h.runNode(t, node, 2*time.Minute, "alpha", &got, script, filepath.Join(dir, "node_modules", "e2b"))
	for _, tt := range []struct{ key, want string }{
		{"running", `false`},
		{"paused", `["paused","memory"]`},
		{"resumed", `[true,"memory"]`},
		{"samePid", `true`},
		{"counterKept", `true`},
		{"counting", `true`},
		{"inflight", `[0,"after the resume\n"]`},
		{"connected", `true`},
		{"fsPaused", `"filesystem"`},
		{"fsResumed", `"filesystem"`},
		{"fsPidGone", `true`},
		{"fsFileKept", `["kept",false]`},
		{"autoPaused", `["paused","memory"]`},
		{"autoResumed", `true`},
		{"autoState", `"running"`},
	} {
		if g := string(got[tt.key]); g != tt.want {
			t.Errorf("%s = %s, want %s", tt.key, g, tt.want)
		}
	}
}
