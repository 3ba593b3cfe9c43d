package sandboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// eventLog collects what an events stream reports.
type eventLog struct {
	t      *testing.T
	closed chan struct{}
	drain  func()

	mu    sync.Mutex
	lines []string           // guarded by mu
	drops sandbox.EventDrops // guarded by mu: the latest counts
	wake  chan struct{}
}

func eventSource(t *testing.T, sb sandbox.Sandbox) sandbox.EventSource {
	t.Helper()
	es, ok := sb.(sandbox.EventSource)
	if !ok {
		t.Skipf("%T does not implement sandbox.EventSource", sb)
	}
	return es
}

// startEvents reads sb's events until the test ends.
func startEvents(t *testing.T, sb sandbox.Sandbox) *eventLog {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, drain, err := eventSource(t, sb).Events(ctx)
	if err != nil {
		cancel()
		t.Fatalf("Events = %v", err)
	}
	l := collectEvents(t, ch)
	l.drain = drain
	t.Cleanup(func() {
		cancel()
		<-l.closed
	})
	return l
}

// collectEvents reads ch into an eventLog until ch is closed.
func collectEvents(t *testing.T, ch <-chan sandbox.EventLine) *eventLog {
	l := &eventLog{t: t, closed: make(chan struct{}), wake: make(chan struct{}, 1)}
	go func() {
		defer close(l.closed)
		for ev := range ch {
			l.mu.Lock()
			if ev.Drops != nil {
				l.drops = *ev.Drops
			} else {
				l.lines = append(l.lines, string(ev.Line))
			}
			l.mu.Unlock()
			select {
			case l.wake <- struct{}{}:
			default:
			}
		}
	}()
	return l
}

func (l *eventLog) get() ([]string, sandbox.EventDrops) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...), l.drops
}

// drained drains the stream and waits for its end: every line written
// through airlock-event by a command that has ended is then received or
// counted as dropped.
func (l *eventLog) drained() ([]string, sandbox.EventDrops) {
	l.t.Helper()
	l.drain()
	select {
	case <-l.closed:
	case <-time.After(opTimeout):
		l.t.Fatalf("the events stream did not end within %v of a drain", opTimeout)
	}
	return l.get()
}

