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

// startServe starts airlock serve on a free loopback port and returns its
// URL once it listens; stop shuts it down (as SIGTERM does) and returns
// its exit status.
func startServe(t *testing.T, home, exe string) serving {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan int, 1)
	go func() {
		code := airlockIn(t, ctx, home, exe, pw, "serve", "--listen", "127.0.0.1:0", "--workers", "2", "--log-level", "warn")
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

// TestServe: airlock serve authenticates a tenant's key, creates and drives
// a scripted run in a real sandbox, serves its patch; shut down mid-run
// it leaves the run resumable, and the next airlock serve finishes it.
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

	s := startServe(t, home, exe)
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

	// Shut down while a run sleeps in its sandbox: it stays running,
	// resumable, and the next server's workers finish it. The sleep is the
	// time the shutdown has to land after the run is seen running: were
	// the command to end first, the run would complete (runs_live.txtar's
	// pause lost that race at load 30 with 4 s; this had 1 s).
	slow := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 5; echo slept\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	st, b = call(t, "POST", s.url+"/v1/runs", key, map[string]any{"task": "slow", "script": slow})
	if st != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	waitRun(t, s.url, key, run.ID, "running")
	time.Sleep(200 * time.Millisecond) // into the command
	if code := s.stop(); code != 0 {
		t.Fatalf("airlock serve exited %d on shutdown", code)
	}
	var ls bytes.Buffer
	airlockIn(t, ctx, home, exe, &ls, "runs", "ls", "--json")
	if !strings.Contains(ls.String(), fmt.Sprintf(`"id":%q,"tenant":"acme","status":"running"`, run.ID)) {
		t.Fatalf("after shutdown the run is not left running:\n%s", ls.String())
	}
	s2 := startServe(t, home, exe)
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
