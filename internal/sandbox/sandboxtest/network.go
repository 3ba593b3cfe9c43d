package sandboxtest

import (
	"bufio"
	"crypto/tls"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/testpki"
)

// testNetwork checks the proxy plumbing: in proxy mode, connections to the
// sandbox's loopback proxy port reach the host's socket, the usual proxy
// variables point there, and TrustedCAs land in the trust store that real
// clients read. The host side here is a plain forward proxy written for the
// test; the policy-aware egress proxy has its own tests.
func (s *suite) testNetwork(t *testing.T) {
	t.Run("ProxyEnv", func(t *testing.T) {
		t.Parallel()
		hp := startHostProxy(t, nil)
		sb := s.create(t, sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: hp.socket})
		out := mustSh(t, sb, "env | grep -i _proxy= | sort")
		for _, want := range []string{
			"HTTP_PROXY=http://127.0.0.1:3128", "HTTPS_PROXY=http://127.0.0.1:3128",
			"http_proxy=http://127.0.0.1:3128", "https_proxy=http://127.0.0.1:3128",
		} {
			if !strings.Contains(out, want+"\n") {
				t.Errorf("proxy environment %q lacks %s", out, want)
			}
		}
	})

	t.Run("HTTPThroughProxy", func(t *testing.T) {
		t.Parallel()
		needTool(t, "curl")
		hp := startHostProxy(t, nil)
		sb := s.create(t, sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: hp.socket})
		out := mustSh(t, sb, "curl -sS --max-time 20 http://upstream.test/hello; curl -sS --max-time 20 http://upstream.test/again")
		if out != "host says hello\nhost says again\n" {
			t.Errorf("curl through the proxy printed %q", out)
		}
		if got := hp.requests(); len(got) != 2 || got[0] != "GET http://upstream.test/hello" {
			t.Errorf("host proxy saw %q, want two absolute-form GETs", got)
		}
	})

	t.Run("ManyConnections", func(t *testing.T) {
		t.Parallel()
		needTool(t, "curl")
		hp := startHostProxy(t, nil)
		sb := s.create(t, sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: hp.socket})
		out := mustSh(t, sb, `for i in $(seq 1 20); do curl -sS --max-time 20 -o /dev/null -w '%{http_code}\n' http://upstream.test/$i & done; wait`)
		if n := strings.Count(out, "200\n"); n != 20 {
			t.Errorf("20 parallel requests through the proxy: %d answered 200 (%q)", n, out)
		}
	})

	t.Run("TrustedCAs", func(t *testing.T) {
		t.Parallel()
		needTool(t, "curl")
		ca := newTestCA(t)
		hp := startHostProxy(t, serverConfig(t, ca, "secure.test"))
		spec := sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: hp.socket, TrustedCAs: ca.PEM}
		sb := s.create(t, spec)
		// curl reads the system bundle (and CURL_CA_BUNDLE); the CA is in it,
		// so the TLS handshake with the host's test server verifies.
		out := mustSh(t, sb, "curl -sS --max-time 20 https://secure.test/tls")
		if out != "host says tls\n" {
			t.Errorf("curl over TLS through the proxy printed %q", out)
		}
		env := mustSh(t, sb, "echo $SSL_CERT_FILE $NODE_EXTRA_CA_CERTS $GIT_SSL_CAINFO; cat /etc/airlock/ca.pem")
		if !strings.Contains(env, string(ca.PEM)) || !strings.HasPrefix(env, "/etc/") {
			t.Errorf("trust variables and /etc/airlock/ca.pem: %q", env)
		}
		// Without the CA the same request fails verification.
		plain := s.create(t, sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: hp.socket})
		if _, _, r := sh(t, plain, "curl -sS --max-time 20 https://secure.test/tls"); r.ExitCode == 0 {
			t.Errorf("curl trusted the test CA in a sandbox that was not given it")
		}
	})
}

func needTool(t *testing.T, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		t.Skipf("%s is not installed on the host", name)
	}
}

// hostProxy is a minimal HTTP forward proxy on a unix socket that answers
// every absolute-form request itself and, for CONNECT, terminates TLS with
// tlsConf (if any) and answers inside the tunnel. It never dials anywhere.
type hostProxy struct {
	socket string
	mu     sync.Mutex
	seen   []string
}

func (h *hostProxy) requests() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.seen...)
}

func startHostProxy(t *testing.T, tlsConf *tls.Config) *hostProxy {
	t.Helper()
	h := &hostProxy{socket: filepath.Join(shortTempDir(t), "egress.sock")}
	ln, err := sandbox.ListenProxySocket(h.socket)
	if err != nil {
		t.Fatal(err)
	}
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "host says "+strings.TrimPrefix(r.URL.Path, "/")+"\n")
	})
	var tunnels atomic.Int64
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.seen = append(h.seen, r.Method+" "+r.RequestURI)
		h.mu.Unlock()
		if r.Method != http.MethodConnect {
			answer(w, r)
			return
		}
		if tlsConf == nil {
			http.Error(w, "no tunnels", http.StatusForbidden)
			return
		}
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		tunnels.Add(1)
		go func() {
			defer conn.Close()
			io.WriteString(conn, "HTTP/1.1 200 Connection established\r\n\r\n")
			tc := tls.Server(conn, tlsConf)
			br := bufio.NewReader(tc)
			req, err := http.ReadRequest(br)
			if err != nil {
				return
			}
			body := "host says " + strings.TrimPrefix(req.URL.Path, "/") + "\n"
			resp := &http.Response{
				StatusCode: 200, ProtoMajor: 1, ProtoMinor: 1, ContentLength: int64(len(body)),
				Body: io.NopCloser(strings.NewReader(body)), Close: true, Header: http.Header{},
			}
			_ = resp.Write(tc)
			_ = tc.Close()
		}()
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return h
}

func newTestCA(t *testing.T) *testpki.CA {
	t.Helper()
	ca, err := testpki.New("airlock sandboxtest CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func serverConfig(t *testing.T, ca *testpki.CA, host string) *tls.Config {
	t.Helper()
	cfg, err := ca.ServerConfig(host)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// shortTempDir is a temporary directory with a short path: a unix socket's
// path must fit in 108 bytes, and t.TempDir's can be longer.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "al-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