func (s *suite) testEvents(t *testing.T) {
	t.Run("Helper", func(t *testing.T) {
		// airlock-event is on PATH for the default user and writes one
		// JSON line per call; relative artifact paths are resolved.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		l := startEvents(t, sb)
		mustSh(t, sb, `cd /workspace && airlock-event progress --pct 40 "running tests" &&
			airlock-event log --level warn 'careful' && airlock-event metric latency 1.5 --unit s &&
			airlock-event artifact report.html --type text/html && airlock-event test --name t1 --status pass --duration 250ms &&
			airlock-event emit coverage '{"pct": 81}' && printf '{"kind":"log","message":"direct"}\n' | airlock-event lines`)
		lines, drops := l.drained()
		want := []map[string]any{
			{"kind": "progress", "pct": 40.0, "message": "running tests"},
			{"kind": "log", "level": "warn", "message": "careful"},
			{"kind": "metric", "name": "latency", "value": 1.5, "unit": "s"},
			{"kind": "artifact", "path": "/workspace/report.html", "type": "text/html"},
			{"kind": "test", "name": "t1", "status": "pass", "duration_s": 0.25},
			{"kind": "coverage", "data": map[string]any{"pct": 81.0}},
			{"kind": "log", "message": "direct"},
		}
		if len(lines) != len(want) {
			t.Fatalf("got %d lines %q, want %d", len(lines), lines, len(want))
		}
		for i, line := range lines {
			var got map[string]any
			if err := json.Unmarshal([]byte(line), &got); err != nil {
				t.Fatalf("line %d %q: %v", i, line, err)
			}
			if g, w := fmt.Sprint(got), fmt.Sprint(want[i]); g != w {
				t.Errorf("line %d = %s, want %s", i, g, w)
			}
		}
		if drops.Total() != 0 {
			t.Errorf("drops = %+v, want none", drops)
		}
		_, errOut, r := sh(t, sb, "airlock-event progress --bogus 1 x")
		wantExit(t, "airlock-event with an unknown flag", r, 2, errOut)
	})

	t.Run("ReadOnly", func(t *testing.T) {
		// The socket's directory and the helper cannot be changed, by
		// root either.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		for _, script := range []string{
			"touch /run/airlock/x", "rm -f " + execproto.EventSocket, "echo x > " + execproto.EventHelper,
			"mv " + execproto.EventSocket + " /run/airlock/y",
		} {
			for _, user := range []string{"", "root"} {
				_, errOut, r := runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", script}, User: user})
				if r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 {
					t.Errorf("%q as %q succeeded, want a failure (stderr %q)", script, user, errOut)
				}
			}
		}
	})

	t.Run("Oversize", func(t *testing.T) {
		// A line longer than MaxEventLine is dropped whole and counted;
		// the lines around it pass.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		l := startEvents(t, sb)
		mustSh(t, sb, fmt.Sprintf(`{ echo before; head -c %d /dev/zero | tr '\0' x; echo; echo after; } | airlock-event lines`, execproto.MaxEventLine+1))
		lines, drops := l.drained()
		if strings.Join(lines, ",") != "before,after" || drops != (sandbox.EventDrops{Oversize: 1}) {
			t.Errorf("lines %q, drops %+v; want before and after, one oversize drop", lines, drops)
		}
	})

	t.Run("Flood", func(t *testing.T) {
		// 100000 lines as fast as a shell writes them: the rate limit
		// holds, every line is received or counted, and the sandbox's
		// other commands run meanwhile.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		l := startEvents(t, sb)
		const n = 100000
		start := time.Now()
		flood := make(chan error, 1)
		script := fmt.Sprintf(`yes '{"kind":"log","message":"flood"}' | head -n %d | airlock-event lines`, n)
		ctx := opCtx(t)
		go func() {
			_, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", script}})
			flood <- err
		}()
		if out := mustSh(t, sb, "echo still-working"); out != "still-working\n" {
			t.Errorf("a command beside the flood printed %q", out)
		}
		if err := <-flood; err != nil {
			t.Fatalf("flood: %v", err)
		}
		lines, drops := l.drained()
		elapsed := time.Since(start)
		if got := int64(len(lines)) + drops.Total(); got != n {
			t.Errorf("received %d lines and %+v dropped, sum %d; want %d", len(lines), drops, got, n)
		}
		if bound := execproto.EventBurst + int(elapsed.Seconds()*execproto.EventRate) + 1; len(lines) > bound {
			t.Errorf("received %d lines in %v; the rate limit allows %d", len(lines), elapsed, bound)
		}
		if drops.Rate == 0 {
			t.Errorf("drops = %+v, want lines dropped by the rate limit", drops)
		}
	})

	t.Run("Connections", func(t *testing.T) {
		// Connections beyond MaxEventConns are closed at once and
		// counted; those within keep working.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		if _, _, r := sh(t, sb, "command -v python3"); r.ExitCode != 0 {
			t.Skip("no python3 in the sandbox to hold connections open")
		}
		l := startEvents(t, sb)
		extra := 6
		mustSh(t, sb, fmt.Sprintf(`python3 - <<'EOF'
import socket
conns = []
for i in range(%d):
    c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    c.connect(%q)
    conns.append(c)
# The executor accepts in order: the last ones are over the limit, and
# it closes them (EOF) while the first ones stay open.
for c in conns[%d:]:
    assert c.recv(1) == b""
for i, c in enumerate(conns[:%d]):
    c.sendall(b'{"kind":"log","message":"conn %%d"}\n' %% i)
    c.shutdown(socket.SHUT_WR)
    assert c.recv(1) == b""
EOF`, execproto.MaxEventConns+extra, execproto.EventSocket, execproto.MaxEventConns, execproto.MaxEventConns))
		lines, drops := l.drained()
		if len(lines) != execproto.MaxEventConns || drops != (sandbox.EventDrops{Conns: int64(extra)}) {
			t.Errorf("%d lines, drops %+v; want %d lines and %d connections refused", len(lines), drops, execproto.MaxEventConns, extra)
		}
	})

	t.Run("QueueBytes", func(t *testing.T) {
		// Long lines while the host does not read: the executor's queue
		// holds MaxEventQueueBytes, not MaxEventQueue lines of any
		// length, and counts the rest.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, drain, err := eventSource(t, sb).Events(ctx)
		if err != nil {
			t.Fatalf("Events = %v", err)
		}
		const n = 200 // lines of 15000 bytes: 3 MB
		mustSh(t, sb, fmt.Sprintf(`yes "$(head -c 15000 /dev/zero | tr '\0' x)" | head -n %d | airlock-event lines`, n))
		l := collectEvents(t, ch)
		l.drain = drain
		defer func() { cancel(); <-l.closed }()
		lines, drops := l.drained()
		if got := int64(len(lines)) + drops.Total(); got != n || drops.Queue == 0 || drops.Queue != drops.Total() {
			t.Errorf("received %d lines, drops %+v; want %d in all, the drops the queue's", len(lines), drops, n)
		}
		if most := (execproto.Window+execproto.MaxEventQueueBytes)/15000 + 2; len(lines) > most {
			t.Errorf("received %d lines of 15000 bytes; the window and the queue hold %d", len(lines), most)
		}
	})

	t.Run("NoReader", func(t *testing.T) {
		// A host that does not read for a while: writers do not wait,
		// lines beyond the stream's window queue in the executor, and
		// once the host reads, every line is received or counted.
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, drain, err := eventSource(t, sb).Events(ctx)
		if err != nil {
			t.Fatalf("Events = %v", err)
		}
		const n = 5000 // lines of 1 KiB: more than a window holds
		mustSh(t, sb, fmt.Sprintf(`yes '{"kind":"log","message":"%s"}' | head -n %d | airlock-event lines`, strings.Repeat("u", 1000), n))
		mustSh(t, sb, "echo still-working")
		l := collectEvents(t, ch)
		l.drain = drain
		defer func() { cancel(); <-l.closed }()
		lines, drops := l.drained()
		if got := int64(len(lines)) + drops.Total(); got != n {
			t.Errorf("received %d lines and %+v dropped; want %d in all", len(lines), drops, n)
		}
		if drops.Total() == 0 {
			t.Errorf("drops = %+v, want some", drops)
		}
	})
}
