package e2b_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

var executorPath string

func TestMain(m *testing.M) { os.Exit(sandboxtest.Main(m, &executorPath)) }

// harness is the E2B API on a real SQLite store and (as root) the native
// sandbox backend, served over loopback HTTP, with tenants alpha and beta
// and an e2b_ key for each.
type harness struct {
	t        *testing.T
	apiURL   string
	envdURL  string
	store    *sqlite.Store
	srv      *e2b.Server
	keys     map[string]string // tenant -> key
	audit    *syncBuffer
	upstream *upstream
	// stop ends srv's goroutines and closes its listeners.
	stop func()
	// pool is the server's warm pool (harnessOptions.warm), else nil.
	pool *pool.Pool
}

type harnessOptions struct {
	config e2b.Config
	// trust lets templates name host resources (pins to the loopback
	// upstream).
	trust bool
	// clock, when set, is the server's clock.
	clock *clock.Fake
	// noCheckpoints builds the server without a checkpoint store: it
	// pauses into tar files, as servers did before checkpoints.
	noCheckpoints bool
	// images is the server's image store (templates); nil: none.
	images e2b.Images
	// warm gives the server a sandbox pool over its backend for stored
	// templates' warm pools; the pool is h.pool.
	warm bool
	// holds is the server's Options.Holds (a PostgreSQL store's); nil:
	// none, as on SQLite.
	holds store.CheckpointHolds
}

// checkpoints is a checkpoint store on dir's blobs and chunks (nil with
// o.noCheckpoints), as airlock serve's; a server started again on the
// same dir finds what the last one stored.
func checkpoints(t *testing.T, dir string, o harnessOptions) *checkpoint.Store {
	t.Helper()
	if o.noCheckpoints {
		return nil
	}
	blobs, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cd, err := chunk.NewDir(filepath.Join(dir, "chunks"))
	if err != nil {
		t.Fatal(err)
	}
	cs, err := chunk.NewStore(cd)
	if err != nil {
		t.Fatal(err)
	}
	cps, err := checkpoint.New(blobs, cs)
	if err != nil {
		t.Fatal(err)
	}
	return cps
}

// syncBuffer is a Buffer safe for the server's concurrent writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) records(t *testing.T) []e2b.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []e2b.Record
	for _, line := range strings.Split(strings.TrimSpace(s.b.String()), "\n") {
		if line == "" {
			continue
		}
		var r e2b.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// needRoot skips t unless real sandboxes can run.
func needRoot(t *testing.T) {
	t.Helper()
	if executorPath == "" {
		t.Skip("needs root for real sandboxes")
	}
}

func newHarness(t *testing.T, o harnessOptions) *harness {
	t.Helper()
	needRoot(t)
	dir, err := os.MkdirTemp("", "e2b-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	h := &harness{t: t, store: st, keys: map[string]string{}, audit: &syncBuffer{}}
	keys := auth.NewKeys(st, nil)
	for _, tenant := range []string{"alpha", "beta"} {
		if _, err := st.CreateTenant(context.Background(), tenant); err != nil {
			t.Fatal(err)
		}
		key, _, err := keys.Create(context.Background(), tenant, "e2b", []string{auth.ScopeSandboxes}, auth.FormatE2B)
		if err != nil {
			t.Fatal(err)
		}
		h.keys[tenant] = key
	}
	h.upstream = newUpstream(t)
	net := &testNetwork{dir: dir, secrets: testSecrets{"api-token": canary}}
	var now func() time.Time
	if o.clock != nil {
		now = o.clock.Now
	}
	var warm e2b.Warmer
	if o.warm {
		h.pool = pool.New(b, pool.Options{})
		t.Cleanup(func() { _ = h.pool.Close(context.Background()) })
		warm = h.pool
	}
	h.srv, err = e2b.New(e2b.Options{
		Now: now, Config: o.config, Backend: b, Keys: keys, Store: st, Network: net, TrustTenantPolicies: o.trust, Warm: warm,
		Checkpoints: checkpoints(t, dir, o), StateDir: filepath.Join(dir, "e2b"), Audit: h.audit, Images: o.images, Holds: o.holds,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = h.srv.Run(ctx)
	}()
	h.listen(t, cancel, ran)
	return h
}

// listen serves h.srv's APIs on loopback; h.stop, also run at the test's
// end, closes them and stops the server (cancel, then waits for ran).
func (h *harness) listen(t *testing.T, cancel context.CancelFunc, ran <-chan struct{}) {
	api := httptest.NewServer(h.srv.APIHandler())
	envd := httptest.NewServer(h.srv.SandboxHandler())
	h.apiURL, h.envdURL = api.URL, envd.URL
	var once sync.Once
	h.stop = func() {
		once.Do(func() {
			api.Close()
			cancel()
			<-ran
			envd.Close()
		})
	}
	t.Cleanup(h.stop)
}

// testWriter sends the server's log to the test's.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

// canary is the credential the egress proxy injects: the sandbox must
// never see it.
const canary = "tok-Zq7CANARYx9-injected"

// testSecrets are the credential values the test's egress proxies
// inject.
type testSecrets map[string]string

func (s testSecrets) Get(_ context.Context, _, name string) (secret.Value, secret.Info, error) {
	v, ok := s[name]
	if !ok {
		return secret.Value{}, secret.Info{}, fmt.Errorf("no secret %s", name)
	}
	return secret.NewValue([]byte(v)), secret.Info{}, nil
}

// testNetwork gives a sandbox a real egress proxy under its template's
// policy, on a unix socket of its own, as airlock serve's wiring does.
type testNetwork struct {
	dir     string
	secrets testSecrets
}

func (n *testNetwork) Attach(ctx context.Context, a sandbox.Attachment) (func(), error) {
	doc, err := policy.Parse(a.Policy)
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(n.dir, a.Spec.ID+".sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	p, err := egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: a.Tenant, Run: a.RunID, Sandbox: a.Spec.ID}, Policy: &doc.Network, Narrow: a.Narrow,
		Secrets: n.secrets, Audit: auditSink(func(r egress.Record) {
			a.Audit(event.EgressDecision{Decision: r.Decision, Reason: r.Reason, Rule: r.Rule, Method: r.Method, Host: r.Host, Port: r.Port})
		}),
	})
	if err != nil {
		ln.Close()
		return nil, err
	}
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = p.Serve(ln)
	}()
	a.Spec.Network, a.Spec.ProxySocket, a.Spec.TrustedCAs = sandbox.NetworkProxy, sock, p.CACertPEM()
	return func() {
		_ = p.Close()
		<-served
		_ = os.Remove(sock)
	}, nil
}

type auditSink func(egress.Record)

func (f auditSink) Record(r egress.Record) { f(r) }

// upstream is a loopback HTTP server that egress tests reach through the
// proxy; it remembers the Authorization headers it saw.
type upstream struct {
	srv  *httptest.Server
	port int

	mu   sync.Mutex
	auth []string // guarded by mu
}

func newUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.auth = append(u.auth, r.Header.Get("Authorization"))
		u.mu.Unlock()
		fmt.Fprintf(w, "hello from upstream %s\n", r.Host)
	}))
	t.Cleanup(u.srv.Close)
	_, port, _ := net.SplitHostPort(u.srv.Listener.Addr().String())
	fmt.Sscan(port, &u.port)
	return u
}

