package e2b_test

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// watchMsg is a decoded WatchDirResponse.
type watchMsg struct {
	Start      *struct{} `json:"start"`
	Filesystem *struct {
		Name  string `json:"name"`
		Type  string `json:"type"`
		Entry *struct {
			Type string `json:"type"`
			Path string `json:"path"`
		} `json:"entry"`
	} `json:"filesystem"`
	Keepalive *struct{} `json:"keepalive"`
}

// liveStream is a server-streaming call read as it comes.
type liveStream struct {
	t    *testing.T
	res  *http.Response
	msgs chan frame // closed at the end of the body
}

// openStream starts a server-streaming call and reads its envelopes in the
// background; the test ends it by closing it (or the server does).
func (h *harness) openStream(s sbx, method string, msg any, extra map[string]string) *liveStream {
	h.t.Helper()
	b, _ := json.Marshal(msg)
	req, err := http.NewRequest("POST", h.envdURL+"/"+method, bytes.NewReader(envelope(0, b)))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range envdHeaders(s) {
		req.Header.Set(k, v)
	}
	req.Header.Set("Content-Type", "application/connect+json")
	req.Header.Set("Connect-Protocol-Version", "1")
	for k, v := range extra {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		h.t.Fatalf("%s: %d %s", method, res.StatusCode, body)
	}
	ls := &liveStream{t: h.t, res: res, msgs: make(chan frame, 64)}
	go func() {
		defer close(ls.msgs)
		for {
			var hdr [5]byte
			if _, err := io.ReadFull(res.Body, hdr[:]); err != nil {
				return
			}
			m := make([]byte, binary.BigEndian.Uint32(hdr[1:]))
			if _, err := io.ReadFull(res.Body, m); err != nil {
				return
			}
			ls.msgs <- frame{flags: hdr[0], msg: m}
		}
	}()
	h.t.Cleanup(ls.close)
	return ls
}

func (ls *liveStream) close() { ls.res.Body.Close() }

// next returns the next envelope; ok is false at the end of the stream.
// The bound is on a hang, not a speed.
func (ls *liveStream) next() (frame, bool) {
	ls.t.Helper()
	select {
	case f, ok := <-ls.msgs:
		return f, ok
	case <-time.After(30 * time.Second):
		ls.t.Fatal("no envelope within 30s")
		return frame{}, false
	}
}

// until reads events until one named name of type typ arrives, and
// returns the events read; it fails the test if the stream ends first.
func (ls *liveStream) until(name, typ string) []watchMsg {
	ls.t.Helper()
	var seen []watchMsg
	for {
		f, ok := ls.next()
		if !ok || f.flags != 0 {
			ls.t.Fatalf("the stream ended (%s) before %s %s; saw %+v", f.msg, typ, name, seen)
		}
		var m watchMsg
		if err := json.Unmarshal(f.msg, &m); err != nil {
			ls.t.Fatalf("message %s: %v", f.msg, err)
		}
		seen = append(seen, m)
		if m.Filesystem != nil && m.Filesystem.Name == name && m.Filesystem.Type == typ {
			return seen
		}
	}
}

// end reads until the end-stream envelope and returns its JSON.
func (ls *liveStream) end() string {
	ls.t.Helper()
	for {
		f, ok := ls.next()
		if !ok {
			ls.t.Fatal("the body ended without an end-stream envelope")
		}
		if f.flags == 2 {
			return string(f.msg)
		}
	}
}

// run runs a shell script in s and fails the test unless it exits 0.
func (h *harness) run(s sbx, script string) {
	h.t.Helper()
	r := parseRun(h.t, h.stream(s, "process.Process/Start", bash(script), nil))
	if r.exit != 0 || !r.ended {
		h.t.Fatalf("%q: %+v", script, r)
	}
}

