package cli_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// e2bReplicaConf is the e2b section of a replica of one E2B service on
// this machine: its listeners on loopback, advertised there, the shared
// seal key, and a short meter interval (the lease, 3 intervals + 30 s,
// lapses sooner).
func e2bReplicaConf(t *testing.T) string {
	t.Helper()
	var k [32]byte
	_, _ = rand.Read(k[:])
	file := filepath.Join(t.TempDir(), "seal.key")
	if err := os.WriteFile(file, []byte(hex.EncodeToString(k[:])+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return "e2b:\n  api_addr: 127.0.0.1:0\n  sandbox_addr: 127.0.0.1:0\n  advertise_host: 127.0.0.1\n" +
		"  seal_key_file: " + file + "\n  meter_interval: 1s\n"
}

// e2bKey creates tenant and an E2B API key of it in the database at url.
func e2bKey(t *testing.T, home, exe, url, tenant string) string {
	t.Helper()
	ctx := context.Background()
	if code := airlockIn(t, ctx, home, exe, io.Discard, "--store", url, "tenants", "create", tenant); code != 0 {
		t.Fatalf("tenants create: %d", code)
	}
	var out bytes.Buffer
	if code := airlockIn(t, ctx, home, exe, &out, "--store", url, "keys", "create", "--tenant", tenant, "--name", "sdk", "--scope", "sandboxes", "--e2b"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	return strings.TrimSpace(out.String())
}

// e2bClient drives the E2B API's two planes over HTTP.
type e2bClient struct {
	t   *testing.T
	key string
}

func (c e2bClient) do(method, url string, hd map[string]string, body []byte) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	for k, v := range hd {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// api calls the control plane at base.
func (c e2bClient) api(method, base, path string, body any) (int, []byte) {
	c.t.Helper()
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	return c.do(method, base+path, map[string]string{"X-API-KEY": c.key, "Content-Type": "application/json"}, b)
}

type e2bSandbox struct {
	ID    string `json:"sandboxID"`
	Token string `json:"envdAccessToken"`
}

// run starts script in sandbox s through the data plane at base and
// returns the answer's status and the command's stdout.
func (c e2bClient) run(base string, s e2bSandbox, script string) (int, string) {
	c.t.Helper()
	msg, _ := json.Marshal(map[string]any{"process": map[string]any{"cmd": "/bin/sh", "args": []string{"-c", script}}, "stdin": false})
	env := append([]byte{0, 0, 0, 0, 0}, msg...)
	binary.BigEndian.PutUint32(env[1:5], uint32(len(msg)))
	st, b := c.do("POST", base+"/process.Process/Start", map[string]string{
		"E2b-Sandbox-Id": s.ID, "E2b-Sandbox-Port": "49983",
		"X-Access-Token": s.Token, "Content-Type": "application/connect+json",
	}, env)
	var out strings.Builder
	for _, m := range regexp.MustCompile(`"stdout":"([^"]*)"`).FindAllSubmatch(b, -1) {
		d, _ := base64.StdEncoding.DecodeString(string(m[1]))
		out.Write(d)
	}
	if st == 200 && !bytes.Contains(b, []byte(`"exited":true`)) {
		c.t.Errorf("Start %q through %s = %q: no end", script, base, b)
	}
	return st, out.String()
}

// sandboxRecord returns the record of E2B sandbox id.
func sandboxRecord(t *testing.T, st store.Store, id string) store.Run {
	t.Helper()
	runs, err := st.ListRuns(context.Background(), store.RunFilter{Kind: store.KindSandbox})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		if strings.HasPrefix(r.Task, "E2B sandbox "+id+",") {
			return r
		}
	}
	t.Fatalf("no record of sandbox %s", id)
	return store.Run{}
}

// TestServeReplicasE2B: two airlock serve replicas of one E2B service, on
// one PostgreSQL and the native backend, on this machine. A sandbox made
// through A is listed, described, used (commands with create's envs,
// files), timed, paused and resumed through B, whose requests A answers
// (relayed over A's advertised address, authenticated with the shared
// key); a second one is killed through B. Another tenant's key, and a
// wrong token, reach nothing through B. The record holds the tokens'
// verifiers and the sealed secrets, never a token or an env value. Then A
// is killed with SIGKILL: its native sandbox ended with it (a process
// tree of A's), so B answers 503 naming A while A's lease runs, then
// closes the record as lost and answers as for any sandbox gone.
func TestServeReplicasE2B(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "ale2r-")
	homeB := moreHome(t)
	st := pgStore(t, url)
	c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "acme")}
	other := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "beta")}
	conf := e2bReplicaConf(t)
	a := startServeConf(t, homeA, exe, url, 0, conf)
	b := startServeConf(t, homeB, exe, url, 0, conf)
	if a.e2bAPI == "" || b.e2bAPI == "" {
		t.Fatalf("no E2B listeners: A %q, B %q", a.e2bAPI, b.e2bAPI)
	}

	const secret = "s3cret-replica-value"
	code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{
		"templateID": "base", "envVars": map[string]string{"REPLICA_SECRET": secret}, "metadata": map[string]string{"who": "replicas"},
	})
	var sb e2bSandbox
	if code != 201 || json.Unmarshal(body, &sb) != nil || sb.Token == "" {
		t.Fatalf("create through A = %d %s", code, body)
	}

	// list through B: A's sandbox, from its record.
	code, body = c.api("GET", b.e2bAPI, "/v2/sandboxes?metadata=who%3Dreplicas", nil)
	var listed []struct {
		ID       string            `json:"sandboxID"`
		State    string            `json:"state"`
		Metadata map[string]string `json:"metadata"`
	}
	if code != 200 || json.Unmarshal(body, &listed) != nil || len(listed) != 1 || listed[0].ID != sb.ID || listed[0].State != "running" || listed[0].Metadata["who"] != "replicas" {
		t.Fatalf("list through B = %d %s, want %s running", code, body, sb.ID)
	}
	// info through B: A answers, with the token.
	code, body = c.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil)
	var info e2bSandbox
	if code != 200 || json.Unmarshal(body, &info) != nil || info.ID != sb.ID || info.Token != sb.Token {
		t.Fatalf("info through B = %d %s", code, body)
	}
	// Another tenant's key finds nothing through B, as through A.
	for _, base := range []string{a.e2bAPI, b.e2bAPI} {
		if code, body := other.api("GET", base, "/sandboxes/"+sb.ID, nil); code != 404 {
			t.Errorf("another tenant's info through %s = %d %s, want 404", base, code, body)
		}
		if code, body := other.api("DELETE", base, "/sandboxes/"+sb.ID, nil); code != 404 {
			t.Errorf("another tenant's kill through %s = %d %s, want 404", base, code, body)
		}
	}
	// Commands through B see create's envs; a file written through B is
	// read through A.
	if code, out := c.run(b.e2bSandbox, sb, `echo "$REPLICA_SECRET"; echo through-b > /tmp/b.txt`); code != 200 || out != secret+"\n" {
		t.Fatalf("command through B = %d %q, want %q", code, out, secret+"\n")
	}
	if code, out := c.run(a.e2bSandbox, sb, `cat /tmp/b.txt`); code != 200 || out != "through-b\n" {
		t.Fatalf("command through A = %d %q", code, out)
	}
	code, body = c.do("GET", b.e2bSandbox+"/files?path=/tmp/b.txt", map[string]string{"E2b-Sandbox-Id": sb.ID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.Token}, nil)
	if code != 200 || string(body) != "through-b\n" {
		t.Errorf("download through B = %d %q", code, body)
	}
	// What the sandbox reports through A is read through B's native API
	// (stored by A as it comes, followed by B): live, not ended.
	if code, _ := c.run(a.e2bSandbox, sb, `airlock-event progress --pct 40 from-a`); code != 200 {
		t.Fatalf("airlock-event through A = %d", code)
	}
	var reader bytes.Buffer
	if code := airlockIn(t, context.Background(), homeA, exe, &reader, "--store", url, "keys", "create", "--tenant", "acme", "--name", "reader", "--scope", "runs:read"); code != 0 {
		t.Fatalf("keys create: %d", code)
	}
	var sevs api.SandboxEventList
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		code, body := call(t, "GET", b.url+"/v1/sandboxes/"+sb.ID+"/events", strings.TrimSpace(reader.String()), nil)
		if code != 200 || json.Unmarshal(body, &sevs) != nil {
			t.Fatalf("events through B = %d %s", code, body)
		}
		if len(sevs.Events) > 0 || time.Now().After(deadline) {
			break
		}
	}
	if len(sevs.Events) != 1 || sevs.Events[0].Event.Message != "from-a" || sevs.Ended {
		t.Errorf("events through B = %+v, want A's one progress event, not ended", sevs)
	}
	// A wrong token, or none, is refused by B itself (502, as for any
	// unknown sandbox), not relayed.
	for _, tok := range []string{"", strings.Repeat("0", 64)} {
		if code, _ := c.run(b.e2bSandbox, e2bSandbox{ID: sb.ID, Token: tok}, "echo no"); code != 502 {
			t.Errorf("command through B with token %q = %d, want 502", tok, code)
		}
	}
	// timeout, pause and resume through B.
	if code, body := c.api("POST", b.e2bAPI, "/sandboxes/"+sb.ID+"/timeout", map[string]any{"timeout": 600}); code != 204 {
		t.Errorf("timeout through B = %d %s", code, body)
	}
	if code, body := c.api("POST", b.e2bAPI, "/sandboxes/"+sb.ID+"/pause", nil); code != 204 {
		t.Fatalf("pause through B = %d %s", code, body)
	}
	code, body = c.api("GET", b.e2bAPI, "/v2/sandboxes?state=paused", nil)
	if code != 200 || !bytes.Contains(body, []byte(sb.ID)) {
		t.Errorf("list of paused through B = %d %s, want %s", code, body, sb.ID)
	}
	if code, body := c.api("POST", b.e2bAPI, "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 600}); code != 201 && code != 200 {
		t.Fatalf("connect (resume) through B = %d %s", code, body)
	}
	if code, out := c.run(b.e2bSandbox, sb, `cat /tmp/b.txt; echo "$REPLICA_SECRET"`); code != 200 || !strings.HasSuffix(out, secret+"\n") {
		t.Fatalf("command through B after the resume = %d %q", code, out)
	}

	// A second sandbox, killed through B.
	code, body = c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base"})
	var sb2 e2bSandbox
	if code != 201 || json.Unmarshal(body, &sb2) != nil {
		t.Fatalf("create through A = %d %s", code, body)
	}
	if code, body := c.api("DELETE", b.e2bAPI, "/sandboxes/"+sb2.ID, nil); code != 204 {
		t.Fatalf("kill through B = %d %s", code, body)
	}
	if code, body := c.api("GET", a.e2bAPI, "/sandboxes/"+sb2.ID, nil); code != 404 {
		t.Errorf("info through A after the kill through B = %d %s, want 404", code, body)
	}
	if r := sandboxRecord(t, st, sb2.ID); r.Status != event.StatusCancelled {
		t.Errorf("killed sandbox's record is %s, want cancelled", r.Status)
	}

	// The record: verifiers and a sealed blob, no token, no env value.
	rec := sandboxRecord(t, st, sb.ID)
	evs, err := st.Events(context.Background(), rec.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if bytes.Contains(e.Payload, []byte(sb.Token)) || bytes.Contains(e.Payload, []byte(secret)) {
			t.Errorf("event %d (%s) holds the token or the env value: %s", e.Seq, e.Type, e.Payload)
		}
	}
	if p, err := evs[0].Unpack(); err != nil || p.(*event.SandboxCreated).TokenSHA256 == "" || p.(*event.SandboxCreated).Sealed == "" {
		t.Errorf("sandbox.created = %s, want the token's verifier and the sealed secrets", evs[0].Payload)
	}

	// kill -9 of A: its sandbox ended with it.
	a.kill()
	killed := time.Now()
	code, body = c.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil)
	if code != 503 || !bytes.Contains(body, []byte("does not answer")) {
		t.Errorf("info through B with A dead = %d %s, want 503 naming A", code, body)
	}
	if code, _ := c.run(b.e2bSandbox, sb, "echo hi"); code != 503 {
		t.Errorf("command through B with A dead = %d, want 503", code)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, body = c.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil)
		if code == 404 {
			break
		}
		if code != 503 || time.Now().After(deadline) {
			t.Fatalf("info through B after A's death = %d %s, want 503 until its lease lapses, then 404", code, body)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("B closed A's sandbox %.1f s after A's SIGKILL", time.Since(killed).Seconds())
	if r := sandboxRecord(t, st, sb.ID); r.Status != event.StatusFailed {
		t.Errorf("A's sandbox's record is %s after B closed it, want failed (lost)", r.Status)
	}
	if code, _ := c.run(b.e2bSandbox, sb, "echo hi"); code != 502 {
		t.Errorf("command through B after the close = %d, want 502", code)
	}
	if code, body = c.api("GET", b.e2bAPI, "/v2/sandboxes", nil); code != 200 || bytes.Contains(body, []byte(sb.ID)) {
		t.Errorf("list through B after the close = %d %s, want no %s", code, body, sb.ID)
	}
	code, body = call(t, "GET", b.url+"/v1/sandboxes/"+sb.ID+"/events", strings.TrimSpace(reader.String()), nil)
	if sevs = (api.SandboxEventList{}); code != 200 || json.Unmarshal(body, &sevs) != nil || len(sevs.Events) != 1 || !sevs.Ended {
		t.Errorf("events through B after the close = %d %s, want the one event, ended", code, body)
	}
}

