package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/testpki"
)

// The names sandboxes use. Every one is pinned to a local upstream in every
// policy, allowed or not, so the proxy never resolves a name through DNS.
const (
	gitName    = "git.test"
	pypiName   = "pypi.test"
	npmName    = "npm.test"
	echoName   = "echo.test"
	tunnelName = "tunnel.test" // echo upstream, allowed without inspection
	deniedName = "denied.test" // echo upstream, pinned but never allowed
	deniedGit  = "denied-git.test"
	deniedPypi = "denied-pypi.test"
	deniedNpm  = "denied-npm.test"
)

// upstreams are the local servers every test shares. Each has its own port
// on 127.0.0.1 and a certificate from a test CA that only the proxy trusts
// (through policy upstream_ca).
type upstreams struct {
	caPath                string // PEM of the test CA
	git, pypi, npm, echo  *upstream
	readme                string // content of README in the git repository
	wheelName, wheelValue string
	npmValue              string
}

// seen is one request an upstream received.
type seen struct {
	SNI, Host, Method, Path, Auth string
}

// upstream is one HTTPS server that records every TLS server name and every
// request it gets.
type upstream struct {
	srv  *httptest.Server
	port int

	mu sync.Mutex
	// snis and reqs are guarded by mu.
	snis []string
	reqs []seen
}

// newUpstream starts an upstream with cfg whose handler mk makes, knowing
// the port the upstream listens on.
func newUpstream(cfg *tls.Config, mk func(port int) http.Handler) *upstream {
	u := &upstream{}
	u.srv = httptest.NewUnstartedServer(nil)
	u.port = u.srv.Listener.Addr().(*net.TCPAddr).Port
	h := mk(u.port)
	u.srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s := seen{Host: r.Host, Method: r.Method, Path: r.URL.RequestURI(), Auth: r.Header.Get("Authorization")}
		if r.TLS != nil {
			s.SNI = r.TLS.ServerName
		}
		u.mu.Lock()
		u.reqs = append(u.reqs, s)
		u.mu.Unlock()
		h.ServeHTTP(w, r)
	})
	cfg = cfg.Clone()
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		u.mu.Lock()
		u.snis = append(u.snis, hello.ServerName)
		u.mu.Unlock()
		return nil, nil
	}
	u.srv.TLS = cfg
	// Handshakes that a sandbox fails on purpose (it does not trust the
	// test CA) are not news.
	u.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	u.srv.StartTLS()
	return u
}

// handler ignores the port.
func handler(h http.Handler) func(int) http.Handler {
	return func(int) http.Handler { return h }
}

