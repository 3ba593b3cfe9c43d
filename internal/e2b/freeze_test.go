package e2b_test

import (
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/e2b"
)

// pauseInfo is getInfo's pause and resume fields.
type pauseInfo struct {
	State, PauseKind, PauseNote, ResumeKind, ResumeNote string
}

func (h *harness) pauseInfo(s sbx) pauseInfo {
	h.t.Helper()
	var i pauseInfo
	res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil)
	if err := json.Unmarshal(res.body, &i); err != nil || res.status != 200 {
		h.t.Fatalf("info: %s", res)
	}
	return i
}

// counter is a shell counting in its own memory, writing each value out.
const counter = `i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.05; done`

// readCounter reads s's counter (0 before its first write).
func (h *harness) readCounter(s sbx) int {
	h.t.Helper()
	res := h.do("GET", h.envdURL+"/files?path="+url.QueryEscape("/tmp/counter"), envdHeaders(s), nil)
	if res.status != 200 {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(res.body)))
	return n
}

func (h *harness) waitCounter(s sbx, over int) int {
	h.t.Helper()
	var c int
	waitFor(h.t, "the counter to pass "+strconv.Itoa(over), func() bool { c = h.readCounter(s); return c > over })
	return c
}

// processes lists s's process ids.
func (h *harness) processes(s sbx) []int {
	h.t.Helper()
	var l struct {
		Processes []struct {
			PID int `json:"pid"`
		} `json:"processes"`
	}
	_ = json.Unmarshal(h.unary(s, "process.Process/List", map[string]any{}).body, &l)
	var out []int
	for _, p := range l.Processes {
		out = append(out, p.PID)
	}
	return out
}

func (h *harness) pause(s sbx, body map[string]any) (kind, note string) {
	h.t.Helper()
	res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", body)
	if res.status != 204 {
		h.t.Fatalf("pause %v: %s", body, res)
	}
	return res.header.Get("Airlock-Pause-Kind"), res.header.Get("Airlock-Pause-Note")
}

func (h *harness) resume(s sbx) string {
	h.t.Helper()
	res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 120})
	if res.status != 201 {
		h.t.Fatalf("resume: %s", res)
	}
	return res.header.Get("Airlock-Resume-Kind")
}

// TestMemoryPause: pause() with memory (the SDKs' default) freezes the
// sandbox: a resume finds the same processes, with their PIDs and memory,
// and a command in flight at the pause ends after the resume as it would
// have. memory: false pauses files only: the processes end.
func TestMemoryPause(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	h.streamStarted(s, "process.Process/Start", bash(counter))
	pid := h.onlyProcess(s, "the counter")
	before := h.waitCounter(s, 2)
	inflight := h.streamStarted(s, "process.Process/Start", bash("sleep 1; echo after the resume"))
	for _, body := range []map[string]any{{"memory": true}, {}} {
		kind, note := h.pause(s, body)
		if kind != "memory" || note != "" {
			t.Fatalf("pause %v = kind %q note %q, want memory", body, kind, note)
		}
		if i := h.pauseInfo(s); i.State != "paused" || i.PauseKind != "memory" {
			t.Errorf("info while paused = %+v, want paused, pauseKind memory", i)
		}
		if res := h.do("GET", h.envdURL+"/health", envdHeaders(s), nil); res.status != 502 {
			t.Errorf("health while paused = %s, want 502", res)
		}
		time.Sleep(200 * time.Millisecond) // the sleep in flight runs out meanwhile
		if kind := h.resume(s); kind != "memory" {
			t.Fatalf("resume kind = %q, want memory", kind)
		}
		if i := h.pauseInfo(s); i.State != "running" || i.ResumeKind != "memory" || i.PauseKind != "" {
			t.Errorf("info after the resume = %+v, want running, resumeKind memory", i)
		}
		// The same process counts on from where it stood: a new one
		// would have another pid and start at 1.
		if ps := h.processes(s); !containsInt(ps, pid) {
			t.Fatalf("processes after the resume = %v, want the counter's pid %d", ps, pid)
		}
		c := h.readCounter(s)
		if c < before {
			t.Fatalf("counter after the resume = %d, was %d before the pause: not the same process's memory", c, before)
		}
		before = h.waitCounter(s, c)
	}
	if r := parseRun(t, inflight()); r.stdout != "after the resume\n" || r.exit != 0 {
		t.Errorf("command in flight across the pauses = %+v, want it to end after the resume", r)
	}
	// Files only: the processes end, the files stay.
	if kind, _ := h.pause(s, map[string]any{"memory": false}); kind != "filesystem" {
		t.Errorf("pause memory false = %q, want filesystem", kind)
	}
	if i := h.pauseInfo(s); i.PauseKind != "filesystem" {
		t.Errorf("info = %+v, want pauseKind filesystem", i)
	}
	if kind := h.resume(s); kind != "filesystem" {
		t.Errorf("resume kind = %q, want filesystem", kind)
	}
	if ps := h.processes(s); len(ps) != 0 {
		t.Errorf("processes after a filesystem pause = %v, want none", ps)
	}
	// A fresh boot: /tmp is not the workspace a filesystem pause keeps.
	if c := h.readCounter(s); c != 0 {
		t.Errorf("counter file in /tmp after a filesystem pause = %d, want none (a fresh boot)", c)
	}
	// A frozen sandbox is killed as a running one is.
	h.streamStarted(s, "process.Process/Start", bash(counter))
	h.onlyProcess(s, "the counter")
	if kind, _ := h.pause(s, nil); kind != "memory" {
		t.Fatalf("pause = %q, want memory", kind)
	}
	if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 204 {
		t.Fatalf("kill of a frozen sandbox = %s, want 204", res)
	}
	if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); res.status != 404 {
		t.Errorf("info of a killed frozen sandbox = %s, want 404", res)
	}
}

