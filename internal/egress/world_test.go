package egress_test

import (
	"compress/gzip"
	"crypto/tls"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/secret"
)

// upstream is a real HTTP(S) server on loopback that shows tests what
// reached it.
type upstream struct {
	srv   *httptest.Server
	conns counter
	// hellos counts TLS ClientHellos by SNI.
	hellos sync.Map // string -> *atomic.Int64

	mu sync.Mutex
	// seen is guarded by mu: the requests that reached the upstream.
	seen []seenRequest
}

type seenRequest struct {
	Method string
	URL    *url.URL
	Header http.Header
	Host   string
}

func newUpstream(t testing.TB, pki *testPKI, tlsNames ...string) *upstream {
	t.Helper()
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(u.handler())
	u.srv.Config.ConnState = u.conns.connState
	// Handshakes the proxy refuses midway are expected; keep them quiet.
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	if len(tlsNames) > 0 {
		cfg := pki.serverConfig(t, tlsNames...)
		cfg.GetConfigForClient = func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			v, _ := u.hellos.LoadOrStore(h.ServerName, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
			return nil, nil
		}
		u.srv.TLS = cfg
		u.srv.StartTLS()
	} else {
		u.srv.Start()
	}
	t.Cleanup(u.srv.Close)
	return u
}

// addr is the upstream's "127.0.0.1:port".
func (u *upstream) addr() string { return u.srv.Listener.Addr().String() }

func (u *upstream) port() int {
	_, p, _ := strings.Cut(u.addr(), ":")
	n, _ := strconv.Atoi(p)
	return n
}

func (u *upstream) hellosFor(sni string) int64 {
	v, ok := u.hellos.Load(sni)
	if !ok {
		return 0
	}
	return v.(*atomic.Int64).Load()
}

func (u *upstream) requests() []seenRequest {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]seenRequest(nil), u.seen...)
}

func (u *upstream) last(t testing.TB) seenRequest {
	t.Helper()
	r := u.requests()
	if len(r) == 0 {
		t.Fatal("no request reached the upstream")
	}
	return r[len(r)-1]
}

// handler serves:
//
//	/echo   headers and query echoed in response headers and body
//	/split  the Authorization value, one byte per flushed chunk
//	/gzip   the echo body gzip-encoded (whatever Accept-Encoding said)
//	/big?n= n bytes of 'x'
//	/bighead a 100 KiB response header
//	anything else: "ok <path>"
func (u *upstream) handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u.mu.Lock()
		u.seen = append(u.seen, seenRequest{Method: r.Method, URL: r.URL, Header: r.Header.Clone(), Host: r.Host})
		u.mu.Unlock()
		auth := r.Header.Get("Authorization")
		switch r.URL.Path {
		case "/echo":
			w.Header().Set("X-Echo-Auth", auth)
			w.Header().Set("X-Echo-Query", r.URL.RawQuery)
			fmt.Fprint(w, echoBody(r))
		case "/split":
			f := w.(http.Flusher)
			for i := range len(auth) {
				_, _ = w.Write([]byte{auth[i]})
				f.Flush()
			}
		case "/gzip":
			w.Header().Set("Content-Encoding", "gzip")
			zw := gzip.NewWriter(w)
			fmt.Fprint(zw, echoBody(r))
			_ = zw.Close()
		case "/bighead":
			w.Header().Set("X-Big", strings.Repeat("h", 100<<10))
		case "/big":
			n, _ := strconv.Atoi(r.URL.Query().Get("n"))
			w.Header().Set("Content-Length", strconv.Itoa(n))
			_, _ = w.Write([]byte(strings.Repeat("x", n)))
		default:
			fmt.Fprintf(w, "ok %s", r.URL.Path)
		}
	})
}

func echoBody(r *http.Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "method=%s\npath=%s\nquery=%s\n", r.Method, r.URL.Path, r.URL.RawQuery)
	keys := make([]string, 0, len(r.Header))
	for k := range r.Header {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, strings.Join(r.Header[k], ", "))
	}
	return b.String()
}