// requests returns the requests received so far.
func (u *upstream) requests() []seen {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// neverSaw fails t if any TLS server name, Host or path this upstream got
// contains s. Tests use markers no allowed request carries, so the check
// holds whatever else runs in parallel.
func (u *upstream) neverSaw(t *testing.T, s string) {
	t.Helper()
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, n := range u.snis {
		if strings.Contains(n, s) {
			t.Errorf("upstream on port %d got a TLS handshake for %q", u.port, n)
		}
	}
	for _, r := range u.reqs {
		if strings.Contains(r.Host, s) || strings.Contains(r.Path, s) {
			t.Errorf("upstream on port %d got request %+v", u.port, r)
		}
	}
}

// saw fails t unless this upstream got a request whose path starts with
// path, with TLS server name sni.
func (u *upstream) saw(t *testing.T, sni, method, path string) {
	t.Helper()
	for _, r := range u.requests() {
		if r.SNI == sni && r.Method == method && strings.HasPrefix(r.Path, path) {
			return
		}
	}
	t.Errorf("upstream on port %d never got %s %s with server name %s; got %+v", u.port, method, path, sni, u.requests())
}

func (up *upstreams) close() {
	for _, u := range []*upstream{up.git, up.pypi, up.npm, up.echo} {
		if u != nil {
			u.srv.Close()
		}
	}
}

// startUpstreams makes the test CA, the git repository, the wheel and the
// npm tarball under dir, and starts the servers.
func startUpstreams(dir string) (_ *upstreams, err error) {
	up := &upstreams{}
	defer func() {
		if err != nil {
			up.close()
		}
	}()
	tag := rand.Text()[:10]
	up.readme = "airlock e2e repository " + tag
	up.wheelValue = "airlock-e2e-wheel-" + tag
	up.npmValue = "airlock-e2e-npm-" + tag

	cfg, caPEM, err := testPKI(gitName, pypiName, npmName, echoName, tunnelName,
		deniedName, deniedGit, deniedPypi, deniedNpm, "localhost", "127.0.0.1")
	if err != nil {
		return nil, err
	}
	up.caPath = filepath.Join(dir, "upstream-ca.pem")
	if err := os.WriteFile(up.caPath, caPEM, 0o644); err != nil {
		return nil, err
	}

	repos, err := gitRepository(dir, up.readme)
	if err != nil {
		return nil, err
	}
	up.git = newUpstream(cfg, handler(&cgi.Handler{
		Path: gitHTTPBackend(),
		Env:  []string{"GIT_PROJECT_ROOT=" + repos, "GIT_HTTP_EXPORT_ALL=1"},
	}))

	wheel, name, err := buildWheel(up.wheelValue)
	if err != nil {
		return nil, err
	}
	up.wheelName = name
	up.pypi = newUpstream(cfg, handler(pypiIndex(wheel, name)))

	tgz, err := buildNpmTarball(up.npmValue)
	if err != nil {
		return nil, err
	}
	up.npm = newUpstream(cfg, func(port int) http.Handler { return npmRegistry(tgz, port) })

	up.echo = newUpstream(cfg, handler(http.HandlerFunc(echo)))
	return up, nil
}

// echo answers with what the request carried, the Authorization header in
// the body and in a response header, as a careless (or hostile) API would.
func echo(w http.ResponseWriter, r *http.Request) {
	auth := r.Header.Get("Authorization")
	w.Header().Set("X-Echo-Auth", auth)
	w.Header().Set("Content-Type", "text/plain")
	fmt.Fprintf(w, "method=%s\nhost=%s\npath=%s\nauth=%s\n", r.Method, r.Host, r.URL.RequestURI(), auth)
}

// testPKI returns a TLS server config with a leaf for names, signed by a
// fresh test CA, and the CA in PEM form.
func testPKI(names ...string) (*tls.Config, []byte, error) {
	ca, err := testpki.New("airlock e2e upstream CA")
	if err != nil {
		return nil, nil, err
	}
	cfg, err := ca.ServerConfig(names...)
	if err != nil {
		return nil, nil, err
	}
	return cfg, ca.PEM, nil
}

// gitHTTPBackend is git's smart-HTTP CGI program, or "" when git has none.
func gitHTTPBackend() string {
	out, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		return ""
	}
	p := filepath.Join(strings.TrimSpace(string(out)), "git-http-backend")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// gitRepository makes repos/repo.git, a bare repository with one commit
// holding README, and returns repos. Without git it returns an empty
// directory (the git test skips).
func gitRepository(dir, readme string) (string, error) {
	repos := filepath.Join(dir, "repos")
	if err := os.MkdirAll(repos, 0o755); err != nil {
		return "", err
	}
	if gitHTTPBackend() == "" {
		return repos, nil
	}
	src := filepath.Join(dir, "repo-src")
	if err := os.MkdirAll(src, 0o755); err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(src, "README"), []byte(readme+"\n"), 0o644); err != nil {
		return "", err
	}
	env := []string{
		"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=" + os.DevNull,
		"GIT_AUTHOR_NAME=e2e", "GIT_AUTHOR_EMAIL=e2e@airlock.test",
		"GIT_COMMITTER_NAME=e2e", "GIT_COMMITTER_EMAIL=e2e@airlock.test",
	}
	for _, args := range [][]string{
		{"-C", src, "init", "-q", "-b", "main"},
		{"-C", src, "add", "README"},
		{"-C", src, "commit", "-q", "-m", "e2e"},
		{"clone", "-q", "--bare", src, filepath.Join(repos, "repo.git")},
	} {
		cmd := exec.Command("git", args...)
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return repos, nil
}

// buildWheel returns a pure-Python wheel of package airlocktest 1.0.0 whose
// module says value, and its file name.
func buildWheel(value string) ([]byte, string, error) {
	const dist = "airlocktest-1.0.0.dist-info"
	files := []struct{ name, body string }{
		{"airlocktest/__init__.py", fmt.Sprintf("VALUE = %q\n", value)},
		{dist + "/METADATA", "Metadata-Version: 2.1\nName: airlocktest\nVersion: 1.0.0\nSummary: airlock e2e test package\n"},
		{dist + "/WHEEL", "Wheel-Version: 1.0\nGenerator: airlock-e2e\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
	}
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	var record strings.Builder
	for _, f := range files {
		w, err := zw.Create(f.name)
		if err != nil {
			return nil, "", err
		}
		if _, err := io.WriteString(w, f.body); err != nil {
			return nil, "", err
		}
		sum := sha256.Sum256([]byte(f.body))
		fmt.Fprintf(&record, "%s,sha256=%s,%d\n", f.name, base64.RawURLEncoding.EncodeToString(sum[:]), len(f.body))
	}
	fmt.Fprintf(&record, "%s/RECORD,,\n", dist)
	w, err := zw.Create(dist + "/RECORD")
	if err != nil {
		return nil, "", err
	}
	if _, err := io.WriteString(w, record.String()); err != nil {
		return nil, "", err
	}
	if err := zw.Close(); err != nil {
		return nil, "", err
	}
	return buf.Bytes(), "airlocktest-1.0.0-py3-none-any.whl", nil
}

// pypiIndex serves a PEP 503 simple index with one project, airlocktest.
func pypiIndex(wheel []byte, name string) http.Handler {
	sum := sha256.Sum256(wheel)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /simple/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, `<!DOCTYPE html><html><body><a href="/simple/airlocktest/">airlocktest</a></body></html>`)
	})
	mux.HandleFunc("GET /simple/airlocktest/{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<!DOCTYPE html><html><body><a href="/files/%s#sha256=%s">%s</a></body></html>`,
			name, hex.EncodeToString(sum[:]), name)
	})
	mux.HandleFunc("GET /files/"+name, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(wheel)
	})
	return mux
}