// TestServeReplicasE2BKubernetes: the same service with its sandboxes
// pods of the cluster. A sandbox made through A is used through B (its
// commands see create's envs; a file written through B is read through
// A); A is killed with SIGKILL; once A's lease lapses, B takes the
// sandbox over (it attaches to the pod, with the tokens and envs sealed
// in the record): the same token reaches the same files and envs through
// B, and a kill through B deletes the pod. A second sandbox, paused
// through A before its death, is taken over by B (A does not answer) and
// resumed through B on a new pod, with its files and envs.
func TestServeReplicasE2BKubernetes(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "ale2k-")
	homeB := moreHome(t)
	k := needKube(t, exe)
	st := pgStore(t, url)
	c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "acme")}
	// The pod outlives its replica's exec stream for the grace: longer
	// than the lease (3 s meters + 30 s), so B can take it over.
	conf := strings.Replace(k.conf, "detached_grace: 3s", "detached_grace: 2m", 1) + e2bReplicaConf(t)
	a := startServeConf(t, homeA, exe, url, 0, conf)
	b := startServeConf(t, homeB, exe, url, 0, conf)

	const secret = "s3cret-on-the-cluster"
	code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base", "envVars": map[string]string{"REPLICA_SECRET": secret}})
	var sb e2bSandbox
	if code != 201 || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create through A = %d %s", code, body)
	}
	if pods := k.pods(t); len(pods) != 1 {
		t.Fatalf("pods after the create: %v, want one", pods)
	}
	// E2B's default user, "user", is the pod's one id (uid 0 of the
	// sandbox; the pod's non-root uid on the node), named user, in
	// /home/user, the workspace, which is its HOME as on native.
	code, out := c.run(b.e2bSandbox, sb, `echo "$REPLICA_SECRET"; echo through-b > /tmp/b.txt; id -u; pwd; echo "$HOME"; echo "$USER"`)
	if code != 200 || !strings.HasPrefix(out, secret+"\n") {
		t.Fatalf("command through B = %d %q", code, out)
	}
	if want := secret + "\n0\n/home/user\n/home/user\nuser\n"; out != want {
		t.Errorf("command through B said %q; want %q: uid 0, in /home/user, its HOME, as user", out, want)
	}
	t.Logf("the default user in the pod: %q", out)
	if code, out := c.run(a.e2bSandbox, sb, `cat /tmp/b.txt`); code != 200 || out != "through-b\n" {
		t.Fatalf("command through A = %d %q", code, out)
	}
	// A second sandbox, paused through A: its workspace a checkpoint in
	// the shared store, its pod gone.
	code, body = c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base", "envVars": map[string]string{"REPLICA_SECRET": secret}})
	var paused e2bSandbox
	if code != 201 || json.Unmarshal(body, &paused) != nil {
		t.Fatalf("create through A = %d %s", code, body)
	}
	if code, _ := c.run(a.e2bSandbox, paused, `mkdir -p /workspace/d && echo kept-across > /workspace/d/f.txt`); code != 200 {
		t.Fatalf("command through A = %d", code)
	}
	if code, body := c.api("POST", a.e2bAPI, "/sandboxes/"+paused.ID+"/pause", map[string]any{"memory": false}); code != 204 {
		t.Fatalf("pause through A = %d %s", code, body)
	}
	a.kill()
	killed := time.Now()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		code, body = c.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil)
		if code == 200 {
			break
		}
		if code != 503 || time.Now().After(deadline) {
			audit, _ := os.ReadFile(filepath.Join(homeB, "audit", "e2b.jsonl"))
			t.Fatalf("info through B after A's death = %d %s, want 503 until its lease lapses, then 200 (taken over); B's audit:\n%s", code, body, audit)
		}
		time.Sleep(500 * time.Millisecond)
	}
	t.Logf("B took A's sandbox over %.1f s after A's SIGKILL", time.Since(killed).Seconds())
	var info e2bSandbox
	if json.Unmarshal(body, &info) != nil || info.Token != sb.Token {
		t.Errorf("info through B after the takeover = %s, want the same token", body)
	}
	if code, out := c.run(b.e2bSandbox, sb, `cat /tmp/b.txt; echo "$REPLICA_SECRET"`); code != 200 || out != "through-b\n"+secret+"\n" {
		t.Fatalf("command through B after the takeover = %d %q", code, out)
	}
	rec := sandboxRecord(t, st, sb.ID)
	if rec.Status != event.StatusRunning || !strings.Contains(rec.LeaseOwner, b.e2bAPI) {
		t.Errorf("record after the takeover: %s, lease %q; want running, B's (%s)", rec.Status, rec.LeaseOwner, b.e2bAPI)
	}
	// The paused one: A does not answer, so B takes it over and resumes
	// it on a new pod, with its files and envs.
	if code, body := c.api("POST", b.e2bAPI, "/sandboxes/"+paused.ID+"/connect", map[string]any{"timeout": 600}); code != 200 && code != 201 {
		t.Fatalf("connect (resume) of A's paused sandbox through B = %d %s", code, body)
	}
	if code, out := c.run(b.e2bSandbox, paused, `cat /workspace/d/f.txt; echo "$REPLICA_SECRET"`); code != 200 || out != "kept-across\n"+secret+"\n" {
		t.Fatalf("command through B in A's resumed sandbox = %d %q", code, out)
	}
	if r := sandboxRecord(t, st, paused.ID); r.Status != event.StatusRunning || !strings.Contains(r.LeaseOwner, b.e2bAPI) {
		t.Errorf("record of the resumed sandbox: %s, lease %q; want running, B's", r.Status, r.LeaseOwner)
	}
	if code, body := c.api("DELETE", b.e2bAPI, "/sandboxes/"+paused.ID, nil); code != 204 {
		t.Fatalf("kill through B = %d %s", code, body)
	}
	if code, body := c.api("DELETE", b.e2bAPI, "/sandboxes/"+sb.ID, nil); code != 204 {
		t.Fatalf("kill through B = %d %s", code, body)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for left := k.pods(t); len(left) > 0; left = k.pods(t) {
		if time.Now().After(deadline) {
			t.Fatalf("pods left after the kill: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if r := sandboxRecord(t, st, sb.ID); r.Status != event.StatusCancelled {
		t.Errorf("record after the kill through B: %s, want cancelled", r.Status)
	}
}

// TestServeReplicasE2BRolloutKubernetes: a rolling update's SIGTERM
// leaves a running sandbox to the other replica instead of ending it. A
// sandbox made through A, with a file written in it, is still running,
// in the same pod, once A has stopped gracefully (exit 0): A recorded its
// usage and a sandbox.handover and released the record's lease, and B took
// it over (run.resumed, takeover) without waiting for the lease to lapse;
// the same token reaches the same file through B.
func TestServeReplicasE2BRolloutKubernetes(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "alroll-")
	homeB := moreHome(t)
	k := needKube(t, exe)
	st := pgStore(t, url)
	c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "acme")}
	conf := strings.Replace(k.conf, "detached_grace: 3s", "detached_grace: 2m", 1) + e2bReplicaConf(t)
	a := startServeConf(t, homeA, exe, url, 0, conf)
	b := startServeConf(t, homeB, exe, url, 0, conf)

	code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base"})
	var sb e2bSandbox
	if code != 201 || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create through A = %d %s", code, body)
	}
	if code, out := c.run(a.e2bSandbox, sb, `echo before-the-rollout > /tmp/a.txt`); code != 200 {
		t.Fatalf("command through A = %d %q", code, out)
	}
	pods := k.pods(t)
	if len(pods) != 1 {
		t.Fatalf("pods after the create: %v, want one", pods)
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	stopped := time.Now()
	if code := a.wait(); code != 0 {
		t.Fatalf("A's graceful stop exited %d:\n%s", code, a.log.String())
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		code, body = c.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil)
		if code == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("info through B after A's stop = %d %s, want 200 once B takes it over; B's log:\n%s", code, body, b.log.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("B took the sandbox over %.1f s after A's SIGTERM", time.Since(stopped).Seconds())
	if code, out := c.run(b.e2bSandbox, sb, `cat /tmp/a.txt`); code != 200 || out != "before-the-rollout\n" {
		t.Fatalf("command through B after the rollout = %d %q, want the file A's command wrote (the same pod)", code, out)
	}
	if now := k.pods(t); !slices.Equal(now, pods) {
		t.Errorf("pods after the takeover: %v, want the same one %v", now, pods)
	}
	rec := sandboxRecord(t, st, sb.ID)
	if rec.Status != event.StatusRunning || !strings.Contains(rec.LeaseOwner, b.e2bAPI) {
		t.Errorf("record after the rollout: %s, lease %q; want running, B's (%s)", rec.Status, rec.LeaseOwner, b.e2bAPI)
	}
	evs, err := st.Events(context.Background(), rec.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	handover, usage, takeover := -1, -1, -1
	for i, e := range evs {
		switch {
		case e.Type == event.TypeSandboxOp && bytes.Contains(e.Payload, []byte(`"sandbox.handover"`)):
			handover = i
		case e.Type == event.TypeSandboxUsage && handover < 0:
			usage = i
		case e.Type == event.TypeRunResumed && bytes.Contains(e.Payload, []byte(`"takeover"`)):
			takeover = i
		}
	}
	if handover < 0 || usage < 0 || takeover < handover {
		t.Errorf("the record's log: usage at %d, sandbox.handover at %d, run.resumed (takeover) at %d; want A's usage and handover, then B's takeover", usage, handover, takeover)
	}
	if code, body := c.api("DELETE", b.e2bAPI, "/sandboxes/"+sb.ID, nil); code != 204 {
		t.Fatalf("kill through B = %d %s", code, body)
	}
	deadline = time.Now().Add(2 * time.Minute)
	for left := k.pods(t); len(left) > 0; left = k.pods(t) {
		if time.Now().After(deadline) {
			t.Fatalf("pods left after the kill: %v", left)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestServeReplicasE2BPausedHandover: a paused sandbox outlives its
// replica. A sandbox made and paused through A (its workspace a
// checkpoint in the shared store, its resume state sealed in the record)
// is resumable through B once A is gone: B's relay to A is refused, so B
// takes the paused sandbox over (the record's lease, a sandbox.takeover
// in its log, the checkpoint's hold under B's name in place of A's) and
// A restarted on its own home leaves it to B: a connect through A is
// relayed to B, which resumes it with its files, envs and token.
func TestServeReplicasE2BPausedHandover(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "ale2p-")
	homeB := moreHome(t)
	st := pgStore(t, url)
	c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "acme")}
	other := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "beta")}
	conf := e2bReplicaConf(t)
	a := startServeConf(t, homeA, exe, url, 0, conf)
	b := startServeConf(t, homeB, exe, url, 0, conf)

	const secret = "s3cret-paused-value"
	code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base", "envVars": map[string]string{"PAUSED_SECRET": secret}})
	var sb e2bSandbox
	if code != 201 || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create through A = %d %s", code, body)
	}
	if code, _ := c.run(a.e2bSandbox, sb, `mkdir -p /workspace/d && echo kept-across > /workspace/d/f.txt`); code != 200 {
		t.Fatalf("command through A = %d", code)
	}
	for i, memory := range []bool{false, true} {
		// The first pause keeps files only, the last memory too (frozen
		// on A, gone with it): both leave a checkpoint B resumes from.
		if i > 0 {
			if code, body := c.api("POST", a.e2bAPI, "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 600}); code != 200 && code != 201 {
				t.Fatalf("connect through A = %d %s", code, body)
			}
		}
		if code, body := c.api("POST", a.e2bAPI, "/sandboxes/"+sb.ID+"/pause", map[string]any{"memory": memory}); code != 204 {
			t.Fatalf("pause (memory %v) through A = %d %s", memory, code, body)
		}
	}
	rec := sandboxRecord(t, st, sb.ID)
	if rec.Status != event.StatusPaused || !strings.Contains(rec.LeaseOwner, a.e2bAPI) {
		t.Fatalf("record after the pause: %s, owner %q; want paused, A's", rec.Status, rec.LeaseOwner)
	}
	holdsOf := func() []string {
		hs, err := st.ListCheckpointHolds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, h := range hs {
			if strings.HasSuffix(h.Holder, "/paused/"+rec.ID) {
				out = append(out, h.Holder)
			}
		}
		return out
	}
	heldByA := holdsOf()
	if len(heldByA) != 1 {
		t.Fatalf("holds of the paused checkpoint: %v, want A's one", heldByA)
	}

	a.kill()
	// Another tenant's key, and a wrong token, take nothing over.
	if code, body := other.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil); code != 404 {
		t.Errorf("another tenant's info through B = %d %s, want 404", code, body)
	}
	if code, _ := c.run(b.e2bSandbox, e2bSandbox{ID: sb.ID, Token: strings.Repeat("0", 64)}, "echo no"); code != 502 {
		t.Errorf("command with a wrong token through B = %d, want 502", code)
	}
	if r := sandboxRecord(t, st, sb.ID); r.LeaseOwner != rec.LeaseOwner {
		t.Errorf("the record's owner after refused requests: %q, want A's still", r.LeaseOwner)
	}
	// The owner's info through B: taken over, paused.
	code, body = c.api("GET", b.e2bAPI, "/sandboxes/"+sb.ID, nil)
	var info struct {
		e2bSandbox
		State string `json:"state"`
	}
	if code != 200 || json.Unmarshal(body, &info) != nil || info.State != "paused" || info.Token != sb.Token {
		t.Fatalf("info through B with A gone = %d %s, want 200 paused, the same token", code, body)
	}
	r := sandboxRecord(t, st, sb.ID)
	if r.Status != event.StatusPaused || !strings.Contains(r.LeaseOwner, b.e2bAPI) {
		t.Errorf("record after the takeover: %s, owner %q; want paused, B's", r.Status, r.LeaseOwner)
	}
	if held := holdsOf(); len(held) != 1 || held[0] == heldByA[0] {
		t.Errorf("holds after the takeover: %v, want B's one in place of A's %v", held, heldByA)
	}
	evs, err := st.Events(context.Background(), r.ID, 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	took := false
	for _, e := range evs {
		took = took || e.Type == event.TypeSandboxOp && bytes.Contains(e.Payload, []byte(`"sandbox.takeover"`))
		if bytes.Contains(e.Payload, []byte(sb.Token)) || bytes.Contains(e.Payload, []byte(secret)) {
			t.Errorf("event %d (%s) holds the token or the env value", e.Seq, e.Type)
		}
	}
	if !took {
		t.Errorf("no sandbox.takeover in the record's log")
	}
	// A again, on its own home, while the sandbox is B's and paused: it
	// leaves it to B (its state file there is stale) and relays a
	// connect to B, which resumes it with its files, envs and token.
	a2 := startServeConf(t, homeA, exe, url, 0, conf)
	if code, body := c.api("POST", a2.e2bAPI, "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 600}); code != 200 && code != 201 {
		t.Fatalf("connect (resume) through A's next life = %d %s", code, body)
	}
	if r := sandboxRecord(t, st, sb.ID); r.Status != event.StatusRunning || !strings.Contains(r.LeaseOwner, b.e2bAPI) {
		t.Errorf("record after the resume: %s, owner %q; want running, B's", r.Status, r.LeaseOwner)
	}
	for _, via := range []string{b.e2bSandbox, a2.e2bSandbox} {
		if code, out := c.run(via, sb, `cat /workspace/d/f.txt; echo "$PAUSED_SECRET"`); code != 200 || out != "kept-across\n"+secret+"\n" {
			t.Errorf("command through %s after the resume = %d %q", via, code, out)
		}
	}
	if code, body := c.api("DELETE", a2.e2bAPI, "/sandboxes/"+sb.ID, nil); code != 204 {
		t.Errorf("kill through A's next life = %d %s", code, body)
	}
}

