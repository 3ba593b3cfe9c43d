package egress_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/dns/dnsmessage"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/testpki"
)

// testPKI is a CA for the test's upstream servers, standing in for a public
// CA: the proxy trusts it through policy upstream_ca.
type testPKI struct {
	ca      *testpki.CA
	pool    *x509.CertPool
	pemPath string
}

func newPKI(t testing.TB) *testPKI {
	t.Helper()
	ca, err := testpki.New("upstream test CA")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "upstream-ca.pem")
	if err := os.WriteFile(path, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return &testPKI{ca: ca, pool: ca.Pool, pemPath: path}
}

// serverConfig returns a TLS server config with a leaf for names.
func (k *testPKI) serverConfig(t testing.TB, names ...string) *tls.Config {
	t.Helper()
	cfg, err := k.ca.ServerConfig(names...)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// auditLog is the io.Writer behind the proxy's JSONL sink.
type auditLog struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (a *auditLog) Write(b []byte) (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.Write(b)
}

func (a *auditLog) raw() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.buf.String()
}

func (a *auditLog) records(t testing.TB) []egress.Record {
	t.Helper()
	var out []egress.Record
	for line := range strings.SplitSeq(strings.TrimSpace(a.raw()), "\n") {
		if line == "" {
			continue
		}
		var r egress.Record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("audit line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// waitRecords waits until at least n records were written (records of a
// connection are written when it ends, which the client does not wait for).
func (a *auditLog) waitRecords(t testing.TB, n int) []egress.Record {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		recs := a.records(t)
		if len(recs) >= n || time.Now().After(deadline) {
			if len(recs) < n {
				t.Fatalf("got %d audit records, want %d:\n%s", len(recs), n, a.raw())
			}
			return recs
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// harness is one Proxy serving a unix socket, like the per-sandbox socket.
type harness struct {
	p     *egress.Proxy
	sock  string
	audit *auditLog
	// done is closed when Serve returned serveErr.
	done     chan struct{}
	serveErr error
}

// mustPolicy parses a policy document's network section.
func mustPolicy(t testing.TB, doc string) *policy.Network {
	t.Helper()
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("policy.Parse: %v\n%s", err, doc)
	}
	return &d.Network
}

// start serves a Proxy for cfg (Identity and Audit filled in) until the
// test ends.
func start(t testing.TB, cfg egress.Config) *harness {
	t.Helper()
	h := &harness{audit: &auditLog{}, done: make(chan struct{})}
	if cfg.Identity == (bridge.Identity{}) {
		cfg.Identity = bridge.Identity{Tenant: "t1", Run: "run-1", Sandbox: "sb-1"}
	}
	cfg.Audit = egress.NewJSONLSink(h.audit)
	p, err := egress.New(cfg)
	if err != nil {
		t.Fatalf("egress.New: %v", err)
	}
	h.p = p
	dir, err := os.MkdirTemp("", "egress")
	if err != nil {
		t.Fatal(err)
	}
	h.sock = filepath.Join(dir, "s")
	l, err := net.Listen("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(h.done)
		h.serveErr = p.Serve(l)
	}()
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		<-h.done
		if h.serveErr != nil {
			t.Errorf("Serve: %v", h.serveErr)
		}
		os.RemoveAll(dir)
	})
	return h
}

// dial opens a raw connection to the proxy, as the sandbox's forwarder does.
func (h *harness) dial(t testing.TB) net.Conn {
	t.Helper()
	c, err := net.Dial("unix", h.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// client is an HTTP client configured like a tool in the sandbox:
// HTTP_PROXY and HTTPS_PROXY point at the proxy. roots are the CAs it
// trusts (the upstream's for untouched tunnels, the proxy's for inspected).
func (h *harness) client(roots *x509.CertPool) *http.Client {
	tr := &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "127.0.0.1:3128"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", h.sock)
		},
		TLSClientConfig:   &tls.Config{RootCAs: roots},
		ForceAttemptHTTP2: false,
	}
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

// proxyRoots returns a pool holding the proxy's per-run CA.
func (h *harness) proxyRoots(t testing.TB) *x509.CertPool {
	t.Helper()
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(h.p.CACertPEM()) {
		t.Fatal("CACertPEM holds no certificate")
	}
	return pool
}

// rawRequest writes a raw request on c and reads the response head.
func rawRequest(t testing.TB, c net.Conn, br *bufio.Reader, req string) *http.Response {
	t.Helper()
	if _, err := c.Write([]byte(req)); err != nil {
		t.Fatalf("write request: %v", err)
	}
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("read response to %q: %v", firstLine(req), err)
	}
	return resp
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\r\n")
	return line
}

// connect sends CONNECT target on a fresh connection and returns the
// response and the connection.
func (h *harness) connect(t testing.TB, target string) (*http.Response, net.Conn, *bufio.Reader) {
	t.Helper()
	c := h.dial(t)
	br := bufio.NewReader(c)
	resp := rawRequest(t, c, br, "CONNECT "+target+" HTTP/1.1\r\nHost: "+target+"\r\n\r\n")
	return resp, c, br
}

// readerConn reads through br (which may hold bytes after the CONNECT
// response) and writes to the conn.
type readerConn struct {
	net.Conn
	r *bufio.Reader
}

func (c readerConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// counter counts connections accepted by an upstream.
type counter struct{ n atomic.Int64 }

func (c *counter) connState(_ net.Conn, s http.ConnState) {
	if s == http.StateNew {
		c.n.Add(1)
	}
}

// store is a real encrypted secret store in a temp dir.
func newStore(t testing.TB) *secret.Store {
	t.Helper()
	dir := t.TempDir()
	s, err := secret.Open(filepath.Join(dir, "secrets"), secret.KeyFile(filepath.Join(dir, "key")))
	if err != nil {
		t.Fatalf("secret.Open: %v", err)
	}
	return s
}

func setSecret(t testing.TB, s *secret.Store, name, value string, hosts ...string) {
	t.Helper()
	if err := s.Set(context.Background(), "t1", name, secret.NewValue([]byte(value)), hosts); err != nil {
		t.Fatalf("Set(%s): %v", name, err)
	}
}

// dnsServer is a tiny authoritative DNS server on loopback UDP answering A
// records from a table, so tests resolve names through a real resolver.
type dnsServer struct {
	pc    net.PacketConn
	names map[string]netip.Addr // "name." -> address
	wg    sync.WaitGroup
}

func newDNS(t testing.TB, names map[string]string) *dnsServer {
	t.Helper()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := &dnsServer{pc: pc, names: map[string]netip.Addr{}}
	for n, a := range names {
		d.names[n+"."] = netip.MustParseAddr(a)
	}
	d.wg.Add(1)
	go d.serve()
	t.Cleanup(func() {
		pc.Close()
		d.wg.Wait()
	})
	return d
}

func (d *dnsServer) serve() {
	defer d.wg.Done()
	buf := make([]byte, 1500)
	for {
		n, from, err := d.pc.ReadFrom(buf)
		if err != nil {
			return
		}
		if resp, err := d.answer(buf[:n]); err == nil {
			_, _ = d.pc.WriteTo(resp, from)
		}
	}
}

func (d *dnsServer) answer(q []byte) ([]byte, error) {
	var p dnsmessage.Parser
	h, err := p.Start(q)
	if err != nil {
		return nil, err
	}
	question, err := p.Question()
	if err != nil {
		return nil, err
	}
	addr, known := d.names[strings.ToLower(question.Name.String())]
	rh := dnsmessage.Header{ID: h.ID, Response: true, Authoritative: true, RCode: dnsmessage.RCodeSuccess}
	if !known {
		rh.RCode = dnsmessage.RCodeNameError
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, err
	}
	if err := b.Question(question); err != nil {
		return nil, err
	}
	if err := b.StartAnswers(); err != nil {
		return nil, err
	}
	rrh := dnsmessage.ResourceHeader{Name: question.Name, Class: dnsmessage.ClassINET, TTL: 60}
	switch {
	case known && question.Type == dnsmessage.TypeA && addr.Is4():
		if err := b.AResource(rrh, dnsmessage.AResource{A: addr.As4()}); err != nil {
			return nil, err
		}
	case known && question.Type == dnsmessage.TypeAAAA && addr.Is6():
		if err := b.AAAAResource(rrh, dnsmessage.AAAAResource{AAAA: addr.As16()}); err != nil {
			return nil, err
		}
	}
	return b.Finish()
}

// resolver returns a Go resolver that asks only this server.
func (d *dnsServer) resolver() *net.Resolver {
	addr := d.pc.LocalAddr().String()
	return &net.Resolver{
		PreferGo: true,
		Dial: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var nd net.Dialer
			return nd.DialContext(ctx, "udp", addr)
		},
	}
}

// reasonOf returns the deny reason header of resp.
func reasonOf(resp *http.Response) string { return resp.Header.Get(egress.ReasonHeader) }

// isClosed reports whether reading c ends (EOF or reset) rather than times out.
func isClosed(c net.Conn, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := c.Read(make([]byte, 1))
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

func fmtPolicy(format string, args ...any) string { return fmt.Sprintf(format, args...) }
