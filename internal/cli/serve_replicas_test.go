package cli_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// These tests run airlock serve as real processes (this test binary under
// the name airlock, see TestMain) on one throwaway PostgreSQL, so that a
// server can be killed, signalled, and told apart from another by its pid
// (the host a run.started or run.resumed names).

// pgURL starts a PostgreSQL server for t alone and returns the URL of an
// empty database on it; both go when t ends, after the servers t started.
func pgURL(t *testing.T) string {
	t.Helper()
	srv, err := pgtest.Start(context.Background())
	pgtest.ForTest(t, srv, err)
	return srv.NewDatabase(t)
}

// moreHome returns another fresh AIRLOCK_HOME, removed (with its
// sandboxes' cgroup parent) when t ends: a second host's.
func moreHome(t *testing.T) string {
	t.Helper()
	home, err := os.MkdirTemp("", "alh-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = linux.Forget(filepath.Join(home, "run"))
		os.RemoveAll(home)
	})
	return home
}

// pgKey creates tenant acme and an API key of it in the database at url.
func pgKey(t *testing.T, home, exe, url string) string {
	t.Helper()
	ctx := context.Background()
	if code := airlockIn(t, ctx, home, exe, io.Discard, "--store", url, "tenants", "create", "acme"); code != 0 {
		t.Fatalf("tenants create: %d", code)
	}
	var out bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &out, "--store", url, "keys", "create", "--tenant", "acme", "--name", "ci"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	return strings.TrimSpace(out.String())
}