// TestServeReplicasE2BSnapshots: snapshots are the service's, not a
// replica's. A snapshot taken through A of A's sandbox is listed through
// B, which creates a sandbox from it (by name: its files); its name is
// taken through B as through A; deleted through B, it is gone through A
// (listed, created from) and its checkpoint's hold released. Another
// tenant sees none of it. The store's row holds no token or env value.
// A snapshot A kept as a file before is moved into the store at A's start.
func TestServeReplicasE2BSnapshots(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "ale2s-")
	homeB := moreHome(t)
	st := pgStore(t, url)
	c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "acme")}
	other := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "beta")}
	conf := e2bReplicaConf(t)
	// A snapshot A kept as a file of its home, as a server before the
	// shared store did: A moves it into the store at its start.
	const legacy = "snap-0123456789abcdef0123"
	legacyDigest := "sha256:" + strings.Repeat("ab", 32)
	dir := filepath.Join(homeA, "e2b", "snapshots")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	legacyFile := filepath.Join(dir, legacy+".json")
	rec := `{"id":"` + legacy + `","tenant":"acme","name":"old-snap","sandbox_id":"sb-old","checkpoint":"` + legacyDigest + `","created":"2026-01-02T03:04:05Z","template":"base","template_source":"default"}`
	if err := os.WriteFile(legacyFile, []byte(rec), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServeConf(t, homeA, exe, url, 0, conf)
	b := startServeConf(t, homeB, exe, url, 0, conf)

	const secret = "s3cret-snapshot-env"
	code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base", "envVars": map[string]string{"SNAP_SECRET": secret}})
	var sb e2bSandbox
	if code != 201 || json.Unmarshal(body, &sb) != nil {
		t.Fatalf("create through A = %d %s", code, body)
	}
	if code, _ := c.run(a.e2bSandbox, sb, `mkdir -p /workspace/s && echo from-a-snapshot > /workspace/s/f.txt`); code != 200 {
		t.Fatalf("command through A = %d", code)
	}
	code, body = c.api("POST", a.e2bAPI, "/sandboxes/"+sb.ID+"/snapshots", map[string]any{"name": "shared-snap"})
	var snap struct {
		ID    string   `json:"snapshotID"`
		Names []string `json:"names"`
	}
	if code != 201 || json.Unmarshal(body, &snap) != nil || snap.ID == "" {
		t.Fatalf("snapshot through A = %d %s", code, body)
	}
	listed := func(cl e2bClient, base string) string {
		t.Helper()
		code, body := cl.api("GET", base, "/snapshots", nil)
		if code != 200 {
			t.Fatalf("list snapshots through %s = %d %s", base, code, body)
		}
		return string(body)
	}
	if l := listed(c, b.e2bAPI); !strings.Contains(l, snap.ID) || !strings.Contains(l, "shared-snap") || !strings.Contains(l, legacy) || !strings.Contains(l, "old-snap") {
		t.Errorf("snapshots through B = %s, want %s and A's moved %s", l, snap.ID, legacy)
	}
	if _, err := os.Stat(legacyFile); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the moved snapshot's file: %v, want it gone", err)
	}
	if hs, err := st.ListCheckpointHolds(context.Background()); err != nil || !slices.ContainsFunc(hs, func(h store.CheckpointHold) bool {
		return h.Holder == "e2b/snapshot/"+legacy && h.Digest == legacyDigest && h.Tenant == "acme"
	}) {
		t.Errorf("holds = %+v %v, want the moved snapshot's shared hold", hs, err)
	}
	if l := listed(other, b.e2bAPI); strings.Contains(l, snap.ID) {
		t.Errorf("another tenant's snapshots through B = %s", l)
	}
	if code, body := other.api("POST", b.e2bAPI, "/sandboxes", map[string]any{"templateID": snap.ID}); code != 404 {
		t.Errorf("another tenant's create from the snapshot through B = %d %s, want 404", code, body)
	}
	// A sandbox of it through B, by name: B's own, with A's files.
	code, body = c.api("POST", b.e2bAPI, "/sandboxes", map[string]any{"templateID": "shared-snap"})
	var fromSnap e2bSandbox
	if code != 201 || json.Unmarshal(body, &fromSnap) != nil {
		t.Fatalf("create from the snapshot through B = %d %s", code, body)
	}
	if code, out := c.run(b.e2bSandbox, fromSnap, `cat /workspace/s/f.txt`); code != 200 || out != "from-a-snapshot\n" {
		t.Errorf("command in B's sandbox of A's snapshot = %d %q", code, out)
	}
	if r := sandboxRecord(t, st, fromSnap.ID); !strings.Contains(r.LeaseOwner, b.e2bAPI) {
		t.Errorf("the sandbox of the snapshot is held by %q, want B", r.LeaseOwner)
	}
	// The name is the service's: taken through B too.
	if code, body := c.api("POST", b.e2bAPI, "/sandboxes/"+fromSnap.ID+"/snapshots", map[string]any{"name": "shared-snap"}); code != 409 {
		t.Errorf("a second snapshot named as A's through B = %d %s, want 409", code, body)
	}
	rows, err := st.ListE2BSnapshots(context.Background(), "acme")
	if err != nil || len(rows) != 2 || rows[1].ID != snap.ID {
		t.Fatalf("the store's snapshots = %+v %v, want %s", rows, err, snap.ID)
	}
	if bytes.Contains(rows[1].Body, []byte(sb.Token)) || bytes.Contains(rows[1].Body, []byte(secret)) {
		t.Errorf("the snapshot's row holds the token or the env value: %s", rows[1].Body)
	}
	held := func() bool {
		hs, err := st.ListCheckpointHolds(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, h := range hs {
			if strings.HasSuffix(h.Holder, "/snapshot/"+snap.ID) {
				return true
			}
		}
		return false
	}
	if !held() {
		t.Errorf("no hold of the snapshot's checkpoint")
	}
	// Deleted through B: gone through A.
	if code, body := c.api("DELETE", b.e2bAPI, "/templates/"+snap.ID, nil); code != 204 {
		t.Fatalf("delete the snapshot through B = %d %s", code, body)
	}
	if l := listed(c, a.e2bAPI); strings.Contains(l, snap.ID) {
		t.Errorf("snapshots through A after the delete through B = %s", l)
	}
	if code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "shared-snap"}); code != 404 {
		t.Errorf("create from the deleted snapshot through A = %d %s, want 404", code, body)
	}
	if code, body := c.api("DELETE", a.e2bAPI, "/templates/"+snap.ID, nil); code != 404 {
		t.Errorf("delete again through A = %d %s, want 404", code, body)
	}
	if held() {
		t.Errorf("the deleted snapshot's checkpoint is still held")
	}
}