// buildNpmTarball returns the .tgz of package airlocktest 1.0.0, whose main
// module exports value.
func buildNpmTarball(value string) ([]byte, error) {
	files := []struct{ name, body string }{
		{"package/package.json", `{"name":"airlocktest","version":"1.0.0","main":"index.js","license":"MIT"}` + "\n"},
		{"package/index.js", fmt.Sprintf("module.exports = %q;\n", value)},
	}
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, f := range files {
		hdr := &tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.body)), Typeflag: tar.TypeReg, ModTime: time.Unix(499162500, 0)}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := io.WriteString(tw, f.body); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := gz.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// npmRegistry serves a registry with one package, airlocktest 1.0.0, whose
// tarball is on the same server (npm.test:port).
func npmRegistry(tgz []byte, port int) http.Handler {
	sha1sum := sha1.Sum(tgz)
	sha512sum := sha512.Sum512(tgz)
	version := map[string]any{
		"name": "airlocktest", "version": "1.0.0", "main": "index.js", "license": "MIT",
		"dist": map[string]any{
			"tarball":   fmt.Sprintf("https://%s:%d/airlocktest/-/airlocktest-1.0.0.tgz", npmName, port),
			"shasum":    hex.EncodeToString(sha1sum[:]),
			"integrity": "sha512-" + base64.StdEncoding.EncodeToString(sha512sum[:]),
		},
	}
	packument, _ := json.Marshal(map[string]any{
		"name":      "airlocktest",
		"dist-tags": map[string]string{"latest": "1.0.0"},
		"versions":  map[string]any{"1.0.0": version},
		"time":      map[string]string{"1.0.0": "1985-10-26T08:15:00.000Z"},
	})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /airlocktest", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write(packument)
	})
	mux.HandleFunc("GET /airlocktest/-/airlocktest-1.0.0.tgz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(tgz)
	})
	return mux
}

// policyOptions vary the shared policy.
type policyOptions struct {
	// credentials is a YAML list (indented for network:) appended as
	// network.credentials.
	credentials string
	// echoMethods, when set, makes echo.test inspected for these methods.
	echoMethods string
}

// policy returns a policy document that allows git.test, pypi.test,
// npm.test, echo.test and tunnel.test on their upstream's port, pins every
// name the tests use (denied ones too) to its local upstream, and trusts the
// test CA for upstreams. Every allowed name but tunnel.test is inspected
// (the proxy terminates TLS with its per-run CA, which the sandbox trusts,
// and re-originates it to the upstream, which only the proxy trusts).
func (up *upstreams) policy(o policyOptions) string {
	var b strings.Builder
	b.WriteString("network:\n  default: deny\n  allow:\n")
	rule := func(name string, port int, extra string) {
		fmt.Fprintf(&b, "    - host: %s\n      ports: [%d]\n%s", name, port, extra)
	}
	rule(gitName, up.git.port, "      methods: [GET, POST]\n")
	rule(pypiName, up.pypi.port, "      methods: [GET]\n      paths: [/simple/, /files/]\n")
	rule(npmName, up.npm.port, "      methods: [GET]\n")
	if o.echoMethods != "" {
		rule(echoName, up.echo.port, "      methods: ["+o.echoMethods+"]\n")
	} else {
		rule(echoName, up.echo.port, "")
	}
	rule(tunnelName, up.echo.port, "")
	b.WriteString("  resolve:\n")
	for _, p := range []struct {
		name string
		u    *upstream
	}{
		{gitName, up.git},
		{deniedGit, up.git},
		{pypiName, up.pypi},
		{deniedPypi, up.pypi},
		{npmName, up.npm},
		{deniedNpm, up.npm},
		{echoName, up.echo},
		{tunnelName, up.echo},
		{deniedName, up.echo},
	} {
		fmt.Fprintf(&b, "    - host: %s:%d\n      to: 127.0.0.1:%d\n", p.name, p.u.port, p.u.port)
	}
	// echo.test on a port its rule does not open (TestCurl asks for it).
	fmt.Fprintf(&b, "    - host: %s:%d\n      to: 127.0.0.1:%d\n", echoName, up.git.port, up.git.port)
	fmt.Fprintf(&b, "  upstream_ca: %s\n", up.caPath)
	if o.credentials != "" {
		b.WriteString("  credentials:\n" + o.credentials)
	}
	return b.String()
}
