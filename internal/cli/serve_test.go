package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// logWriter sends a command's output to the test log.
type logWriter struct {
	t      *testing.T
	prefix string
}

func (w logWriter) Write(b []byte) (int, error) {
	w.t.Log(w.prefix + strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// airlockIn runs one airlock command in-process on home and returns its
// exit status and stdout.
func airlockIn(t *testing.T, ctx context.Context, home, exe string, stdout io.Writer, args ...string) int {
	t.Helper()
	env := &cli.Env{Env: sandboxcli.Env{Ctx: ctx, Stdin: strings.NewReader(""), Stdout: stdout, Stderr: logWriter{t, args[0] + ": "}, Home: home, Executor: exe, Spawner: true}}
	return cli.Main(env, args)
}

// serving is an airlock serve running in-process.
type serving struct {
	url  string
	stop func() int
}

// startServe starts airlock serve on a free loopback port, with more
// arguments after its own, and returns its URL once it listens; stop shuts
// it down (as SIGTERM does) and returns its exit status.
func startServe(t *testing.T, home, exe string, more ...string) serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	args := append([]string{"serve", "--listen", "127.0.0.1:0", "--workers", "2", "--log-level", "warn"}, more...)
	go func() {
		code := airlockIn(t, ctx, home, exe, pw, args...)
		pw.Close()
		done <- code
	}()
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		cancel()
		t.Fatalf("airlock serve exited with %d before listening", <-done)
	}
	m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+) \(2 workers\)`).FindStringSubmatch(sc.Text())
	if m == nil {
		cancel()
		t.Fatalf("airlock serve said %q", sc.Text())
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	var once sync.Once
	code := 0
	stop := func() int {
		once.Do(func() {
			cancel()
			code = <-done
		})
		return code
	}
	t.Cleanup(func() { stop() })
	return serving{url: m[1], stop: stop}
}

func call(t *testing.T, method, url, key string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

type apiRun struct {
	ID     string `json:"id"`
	Status string `json:"status"`
	Reason string `json:"reason"`
}

func waitRun(t *testing.T, base, key, id string, want ...string) apiRun {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		st, b := call(t, "GET", base+"/v1/runs/"+id, key, nil)
		var r apiRun
		if st != http.StatusOK || json.Unmarshal(b, &r) != nil {
			t.Fatalf("GET run = %d %s", st, b)
		}
		for _, w := range want {
			if r.Status == w {
				return r
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s is %s, want %v", id, r.Status, want)
		}
		time.Sleep(100 * time.Millisecond) // within the key's rate limit
	}
}

// waitRunEvent waits until run id's log, read through the API, has an
// event of type typ.
func waitRunEvent(t *testing.T, base, key, id, typ string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st, b := call(t, "GET", base+"/v1/runs/"+id+"/events", key, nil)
		var page struct {
			Events []struct {
				Type string `json:"type"`
			} `json:"events"`
		}
		if st != http.StatusOK || json.Unmarshal(b, &page) != nil {
			t.Fatalf("GET events = %d %s", st, b)
		}
		for _, e := range page.Events {
			if e.Type == typ {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("run %s: no %s event in a minute", id, typ)
		}
		time.Sleep(100 * time.Millisecond) // within the key's rate limit
	}
}

// TestServe: airlock serve authenticates a tenant's key, creates and drives
// a scripted run in a real sandbox, serves its patch; shut down mid-run
// it leaves the run resumable, and the next airlock serve finishes it.
//
// The servers trust their tenants' policies (trust_tenant_policies), so a
// run's policy may mount a host directory, signal, into its sandbox: the
// run shut down mid-run waits for a file there that the test makes only
// once the server has stopped, so the shutdown always lands while the
// command runs, whatever the load. Its drain may wait for the step in
// flight for shutdown_timeout (1s here, not 30s), then cuts it; the next
// server runs the command again, which finds the file and ends at once.
func TestServe(t *testing.T) {
	home, exe := serveHome(t, "alh-")
	ctx := context.Background()
	if code := airlockIn(t, ctx, home, exe, io.Discard, "tenants", "create", "acme"); code != 0 {
		t.Fatalf("tenants create: %d", code)
	}
	var keyOut bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &keyOut, "keys", "create", "--tenant", "acme", "--name", "ci"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	key := strings.TrimSpace(keyOut.String())
	signal := t.TempDir()
	conf := filepath.Join(t.TempDir(), "serve.yaml")
	if err := os.WriteFile(conf, []byte("shutdown_timeout: 1s\napi:\n  trust_tenant_policies: true\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	s := startServe(t, home, exe, "--config", conf)
	if st, _ := call(t, "GET", s.url+"/v1/runs", "airlock_"+strings.Repeat("0", 48), nil); st != http.StatusUnauthorized {
		t.Errorf("unknown key = %d", st)
	}
	script := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"echo hi > out.txt\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	st, b := call(t, "POST", s.url+"/v1/runs", key, map[string]any{"task": "write", "script": script})
	var run apiRun
	if st != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	waitRun(t, s.url, key, run.ID, "completed")
	if st, b := call(t, "GET", s.url+"/v1/runs/"+run.ID+"/artifacts/patch.diff", key, nil); st != http.StatusOK || !strings.Contains(string(b), "+hi") {
		t.Errorf("patch = %d %q", st, b)
	}

	// Shut down while a run's command runs in its sandbox: it stays
	// running, resumable, and the next server's workers finish it. The
	// command waits for /signal/go, which the test makes only after the
	// server has stopped: were the command to end first, the run would
	// complete, which a sleep raced (runs_live.txtar's pause lost that
	// race at load 30 with 4 s). timeout bounds the wait, so a shutdown
	// that never lands fails the test instead of hanging it.
	slow := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: 'timeout 60 sh -c \"until [ -e /signal/go ]; do sleep 0.05; done\"; echo waited'}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	mount := "sandbox:\n  mounts:\n    - {source: " + signal + ", target: /signal}\n"
	st, b = call(t, "POST", s.url+"/v1/runs", key, map[string]any{"task": "slow", "script": slow, "policy_document": mount})
	if st != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	waitRun(t, s.url, key, run.ID, "running")
	waitRunEvent(t, s.url, key, run.ID, "tool.started")
	if code := s.stop(); code != 0 {
		t.Fatalf("airlock serve exited %d on shutdown", code)
	}
	if err := os.WriteFile(filepath.Join(signal, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var ls bytes.Buffer
	airlockIn(t, ctx, home, exe, &ls, "runs", "ls", "--json")
	if !strings.Contains(ls.String(), fmt.Sprintf(`"id":%q,"tenant":"acme","status":"running"`, run.ID)) {
		t.Fatalf("after shutdown the run is not left running:\n%s", ls.String())
	}
	s2 := startServe(t, home, exe, "--config", conf)
	waitRun(t, s2.url, key, run.ID, "completed")
	if code := s2.stop(); code != 0 {
		t.Errorf("second airlock serve exited %d", code)
	}
}

// serveHome skips unless root, and returns a fresh AIRLOCK_HOME (a short
// path: egress sockets live under it) and an executor of the test's own
// (TestScripts removes the shared one when it ends); both go, with the
// sandboxes' cgroup parent, when the test ends.
func serveHome(t *testing.T, prefix string) (home, exe string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root for real sandboxes")
	}
	exe, remove, err := sandboxtest.BuildExecutor()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(remove)
	if home, err = os.MkdirTemp("", prefix); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = linux.Forget(filepath.Join(home, "run"))
		os.RemoveAll(home)
	})
	return home, exe
}