// TestServeReplicasE2BPausedTakeoverRace: two replicas taking over the
// same paused sandbox at the same moment. A pauses a sandbox and dies; B
// and C get a connect (resume) for it at once, each finding A silent:
// exactly one takes it over (one sandbox.takeover in the log, one hold),
// the other relays to the winner, so both answer the connect and the
// sandbox runs on the winner with its files. Rounds bound the race's
// timing: each round is a fresh sandbox.
func TestServeReplicasE2BPausedTakeoverRace(t *testing.T) {
	url := pgURL(t)
	homeA, exe := serveHome(t, "ale2r-")
	homeB, homeC := moreHome(t), moreHome(t)
	st := pgStore(t, url)
	c := e2bClient{t: t, key: e2bKey(t, homeA, exe, url, "acme")}
	conf := e2bReplicaConf(t)
	b := startServeConf(t, homeB, exe, url, 0, conf)
	cc := startServeConf(t, homeC, exe, url, 0, conf)
	for round := range 2 {
		a := startServeConf(t, homeA, exe, url, 0, conf)
		code, body := c.api("POST", a.e2bAPI, "/sandboxes", map[string]any{"templateID": "base"})
		var sb e2bSandbox
		if code != 201 || json.Unmarshal(body, &sb) != nil {
			t.Fatalf("round %d: create through A = %d %s", round, code, body)
		}
		if code, _ := c.run(a.e2bSandbox, sb, `echo raced > /workspace/f.txt`); code != 200 {
			t.Fatalf("round %d: command through A = %d", round, code)
		}
		if code, body := c.api("POST", a.e2bAPI, "/sandboxes/"+sb.ID+"/pause", map[string]any{}); code != 204 {
			t.Fatalf("round %d: pause through A = %d %s", round, code, body)
		}
		a.kill()

		type answer struct {
			code int
			body []byte
		}
		answers := make([]answer, 2)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i, p := range []*serveProc{b, cc} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				code, body := c.api("POST", p.e2bAPI, "/sandboxes/"+sb.ID+"/connect", map[string]any{"timeout": 600})
				answers[i] = answer{code, body}
			}()
		}
		close(start)
		wg.Wait()
		for i, an := range answers {
			if an.code != 200 && an.code != 201 {
				t.Errorf("round %d: connect through %s = %d %s", round, []string{"B", "C"}[i], an.code, an.body)
			}
		}
		r := sandboxRecord(t, st, sb.ID)
		winner := ""
		switch {
		case strings.Contains(r.LeaseOwner, b.e2bAPI):
			winner = b.e2bSandbox
		case strings.Contains(r.LeaseOwner, cc.e2bAPI):
			winner = cc.e2bSandbox
		}
		if r.Status != event.StatusRunning || winner == "" {
			t.Fatalf("round %d: record after the race: %s, owner %q; want running, B's or C's", round, r.Status, r.LeaseOwner)
		}
		evs, err := st.Events(context.Background(), r.ID, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		took := 0
		for _, e := range evs {
			if e.Type == event.TypeSandboxOp && bytes.Contains(e.Payload, []byte(`"sandbox.takeover"`)) {
				took++
			}
		}
		if took != 1 {
			t.Errorf("round %d: %d sandbox.takeover events, want exactly 1", round, took)
		}
		for _, via := range []string{b.e2bSandbox, cc.e2bSandbox} {
			if code, out := c.run(via, sb, `cat /workspace/f.txt`); code != 200 || out != "raced\n" {
				t.Errorf("round %d: command through %s after the race = %d %q", round, via, code, out)
			}
		}
		if code, body := c.api("DELETE", b.e2bAPI, "/sandboxes/"+sb.ID, nil); code != 204 {
			t.Errorf("round %d: kill through B = %d %s", round, code, body)
		}
	}
}