// pgStore opens the database at url from the test, to look behind the
// servers' backs.
func pgStore(t *testing.T, url string) *postgres.Store {
	t.Helper()
	st, err := postgres.Open(context.Background(), url, postgres.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// serveProc is an airlock serve process.
type serveProc struct {
	t   *testing.T
	url string
	// e2bAPI and e2bSandbox are the E2B listeners' URLs, when serve has
	// them.
	e2bAPI, e2bSandbox string
	pid                int
	cmd                *exec.Cmd
	log                *syncLog
	// exited is closed once the process is reaped; code is then its exit
	// status (-1 for a signal).
	exited chan struct{}
	code   int
}

// startServeProc starts airlock serve with workers workers on the store at
// storeURL, in home, and returns once it listens.
func startServeProc(t *testing.T, home, exe, storeURL string, workers int) *serveProc {
	t.Helper()
	return startServeConf(t, home, exe, storeURL, workers, "")
}

// serveAPI is the api section of the servers' configuration: an api
// section in startServeConf's more replaces it.
const serveAPI = "api:\n  rate: 1000\n  burst: 1000\n  stream_poll: 100ms\n"

// trustingAPI is serveAPI with the tenants' policies trusted, so that a
// run's policy may mount a host directory into its sandbox: gate's.
const trustingAPI = serveAPI + "  trust_tenant_policies: true\n"

// gate returns a host directory for a run's sandbox (a policy document
// that mounts it at /gate, for a server of trustingAPI), a command that
// waits there for a file the test makes, and the function that makes it:
// a stop that must land while a command runs lands before the file is
// made, whatever the load, where a sleep raced it. timeout bounds the
// wait, so a stop that never lands fails the test rather than hanging it.
func gate(t *testing.T) (policy, wait string, open func()) {
	t.Helper()
	dir := t.TempDir()
	policy = "sandbox:\n  mounts:\n    - {source: " + dir + ", target: /gate}\n"
	wait = `timeout 60 sh -c "until [ -e /gate/open ]; do sleep 0.05; done"`
	return policy, wait, func() {
		if err := os.WriteFile(filepath.Join(dir, "open"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// startServeConf is startServeProc with more of serve's configuration
// file (YAML, top-level keys the default file does not set; an api
// section replaces serveAPI).
func startServeConf(t *testing.T, home, exe, storeURL string, workers int, more string) *serveProc {
	t.Helper()
	cfg := filepath.Join(home, "serve.yaml")
	conf := "worker_poll: 100ms\nshutdown_timeout: 30s\n" + more
	if !strings.HasPrefix(more, "api:") && !strings.Contains(more, "\napi:") {
		conf += serveAPI
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := &exec.Cmd{Path: self, Args: []string{
		"airlock", "serve", "--config", cfg, "--listen", "127.0.0.1:0",
		"--workers", strconv.Itoa(workers), "--log-level", "info",
	}}
	cmd.Env = append(os.Environ(), "AIRLOCK_HOME="+home, "AIRLOCK_EXEC="+exe, "AIRLOCK_STORE="+storeURL,
		"GORACE=atexit_sleep_ms=10")
	// Should this test binary die first, its servers die with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	p := &serveProc{t: t, cmd: cmd, log: &syncLog{}, exited: make(chan struct{})}
	out := &firstLine{line: make(chan string, 4)}
	cmd.Stdout, cmd.Stderr = out, p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.pid = cmd.Process.Pid
	go func() {
		_ = cmd.Wait()
		p.code = cmd.ProcessState.ExitCode()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		<-p.exited
		if t.Failed() {
			t.Logf("airlock serve (pid %d) log:\n%s", p.pid, p.log.String())
		}
	})
	for p.url == "" {
		select {
		case l := <-out.line:
			if m := regexp.MustCompile(`E2B API on (http://\S+), sandboxes on (http://\S+)`).FindStringSubmatch(l); m != nil {
				p.e2bAPI, p.e2bSandbox = m[1], m[2]
				continue
			}
			m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+) `).FindStringSubmatch(l)
			if m == nil {
				t.Fatalf("airlock serve said %q", l)
			}
			p.url = m[1]
		case <-p.exited:
			t.Fatalf("airlock serve exited with %d before listening:\n%s", p.code, p.log.String())
		case <-time.After(time.Minute):
			t.Fatal("airlock serve did not listen within a minute")
		}
	}
	return p
}

// host is what the server's run.started and run.resumed events name.
func (p *serveProc) host() string {
	h, _ := os.Hostname()
	return h + ":" + strconv.Itoa(p.pid)
}

// kill SIGKILLs the server and waits for it.
func (p *serveProc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.exited
}

// wait waits for the server to exit and returns its status.
func (p *serveProc) wait() int {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(2 * time.Minute):
		p.t.Fatalf("airlock serve did not exit in 2 minutes:\n%s", p.log.String())
	}
	return p.code
}

// firstLine passes on the lines written to it, up to the one that says
// where the server listens.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	line chan string
}

func (f *firstLine) Write(b []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.sent {
		f.buf = append(f.buf, b...)
		for !f.sent {
			i := bytes.IndexByte(f.buf, '\n')
			if i < 0 {
				break
			}
			l := string(f.buf[:i])
			f.buf = f.buf[i+1:]
			f.sent = strings.Contains(l, "listening on")
			select {
			case f.line <- l:
			default: // no one reads past the listening line
			}
		}
	}
	return len(b), nil
}

// createRun creates a run through the API of the server at base.
func createRun(t *testing.T, base, key string, body map[string]any) apiRun {
	t.Helper()
	st, b := call(t, "POST", base+"/v1/runs", key, body)
	var run apiRun
	if st != http.StatusCreated || json.Unmarshal(b, &run) != nil {
		t.Fatalf("create = %d %s", st, b)
	}
	return run
}

// runEvents reads run id's whole log from the store.
func runEvents(t *testing.T, st store.Store, id string) []event.Event {
	t.Helper()
	if _, err := store.VerifyRun(context.Background(), st, id); err != nil {
		t.Fatalf("VerifyRun(%s) = %v", id, err)
	}
	evs, err := st.Events(context.Background(), id, 1, store.MaxPage)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// drives returns the hosts of the drives a run's log records (run.started
// and run.resumed), with the resumes' reasons.
func drives(t *testing.T, evs []event.Event) (started []string, resumed []event.RunResumed) {
	t.Helper()
	for _, e := range evs {
		switch e.Type {
		case event.TypeRunStarted:
			var p event.RunStarted
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			started = append(started, p.Host)
		case event.TypeRunResumed:
			var p event.RunResumed
			if err := json.Unmarshal(e.Payload, &p); err != nil {
				t.Fatal(err)
			}
			resumed = append(resumed, p)
		}
	}
	return started, resumed
}

func countType(evs []event.Event, typ event.Type) int {
	n := 0
	for _, e := range evs {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// waitEvent waits until run id's log has an event of type typ.
func waitEvent(t *testing.T, st store.Store, id string, typ event.Type) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		evs, err := st.Events(context.Background(), id, 1, store.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		if countType(evs, typ) > 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("run %s: no %s in a minute", id, typ)
}

// TestServeResumeOutlivesItsServer: a resume asked of a server is a fact
// in the store, not a note in its memory: the server that took it is
// killed before any worker took the run up, and another server's workers
// resume it where it was paused.
func TestServeResumeOutlivesItsServer(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	homeA, exe := serveHome(t, "alh-")
	homeB := moreHome(t)
	key := pgKey(t, homeA, exe, url)
	st := pgStore(t, url)

	// A serves the API and drives nothing; B drives. The first command
	// waits for the gate, opened once the pause was asked for: the pause
	// lands before the command ends.
	a := startServeConf(t, homeA, exe, url, 0, trustingAPI)
	b := startServeConf(t, homeB, exe, url, 1, trustingAPI)
	policy, wait, open := gate(t)
	script := "turns:\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: 'echo one > one.txt; " + wait + "'}\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"echo two > two.txt\"}\n" +
		"  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	run := createRun(t, a.url, key, map[string]any{
		"task": "pause me", "script": script, "policy_document": policy,
		"verify": map[string]any{"commands": []string{"test -f one.txt && test -f two.txt"}},
	})
	waitEvent(t, st, run.ID, event.TypeToolStarted)
	if s, body := call(t, "POST", a.url+"/v1/runs/"+run.ID+"/pause", key, map[string]string{"reason": "lunch"}); s != http.StatusAccepted {
		t.Fatalf("pause = %d %s", s, body)
	}
	open()
	waitRun(t, a.url, key, run.ID, "paused")
	// B goes away, gracefully; nothing drives now.
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := b.wait(); code != 0 {
		t.Fatalf("B exited %d on SIGTERM", code)
	}
	paused, err := st.GetRun(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}

	s, body := call(t, "POST", a.url+"/v1/runs/"+run.ID+"/resume", key, nil)
	var resumed apiRun
	if s != http.StatusAccepted || json.Unmarshal(body, &resumed) != nil || resumed.Status != "queued" {
		t.Fatalf("resume = %d %s; want 202, queued", s, body)
	}
	a.kill()

	b2 := startServeConf(t, homeB, exe, url, 1, trustingAPI)
	waitRun(t, b2.url, key, run.ID, "completed")
	evs := runEvents(t, st, run.ID)
	started, res := drives(t, evs[paused.LastSeq:])
	if len(started) != 0 || len(res) != 1 || res[0].Reason != "resume" || res[0].Host != b2.host() || res[0].FromSeq != paused.LastSeq {
		t.Errorf("after the pause: run.started %v, run.resumed %+v; want one resume by %s from seq %d", started, res, b2.host(), paused.LastSeq)
	}
	if code := stopProc(t, b2); code != 0 {
		t.Errorf("B exited %d", code)
	}
}

// stopProc SIGTERMs a server and returns its exit status.
func stopProc(t *testing.T, p *serveProc) int {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	return p.wait()
}

// workspaceTar is a tar of one file.
func workspaceTar(t *testing.T, name, content string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg, ModTime: time.Unix(1e9, 0)}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// stream reads run id's event stream from the server at base until it
// ends, and returns the event types it carried and how it ended.
func stream(t *testing.T, base, key, id string) ([]string, error) {
	t.Helper()
	req, err := http.NewRequest("GET", base+"/v1/runs/"+id+"/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("stream: %s", resp.Status)
	}
	var types []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if typ, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			types = append(types, typ)
		}
	}
	return types, sc.Err()
}

// TestServeReplicas: two airlock serve processes on one PostgreSQL share
// the runs created through one of them: each run is driven exactly once,
// by either (both take some), from a workspace uploaded to the first;
// events stream and the patch downloads from either.
func TestServeReplicas(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	homeA, exe := serveHome(t, "alh-")
	homeB := moreHome(t)
	key := pgKey(t, homeA, exe, url)
	st := pgStore(t, url)
	a := startServeProc(t, homeA, exe, url, 2)
	b := startServeProc(t, homeB, exe, url, 2)

	req, err := http.NewRequest("POST", a.url+"/v1/uploads", bytes.NewReader(workspaceTar(t, "base.txt", "uploaded to A\n")))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var up struct {
		ID string `json:"id"`
	}
	err = json.NewDecoder(resp.Body).Decode(&up)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated || err != nil {
		t.Fatalf("upload = %s, %v", resp.Status, err)
	}

	script := "turns:\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"grep -q 'uploaded to A' base.txt && sleep 0.5 && echo changed >> base.txt\"}\n" +
		"  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	var runs []apiRun
	for i := range 6 {
		runs = append(runs, createRun(t, a.url, key, map[string]any{
			"task": fmt.Sprintf("replica %d", i), "script": script,
			"workspace": map[string]string{"upload": up.ID}, "verify": map[string]any{"commands": []string{"grep -q changed base.txt"}},
		}))
	}
	// The first run's events, streamed from B while A or B drives it.
	type streamed struct {
		types []string
		err   error
	}
	sc := make(chan streamed, 1)
	go func() {
		types, err := stream(t, b.url, key, runs[0].ID)
		sc <- streamed{types, err}
	}()
	for _, r := range runs {
		waitRun(t, b.url, key, r.ID, "completed")
	}
	got := <-sc
	if got.err != nil || !strings.Contains(strings.Join(got.types, " "), "run.completed end") {
		t.Errorf("the stream from B: %v, %v; want it to end after run.completed", got.types, got.err)
	}

	by := map[string]int{}
	for _, r := range runs {
		evs := runEvents(t, st, r.ID)
		started, resumed := drives(t, evs)
		if len(started) != 1 || len(resumed) != 0 {
			t.Errorf("run %s: started by %v, resumed %+v; want one drive", r.ID, started, resumed)
			continue
		}
		by[started[0]]++
		var patches [][]byte
		for _, p := range []*serveProc{a, b} {
			s, body := call(t, "GET", p.url+"/v1/runs/"+r.ID+"/artifacts/patch.diff", key, nil)
			if s != http.StatusOK || !strings.Contains(string(body), "+changed") {
				t.Errorf("run %s: patch from %s = %d %q", r.ID, p.url, s, body)
			}
			patches = append(patches, body)
		}
		if !bytes.Equal(patches[0], patches[1]) {
			t.Errorf("run %s: A and B serve different patches", r.ID)
		}
	}
	if by[a.host()] == 0 || by[b.host()] == 0 || by[a.host()]+by[b.host()] != len(runs) {
		t.Errorf("runs driven by %v; want every run by A (%s) or B (%s), both some", by, a.host(), b.host())
	}
	// The blobs are in the database, none in either server's directory.
	for _, home := range []string{homeA, homeB} {
		if files, _ := filepath.Glob(filepath.Join(home, "blobs", "sha256", "*", "*")); len(files) != 0 {
			t.Errorf("%d blobs in %s, want every blob in the database", len(files), home)
		}
	}
	for _, p := range []*serveProc{a, b} {
		if code := stopProc(t, p); code != 0 {
			t.Errorf("server exited %d", code)
		}
	}
}

// TestServeGracefulShutdown: SIGTERM to a server with a step in flight
// makes /readyz and creates answer 503 at once while reads go on; its
// workers take no more runs; the step finishes and is recorded; the event
// stream ends cleanly; the server exits 0, leaving its run running with
// its lease released, and another server goes on with it at once, redoing
// nothing.
func TestServeGracefulShutdown(t *testing.T) {
	t.Parallel()
	url := pgURL(t)
	homeA, exe := serveHome(t, "alh-")
	homeB := moreHome(t)
	key := pgKey(t, homeA, exe, url)
	st := pgStore(t, url)
	a := startServeConf(t, homeA, exe, url, 1, trustingAPI)

	// The step in flight waits for the gate, opened once the drain was
	// seen: the drain cannot end first.
	policy, wait, open := gate(t)
	script := "turns:\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: '" + wait + "; echo one > one.txt'}\n" +
		"  - tool_calls:\n      - name: run_command\n        args: {command: \"echo two > two.txt\"}\n" +
		"  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	verify := map[string]any{"commands": []string{"test -f one.txt && test -f two.txt"}}
	run := createRun(t, a.url, key, map[string]any{"task": "in flight", "script": script, "verify": verify, "policy_document": policy})
	waitEvent(t, st, run.ID, event.TypeToolStarted)
	// A's one worker is busy: this one waits in the queue.
	queued := createRun(t, a.url, key, map[string]any{"task": "queued", "script": script, "verify": verify, "policy_document": policy})
	type streamed struct {
		types []string
		err   error
	}
	sc := make(chan streamed, 1)
	go func() {
		types, err := stream(t, a.url, key, run.ID)
		sc <- streamed{types, err}
	}()
	waitRun(t, a.url, key, run.ID, "running")

	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// Draining: readyz and creates are refused, reads served, until the
	// step in flight is done.
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(a.url + "/readyz")
		if err != nil {
			t.Fatalf("readyz while draining: %v", err)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("readyz still %s a minute after SIGTERM", resp.Status)
		}
		time.Sleep(10 * time.Millisecond)
	}
	s, body := call(t, "POST", a.url+"/v1/runs", key, map[string]any{"task": "too late", "script": script})
	var eb struct {
		Code string `json:"code"`
	}
	if s != http.StatusServiceUnavailable || json.Unmarshal(body, &eb) != nil || eb.Code != "unavailable" {
		t.Errorf("create while draining = %d %s; want 503 unavailable", s, body)
	}
	if s, body := call(t, "GET", a.url+"/v1/runs/"+run.ID, key, nil); s != http.StatusOK {
		t.Errorf("read while draining = %d %s", s, body)
	}
	open()
	if code := a.wait(); code != 0 {
		t.Fatalf("A exited %d on SIGTERM", code)
	}
	got := <-sc
	if got.err != nil || len(got.types) == 0 {
		t.Errorf("the stream from A ended with %v after %v; want a clean end", got.err, got.types)
	}

	// The step in flight finished and was recorded; nothing more ran; the
	// run is A's no more.
	r, err := st.GetRun(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	evs := runEvents(t, st, run.ID)
	if r.Status != event.StatusRunning || r.LeaseOwner != "" {
		t.Errorf("after A exited: %s, lease owner %q; want running, no lease", r.Status, r.LeaseOwner)
	}
	if countType(evs, event.TypeToolFinished) != 1 || countType(evs, event.TypeSnapshotTaken) != 2 /* the workspace's start and the step's */ || countType(evs, event.TypeToolStarted) != 1 {
		t.Errorf("want the step in flight finished and snapshotted, no other: %v", evTypes(evs))
	}
	q, err := st.GetRun(context.Background(), queued.ID)
	if err != nil || q.Status != event.StatusQueued || q.LastSeq != 2 {
		t.Errorf("the queued run after A's drain: %s at seq %d, %v; want untouched", q.Status, q.LastSeq, err)
	}

	b := startServeConf(t, homeB, exe, url, 2, trustingAPI)
	waitRun(t, b.url, key, run.ID, "completed")
	waitRun(t, b.url, key, queued.ID, "completed")
	evs = runEvents(t, st, run.ID)
	started, resumed := drives(t, evs)
	if len(started) != 1 || started[0] != a.host() || len(resumed) != 1 || resumed[0].Reason != "recovery" || resumed[0].Host != b.host() {
		t.Errorf("drives: started %v, resumed %+v; want A's start, B's recovery", started, resumed)
	}
	if n := countType(evs, event.TypeRetry); n != 0 {
		t.Errorf("B redid %d calls of the step A finished", n)
	}
	if code := stopProc(t, b); code != 0 {
		t.Errorf("B exited %d", code)
	}
}

func evTypes(evs []event.Event) []string {
	out := make([]string, len(evs))
	for i, e := range evs {
		out[i] = string(e.Type)
	}
	return out
}