func (u *upstream) seen() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.auth...)
}

// egressPolicy allows allowed.test (pinned to the upstream) and injects
// the api-token secret there.
func (u *upstream) egressPolicy() string {
	return fmt.Sprintf(`network:
  allow:
    - host: allowed.test
      ports: [%d]
  resolve:
    - host: allowed.test:%d
      to: 127.0.0.1:%d
    - host: denied.test:%d
      to: 127.0.0.1:%d
  credentials:
    - host: allowed.test
      secret: api-token
      header: Authorization
      value: "Bearer {{secret}}"
`, u.port, u.port, u.port, u.port, u.port)
}

// putPolicy stores doc as tenant's policy name.
func (h *harness) putPolicy(tenant, name, doc string) {
	h.t.Helper()
	if _, _, err := h.store.PutPolicy(context.Background(), store.PolicyVersion{Tenant: tenant, Name: name, Document: []byte(doc)}); err != nil {
		h.t.Fatal(err)
	}
}

// response is an HTTP answer read whole.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) String() string { return fmt.Sprintf("%d %s", r.status, r.body) }

// do sends a request and reads the answer.
func (h *harness) do(method, url string, header map[string]string, body io.Reader) response {
	h.t.Helper()
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		h.t.Fatal(err)
	}
	return response{status: res.StatusCode, header: res.Header, body: b}
}

// api calls the control plane as tenant.
func (h *harness) api(tenant, method, path string, body any) response {
	h.t.Helper()
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	return h.do(method, h.apiURL+path, map[string]string{"X-API-KEY": h.keys[tenant], "Content-Type": "application/json"}, r)
}

// sbx is a created sandbox as the SDK sees it.
type sbx struct {
	ID          string `json:"sandboxID"`
	TemplateID  string `json:"templateID"`
	EnvdVersion string `json:"envdVersion"`
	Token       string `json:"envdAccessToken"`
	Traffic     string `json:"trafficAccessToken"`
}

// create makes a sandbox for tenant from body.
func (h *harness) create(tenant string, body map[string]any) sbx {
	h.t.Helper()
	res := h.api(tenant, "POST", "/v2/sandboxes", body)
	if res.status != http.StatusCreated {
		h.t.Fatalf("create: %s", res)
	}
	var s sbx
	if err := json.Unmarshal(res.body, &s); err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { h.api(tenant, "DELETE", "/sandboxes/"+s.ID, nil) })
	return s
}