func containsInt(s []int, n int) bool {
	for _, v := range s {
		if v == n {
			return true
		}
	}
	return false
}

// TestMemoryPauseLost: a server killed while a sandbox is paused with
// memory takes its frozen processes with it (a killed process's sandboxes
// die with it); the next server resumes the sandbox from the checkpoint
// the pause took, and says so.
func TestMemoryPauseLost(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.createRaw("alpha", nil)
	oct := envdHeaders(s)
	oct["Content-Type"] = "application/octet-stream"
	if res := h.do("POST", h.envdURL+"/files?path=keep.txt", oct, strings.NewReader("kept\n")); res.status != 200 {
		t.Fatalf("write: %s", res)
	}
	h.streamStarted(s, "process.Process/Start", bash(counter))
	h.onlyProcess(s, "the counter")
	if kind, _ := h.pause(s, nil); kind != "memory" {
		t.Fatalf("pause = %q, want memory", kind)
	}
	h.serve(t, harnessOptions{}, h.store)
	i := h.pauseInfo(s)
	if i.State != "paused" || i.PauseKind != "filesystem" || !strings.Contains(i.PauseNote, "stopped") {
		t.Errorf("info after the restart = %+v, want paused, pauseKind filesystem and why", i)
	}
	if kind := h.resume(s); kind != "filesystem" {
		t.Errorf("resume kind = %q, want filesystem", kind)
	}
	if i := h.pauseInfo(s); i.ResumeKind != "filesystem" || i.ResumeNote == "" {
		t.Errorf("info after the resume = %+v, want resumeKind filesystem and why", i)
	}
	if res := h.do("GET", h.envdURL+"/files?path=keep.txt", envdHeaders(s), nil); res.status != 200 || string(res.body) != "kept\n" {
		t.Errorf("file after the fallback resume = %s, want kept", res)
	}
	if ps := h.processes(s); len(ps) != 0 {
		t.Errorf("processes after the fallback = %v, want none", ps)
	}
	h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil)
}

// TestMemoryPausePolicy: how long a memory pause may hold RAM, and the
// host's memory pressure, degrade it to the filesystem pause it took.
func TestMemoryPausePolicy(t *testing.T) {
	tests := []struct {
		name     string
		config   e2b.Config
		pressure bool          // the host's memory is short at the pause
		advance  time.Duration // then the clock moves, and the reaper runs
		kind     string        // what the pause kept
		after    string        // pauseKind after the reaper
		note     string        // in pauseNote
	}{
		{"kept", e2b.Config{MemoryPauseMax: time.Hour}, false, time.Minute, "memory", "memory", ""},
		{"past memory_pause_max", e2b.Config{MemoryPauseMax: time.Minute}, false, 2 * time.Minute, "memory", "filesystem", "memory_pause_max"},
		{"memory pressure at the pause", e2b.Config{}, true, 0, "filesystem", "filesystem", "memory pressure"},
		{"memory pauses off", e2b.Config{MemoryPauseMax: -1}, false, 0, "filesystem", "filesystem", "no memory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clk := clock.NewFake(time.Now())
			h := newHarness(t, harnessOptions{clock: clk, config: tt.config})
			s := h.create("alpha", nil)
			h.streamStarted(s, "process.Process/Start", bash(counter))
			pid := h.onlyProcess(s, "the counter")
			if tt.pressure {
				h.srv.SetMemInfo(func() (int64, int64, error) { return 1 << 20, 100 << 20, nil })
			} else {
				h.srv.SetMemInfo(func() (int64, int64, error) { return 90 << 20, 100 << 20, nil })
			}
			kind, note := h.pause(s, nil)
			if kind != tt.kind {
				t.Fatalf("pause = %q (%s), want %s", kind, note, tt.kind)
			}
			clk.Advance(tt.advance)
			h.srv.Reap(t.Context())
			i := h.pauseInfo(s)
			if i.PauseKind != tt.after || !strings.Contains(i.PauseNote, tt.note) {
				t.Errorf("info = %+v, want pauseKind %s, a note with %q", i, tt.after, tt.note)
			}
			if kind := h.resume(s); kind != tt.after {
				t.Errorf("resume kind = %q, want %s", kind, tt.after)
			}
			if got := h.processes(s); tt.after == "memory" != containsInt(got, pid) {
				t.Errorf("processes after the resume = %v (counter was %d), want it kept only by a memory pause", got, pid)
			}
		})
	}
}