// Secret values used by the world; none may ever reach the sandbox side.
const (
	ghToken   = "ghp_S3cretTokenValue_0123456789"
	basicPW   = "basic-Passw0rd-Secret"
	apiKey    = "k3y&with=odd chars"
	elsewhere = "bound-elsewhere-secret-value"
)

// world is the standard scene: a plain and a TLS upstream on loopback,
// reached through resolve pins, a secret store, and a Proxy whose policy
// names them.
type world struct {
	pki    *testPKI
	plain  *upstream
	tls    *upstream
	store  *secret.Store
	red    *secret.Redactor
	h      *harness
	policy string
}

// worldPolicy is the policy of the standard world. Hosts:
//
//	open.test      plain HTTP, no credential
//	plain.test     plain HTTP, header credential
//	tunnel.test    HTTPS, tunnelled untouched
//	api.test       HTTPS, header credential (inspected)
//	inspect.test   HTTPS, GET under /repos/ only (inspected)
//	basic.test     HTTPS, basic auth credential
//	query.test     HTTPS, query credential
//	unbound.test   HTTPS, credential whose secret is bound to another host
//	missing.test   HTTPS, credential naming a secret that does not exist
const worldPolicy = `
network:
  default: deny
  upstream_ca: %[1]s
  resolve:
    - {host: "open.test:80", to: "%[2]s"}
    - {host: "plain.test:80", to: "%[2]s"}
    - {host: "tunnel.test:443", to: "%[3]s"}
    - {host: "api.test:443", to: "%[3]s"}
    - {host: "inspect.test:443", to: "%[3]s"}
    - {host: "basic.test:443", to: "%[3]s"}
    - {host: "query.test:443", to: "%[3]s"}
    - {host: "unbound.test:443", to: "%[3]s"}
    - {host: "missing.test:443", to: "%[3]s"}
  allow:
    - {host: open.test, ports: [80]}
    - {host: plain.test, ports: [80]}
    - {host: tunnel.test, ports: [443]}
    - {host: api.test, ports: [443]}
    - {host: inspect.test, ports: [443], methods: [GET], paths: ["/repos/"]}
    - {host: basic.test, ports: [443]}
    - {host: query.test, ports: [443]}
    - {host: unbound.test, ports: [443]}
    - {host: missing.test, ports: [443]}
  credentials:
    - {host: api.test, secret: gh_token, header: Authorization, value: "Bearer {{secret}}"}
    - {host: plain.test, secret: gh_token, header: Authorization, value: "Bearer {{secret}}"}
    - {host: basic.test, secret: basic_pw, basic_user: bob}
    - {host: query.test, secret: api_key, query: key}
    - {host: unbound.test, secret: elsewhere, header: X-Token}
    - {host: missing.test, secret: nosuch, header: X-Token}
`

var tlsNames = []string{"tunnel.test", "api.test", "inspect.test", "basic.test", "query.test", "unbound.test", "missing.test"}

func newWorld(t testing.TB, mod func(*egress.Config)) *world {
	t.Helper()
	w := &world{pki: newPKI(t)}
	w.plain = newUpstream(t, w.pki)
	w.tls = newUpstream(t, w.pki, tlsNames...)
	w.store = newStore(t)
	setSecret(t, w.store, "gh_token", ghToken)
	setSecret(t, w.store, "basic_pw", basicPW)
	setSecret(t, w.store, "api_key", apiKey)
	setSecret(t, w.store, "elsewhere", elsewhere, "elsewhere.test")
	w.red = secret.NewRedactor()
	w.policy = fmtPolicy(worldPolicy, w.pki.pemPath, w.plain.addr(), w.tls.addr())
	cfg := egress.Config{
		Policy:   mustPolicy(t, w.policy),
		Secrets:  w.store,
		Redactor: w.red,
	}
	if mod != nil {
		mod(&cfg)
	}
	w.h = start(t, cfg)
	return w
}