func TestWatchDir(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	h.run(s, "mkdir -p /workspace/w/old /workspace/gone")

	t.Run("events", func(t *testing.T) {
		ls := h.openStream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": "w", "recursive": true},
			map[string]string{"Connect-Timeout-Ms": "60000", "Keepalive-Ping-Interval": "50"})
		if f, ok := ls.next(); !ok || string(f.msg) != `{"start":{}}` {
			t.Fatalf("first message %s, want {\"start\":{}}", f.msg)
		}
		h.run(s, "cd /workspace/w && echo a > f && chmod 600 f && mv f g && rm g && mkdir -p new/deep && echo x > new/deep/h && echo y > old/i")
		seen := ls.until("old/i", "EVENT_TYPE_CREATE")
		want := map[string]bool{
			"f EVENT_TYPE_CREATE": false, "f EVENT_TYPE_WRITE": false, "f EVENT_TYPE_CHMOD": false,
			"f EVENT_TYPE_RENAME": false, "g EVENT_TYPE_CREATE": false, "g EVENT_TYPE_REMOVE": false, "new EVENT_TYPE_CREATE": false,
			"new/deep/h EVENT_TYPE_CREATE": false,
		}
		for _, m := range seen {
			if m.Filesystem != nil {
				want[m.Filesystem.Name+" "+m.Filesystem.Type] = true
			}
		}
		for k, ok := range want {
			if !ok {
				t.Errorf("no event %s; saw %+v", k, seen)
			}
		}
	})

	t.Run("not recursive, with entries", func(t *testing.T) {
		ls := h.openStream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace/w", "includeEntry": true}, nil)
		ls.next()
		h.run(s, "echo deep > /workspace/w/old/j && mkdir /workspace/w/top")
		seen := ls.until("top", "EVENT_TYPE_CREATE")
		last := seen[len(seen)-1].Filesystem
		if last.Entry == nil || last.Entry.Type != "FILE_TYPE_DIRECTORY" || last.Entry.Path != "/workspace/w/top" {
			t.Errorf("event %+v, want an entry for the new directory", last)
		}
		for _, m := range seen {
			if m.Filesystem != nil && strings.HasPrefix(m.Filesystem.Name, "old/") {
				t.Errorf("a watch that is not recursive reported %+v", m.Filesystem)
			}
		}
	})

	t.Run("keepalive and deadline", func(t *testing.T) {
		ls := h.openStream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace/w"},
			map[string]string{"Keepalive-Ping-Interval": "1", "Connect-Timeout-Ms": "2500"})
		ls.next()
		keepalives := 0
		for {
			f, ok := ls.next()
			if !ok {
				t.Fatal("no end-stream envelope")
			}
			if f.flags == 2 {
				if !strings.Contains(string(f.msg), "deadline_exceeded") {
					t.Errorf("end-stream %s, want deadline_exceeded", f.msg)
				}
				break
			}
			if string(f.msg) == `{"keepalive":{}}` {
				keepalives++
			}
		}
		if keepalives == 0 {
			t.Error("no keepalive on an idle watch")
		}
	})

	t.Run("directory removed", func(t *testing.T) {
		ls := h.openStream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace/gone"}, nil)
		ls.next()
		h.run(s, "rmdir /workspace/gone")
		if end := ls.end(); end != "{}" {
			t.Errorf("end-stream %s, want a clean end once the directory is removed", end)
		}
	})

	t.Run("bad paths", func(t *testing.T) {
		h.run(s, "echo x > /workspace/file")
		tests := []struct {
			path string
			code string
		}{
			{"", "invalid_argument"},
			{"/workspace/missing", "not_found"},
			{"/workspace/file", "not_found"},
			{"a\x00b", "invalid_argument"},
			{"/" + strings.Repeat("a", 5000), "invalid_argument"},
		}
		for _, tt := range tests {
			frames := h.stream(s, "filesystem.Filesystem/WatchDir", map[string]any{"path": tt.path}, nil)
			last := frames[len(frames)-1]
			if len(frames) != 1 || last.flags != 2 || !strings.Contains(string(last.msg), `"code":"`+tt.code+`"`) {
				t.Errorf("WatchDir(%.20q) = %d messages ending %s, want only an end-stream with %s", tt.path, len(frames), last.msg, tt.code)
			}
		}
	})

	t.Run("sandbox killed", func(t *testing.T) {
		other := h.create("alpha", nil)
		ls := h.openStream(other, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace"}, nil)
		ls.next()
		if res := h.api("alpha", "DELETE", "/sandboxes/"+other.ID, nil); res.status != 204 {
			t.Fatalf("kill: %s", res)
		}
		if end := ls.end(); !strings.Contains(end, "unavailable") {
			t.Errorf("end-stream %s, want unavailable once the sandbox is gone", end)
		}
	})

	t.Run("limit", func(t *testing.T) {
		// A sandbox runs at most 32 watches at once (its executor's
		// bound); the next is refused, and one ending makes room.
		lim := h.create("alpha", nil)
		var open []*liveStream
		for range 32 {
			ls := h.openStream(lim, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace"}, nil)
			if f, ok := ls.next(); !ok || string(f.msg) != `{"start":{}}` {
				t.Fatalf("watch %d: first message %s", len(open)+1, f.msg)
			}
			open = append(open, ls)
		}
		frames := h.stream(lim, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace"}, nil)
		if last := frames[len(frames)-1]; len(frames) != 1 || !strings.Contains(string(last.msg), "resource_exhausted") {
			t.Errorf("watch 33: %d messages ending %s, want resource_exhausted", len(frames), last.msg)
		}
		open[0].close()
		waitFor(t, "room for a watch", func() bool {
			ls := h.openStream(lim, "filesystem.Filesystem/WatchDir", map[string]any{"path": "/workspace"}, nil)
			defer ls.close()
			f, ok := ls.next()
			return ok && string(f.msg) == `{"start":{}}`
		})
	})

	var watches int
	for _, rec := range h.audit.records(t) {
		if rec.Op == "files.watch" && rec.Sandbox == s.ID {
			watches++
		}
	}
	if watches < 5 {
		t.Errorf("%d files.watch audit records, want one per watch", watches)
	}
}

// TestWatchDirOtherSandbox: a watch goes only to the sandbox whose token the
// call carries.
func TestWatchDirOtherSandbox(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	mine := h.create("alpha", nil)
	theirs := h.create("beta", nil)
	stolen := theirs
	stolen.Token = mine.Token
	hd := envdHeaders(stolen)
	hd["Content-Type"] = "application/connect+json"
	b, _ := json.Marshal(map[string]any{"path": "/workspace"})
	if res := h.do("POST", h.envdURL+"/filesystem.Filesystem/WatchDir", hd, bytes.NewReader(envelope(0, b))); res.status != http.StatusBadGateway {
		t.Errorf("WatchDir on beta's sandbox with alpha's token = %s, want 502", res)
	}
}

func TestPollingWatcher(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	other := h.create("alpha", nil)
	h.run(s, "mkdir -p /workspace/p")
	create := func(s sbx, body map[string]any) (string, response) {
		res := h.unary(s, "filesystem.Filesystem/CreateWatcher", body)
		var out struct {
			ID string `json:"watcherId"`
		}
		_ = json.Unmarshal(res.body, &out)
		return out.ID, res
	}
	type polled struct {
		Events []struct {
			Name string `json:"name"`
			Type string `json:"type"`
		} `json:"events"`
	}
	poll := func(s sbx, id string) (polled, response) {
		res := h.unary(s, "filesystem.Filesystem/GetWatcherEvents", map[string]any{"watcherId": id})
		var p polled
		_ = json.Unmarshal(res.body, &p)
		return p, res
	}
	id, res := create(s, map[string]any{"path": "p", "recursive": true})
	if res.status != 200 || len(id) != 32 {
		t.Fatalf("CreateWatcher = %s", res)
	}
	if p, res := poll(s, id); res.status != 200 || string(res.body) != `{"events":[]}` {
		t.Errorf("first poll = %s, %+v; want no events yet", res, p)
	}
	h.run(s, "mkdir /workspace/p/d && echo hi > /workspace/p/d/f")
	var names []string
	waitFor(t, "the polled events", func() bool {
		p, res := poll(s, id)
		if res.status != 200 {
			t.Fatalf("GetWatcherEvents = %s", res)
		}
		for _, e := range p.Events {
			names = append(names, e.Name+" "+e.Type)
		}
		return strings.Contains(strings.Join(names, ","), "d/f EVENT_TYPE_WRITE")
	})
	if names[0] != "d EVENT_TYPE_CREATE" {
		t.Errorf("polled %q, want d's create first", names)
	}

	t.Run("other sandbox", func(t *testing.T) {
		// Another sandbox's watcher id is as unknown as a made-up one.
		for _, sid := range []string{id, strings.Repeat("0", 32), ""} {
			if _, res := poll(other, sid); res.status != 404 || !strings.Contains(string(res.body), "not_found") {
				t.Errorf("GetWatcherEvents(%q) on another sandbox = %s, want not_found", sid, res)
			}
			if res := h.unary(other, "filesystem.Filesystem/RemoveWatcher", map[string]any{"watcherId": sid}); res.status != 404 {
				t.Errorf("RemoveWatcher(%q) on another sandbox = %s, want not_found", sid, res)
			}
		}
	})

	t.Run("bad paths", func(t *testing.T) {
		for _, tt := range []struct {
			path string
			code int
		}{{"", 400}, {"/workspace/missing", 404}, {"a\x00", 400}} {
			if _, res := create(s, map[string]any{"path": tt.path}); res.status != tt.code {
				t.Errorf("CreateWatcher(%q) = %s, want %d", tt.path, res, tt.code)
			}
		}
	})

	t.Run("limit", func(t *testing.T) {
		var ids []string
		for {
			id, res := create(other, map[string]any{"path": "/workspace"})
			if res.status != 200 {
				if res.status != 429 || !strings.Contains(string(res.body), "resource_exhausted") {
					t.Fatalf("CreateWatcher past the limit = %s, want resource_exhausted", res)
				}
				break
			}
			ids = append(ids, id)
			if len(ids) > 100 {
				t.Fatal("no limit on a sandbox's watchers")
			}
		}
		if len(ids) != 16 {
			t.Errorf("%d watchers before the limit, want 16", len(ids))
		}
		// Removing one makes room; the first sandbox's are its own.
		if res := h.unary(other, "filesystem.Filesystem/RemoveWatcher", map[string]any{"watcher_id": ids[0]}); res.status != 200 {
			t.Fatalf("RemoveWatcher = %s", res)
		}
		if _, res := create(other, map[string]any{"path": "/workspace"}); res.status != 200 {
			t.Errorf("CreateWatcher after a removal = %s", res)
		}
		if _, res := poll(other, ids[0]); res.status != 404 {
			t.Errorf("GetWatcherEvents of a removed watcher = %s, want 404", res)
		}
	})

	t.Run("lives through a memory pause", func(t *testing.T) {
		// The boot is frozen and thawed, not replaced: its watchers go on.
		if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
			t.Fatalf("pause: %s", res)
		}
		if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{}); res.status != 201 {
			t.Fatalf("resume: %s", res)
		}
		if _, res := poll(s, id); res.status != 200 {
			t.Errorf("GetWatcherEvents after a memory pause and resume = %s, want 200: the boot is the same", res)
		}
	})

	t.Run("dies with its sandbox", func(t *testing.T) {
		// A filesystem pause ends the boot; the resume is a new one.
		if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{"memory": false}); res.status != 204 {
			t.Fatalf("pause: %s", res)
		}
		if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{}); res.status != 201 {
			t.Fatalf("resume: %s", res)
		}
		if _, res := poll(s, id); res.status != 404 {
			t.Errorf("GetWatcherEvents after the sandbox was paused and resumed = %s, want 404: the watcher died with the boot", res)
		}
	})
}