// envdHeaders are the headers the SDK sends to envd.
func envdHeaders(s sbx) map[string]string {
	return map[string]string{"E2b-Sandbox-Id": s.ID, "E2b-Sandbox-Port": "49983", "X-Access-Token": s.Token}
}

// unary makes a unary Connect call.
func (h *harness) unary(s sbx, method string, msg any) response {
	h.t.Helper()
	hd := envdHeaders(s)
	hd["Content-Type"] = "application/json"
	hd["Connect-Protocol-Version"] = "1"
	b, _ := json.Marshal(msg)
	return h.do("POST", h.envdURL+"/"+method, hd, bytes.NewReader(b))
}

// envelope frames msg.
func envelope(flags byte, msg []byte) []byte {
	out := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(out[1:], uint32(len(msg)))
	return append(out, msg...)
}

// frame is one decoded response envelope.
type frame struct {
	flags byte
	msg   json.RawMessage
}

// decodeFrames splits a streaming response body into envelopes.
func decodeFrames(t *testing.T, b []byte) []frame {
	t.Helper()
	var out []frame
	for len(b) > 0 {
		if len(b) < 5 {
			t.Fatalf("truncated envelope: % x", b)
		}
		n := binary.BigEndian.Uint32(b[1:5])
		if uint32(len(b)-5) < n {
			t.Fatalf("truncated envelope body")
		}
		out = append(out, frame{flags: b[0], msg: append(json.RawMessage(nil), b[5:5+n]...)})
		b = b[5+n:]
	}
	return out
}

// stream makes a server-streaming Connect call and returns its frames.
func (h *harness) stream(s sbx, method string, msg any, extra map[string]string) []frame {
	h.t.Helper()
	hd := envdHeaders(s)
	hd["Content-Type"] = "application/connect+json"
	hd["Connect-Protocol-Version"] = "1"
	for k, v := range extra {
		hd[k] = v
	}
	b, _ := json.Marshal(msg)
	res := h.do("POST", h.envdURL+"/"+method, hd, bytes.NewReader(envelope(0, b)))
	if res.status != 200 {
		h.t.Fatalf("%s: %s", method, res)
	}
	return decodeFrames(h.t, res.body)
}

// streamStarted makes a server-streaming Connect call and returns once its
// first message has arrived (a process stream's start event: the server
// holds the subscription from then on); the function it returns reads the
// rest and gives every frame.
func (h *harness) streamStarted(s sbx, method string, msg any) func() []frame {
	h.t.Helper()
	hd := envdHeaders(s)
	hd["Content-Type"] = "application/connect+json"
	hd["Connect-Protocol-Version"] = "1"
	b, _ := json.Marshal(msg)
	req, err := http.NewRequest("POST", h.envdURL+"/"+method, bytes.NewReader(envelope(0, b)))
	if err != nil {
		h.t.Fatal(err)
	}
	for k, v := range hd {
		req.Header.Set(k, v)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	if res.StatusCode != 200 {
		res.Body.Close()
		h.t.Fatalf("%s: status %d", method, res.StatusCode)
	}
	head := make([]byte, 5)
	if _, err := io.ReadFull(res.Body, head); err != nil {
		res.Body.Close()
		h.t.Fatalf("%s: first frame: %v", method, err)
	}
	first := make([]byte, binary.BigEndian.Uint32(head[1:]))
	if _, err := io.ReadFull(res.Body, first); err != nil {
		res.Body.Close()
		h.t.Fatalf("%s: first frame: %v", method, err)
	}
	return func() []frame {
		h.t.Helper()
		defer res.Body.Close()
		rest, err := io.ReadAll(res.Body)
		if err != nil {
			h.t.Fatal(err)
		}
		return decodeFrames(h.t, append(append(head, first...), rest...))
	}
}

// onlyProcess waits until s runs exactly one process, what, and returns
// its pid.
func (h *harness) onlyProcess(s sbx, what string) int {
	h.t.Helper()
	var pid int
	waitFor(h.t, what, func() bool {
		var l struct {
			Processes []struct {
				PID int `json:"pid"`
			} `json:"processes"`
		}
		_ = json.Unmarshal(h.unary(s, "process.Process/List", map[string]any{}).body, &l)
		if len(l.Processes) == 1 {
			pid = l.Processes[0].PID
		}
		return pid != 0
	})
	return pid
}

// waitFor polls cond until it holds; it bounds a wait for something the
// server does on its own (a process ending), not a speed.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30s for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func itoa(n int) string { return fmt.Sprint(n) }

// needCurl skips t unless the sandbox (the host's system directories)
// has curl.
func needCurl(t *testing.T) {
	t.Helper()
	for _, p := range []string{"/usr/bin/curl", "/bin/curl", "/usr/local/bin/curl"} {
		if _, err := os.Stat(p); err == nil {
			return
		}
	}
	t.Skip("curl is not installed, so a sandbox has none")
}
