package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// unsetNoProxy makes a client inside the sandbox send even loopback
// destinations to the proxy: the sandbox's NO_PROXY names localhost and
// 127.0.0.1, whose requests otherwise stay on the sandbox's own loopback.
const unsetNoProxy = "env -u NO_PROXY -u no_proxy "

// TestCurl: curl reaches allowed names through the proxy (inspected, and as
// a plain tunnel that only the upstream's own CA verifies) and is refused,
// with the reason header, for names and addresses the policy does not
// allow, also loopback ones a pin could reach under another name.
func TestCurl(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "curl")
	ws := t.TempDir()
	ca, err := os.ReadFile(up.caPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "upstream-ca.pem"), ca, 0o644); err != nil {
		t.Fatal(err)
	}
	pol := h.writePolicy(t, up.policy(policyOptions{echoMethods: "GET, HEAD"}))
	e := up.echo.port
	t.Run("sandbox", func(t *testing.T) {
		h.runChecks(t, []string{"--policy", pol, "--workspace", ws}, []check{{
			name:   "allowed inspected GET",
			script: fmt.Sprintf("curl -sS --fail https://%s:%d/curl-get", echoName, e),
			stdout: []string{"method=GET\n", "path=/curl-get\n"},
		}, {
			name:   "allowed tunnel verified with the upstream's CA",
			script: fmt.Sprintf("curl -sS --fail --cacert /workspace/upstream-ca.pem https://%s:%d/curl-tunnel", tunnelName, e),
			stdout: []string{"path=/curl-tunnel\n"},
		}, {
			// The proxy passes a tunnel's TLS through: the sandbox
			// sees the upstream's certificate, not one of the proxy's.
			name:   "allowed tunnel is not terminated by the proxy",
			script: fmt.Sprintf("curl -sS https://%s:%d/curl-tunnel-untrusted", tunnelName, e),
			code:   60,
			stderr: []string{"certificate"},
		}, {
			name:   "unlisted name over CONNECT",
			script: fmt.Sprintf("curl -sS -v https://%s:%d/curl-denied", deniedName, e),
			code:   56,
			stderr: []string{"HTTP/1.1 403", "X-Airlock-Deny-Reason: policy:no_rule"},
		}, {
			name:   "unlisted name over plain HTTP",
			script: fmt.Sprintf("curl -sS -D - -o /dev/null http://%s:%d/curl-denied-plain", deniedName, e),
			stdout: []string{"HTTP/1.1 403", "X-Airlock-Deny-Reason: policy:no_rule"},
		}, {
			name:   "method the inspected host does not allow",
			script: fmt.Sprintf("curl -sS -D - -o /dev/null -X DELETE https://%s:%d/curl-denied-method", echoName, e),
			stdout: []string{"HTTP/1.1 403", "X-Airlock-Deny-Reason: policy:method"},
		}, {
			name:   "port the rule does not allow",
			script: fmt.Sprintf("curl -sS -v https://%s:%d/curl-denied-port", echoName, up.git.port),
			code:   56,
			stderr: []string{"HTTP/1.1 403", "X-Airlock-Deny-Reason: policy:port"},
		}, {
			name:   "loopback address through the proxy",
			script: unsetNoProxy + fmt.Sprintf("curl -sS -v https://127.0.0.1:%d/curl-direct", e),
			code:   56,
			stderr: []string{"HTTP/1.1 403", "X-Airlock-Deny-Reason: policy:no_rule"},
		}, {
			name:   "localhost through the proxy",
			script: unsetNoProxy + fmt.Sprintf("curl -sS -D - -o /dev/null http://localhost:%d/curl-direct", e),
			stdout: []string{"HTTP/1.1 403", "X-Airlock-Deny-Reason: policy:no_rule"},
		}, {
			// NO_PROXY sends these to the sandbox's own loopback,
			// where nothing of the host listens.
			name:   "loopback address directly",
			script: fmt.Sprintf("curl -sS https://127.0.0.1:%d/curl-direct", e),
			code:   7,
		}, {
			name:   "localhost directly",
			script: fmt.Sprintf("curl -sS http://localhost:%d/curl-direct", e),
			code:   7,
		}, {
			// There is no DNS inside: without the proxy a name
			// goes nowhere.
			name:   "allowed name without the proxy",
			script: fmt.Sprintf("curl -sS --noproxy '*' https://%s:%d/curl-direct", echoName, e),
			code:   6,
		}})
	})
	up.echo.saw(t, echoName, "GET", "/curl-get")
	up.echo.saw(t, tunnelName, "GET", "/curl-tunnel")
	up.echo.neverSaw(t, deniedName)
	up.echo.neverSaw(t, "/curl-denied")
	up.echo.neverSaw(t, "/curl-direct")
	up.git.neverSaw(t, "/curl-")
}

// TestGit: git clones over smart HTTP (GET and POST) from an allowed name
// through the inspecting proxy, and cannot clone from a name or address the
// policy does not allow, though both lead to the same server.
func TestGit(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "git")
	if gitHTTPBackend() == "" {
		t.Skip("git has no git-http-backend for the test server")
	}
	pol := h.writePolicy(t, up.policy(policyOptions{}))
	g := up.git.port
	t.Run("sandbox", func(t *testing.T) {
		h.runChecks(t, []string{"--policy", pol}, []check{{
			name:   "clone from an allowed name",
			script: fmt.Sprintf("git clone -q https://%s:%d/repo.git /tmp/r && cat /tmp/r/README", gitName, g),
			stdout: []string{up.readme},
		}, {
			name:   "clone from an unlisted name",
			script: fmt.Sprintf("git clone -q https://%s:%d/repo.git /tmp/r", deniedGit, g),
			code:   128,
			stderr: []string{"403"},
		}, {
			name:   "clone from the loopback address through the proxy",
			script: unsetNoProxy + fmt.Sprintf("git clone -q https://127.0.0.1:%d/repo.git /tmp/r", g),
			code:   128,
			stderr: []string{"403"},
		}, {
			name:   "clone from the loopback address directly",
			script: fmt.Sprintf("git clone -q https://127.0.0.1:%d/repo.git /tmp/r", g),
			code:   128,
		}})
	})
	up.git.saw(t, gitName, "GET", "/repo.git/info/refs?service=git-upload-pack")
	up.git.saw(t, gitName, "POST", "/repo.git/git-upload-pack")
	up.git.neverSaw(t, deniedGit)
	up.git.neverSaw(t, "127.0.0.1")
}

// needPip skips t unless the sandbox's python3 has pip.
func needPip(t *testing.T) {
	t.Helper()
	py := needTool(t, "python3")
	if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
		t.Skipf("%s has no pip: %v: %s", py, err, out)
	}
}

// TestPip: pip downloads and installs from an allowed PEP 503 index through
// the proxy, and gets nothing from an index under an unlisted name.
func TestPip(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needPip(t)
	pol := h.writePolicy(t, up.policy(policyOptions{}))
	// No self version check: it would ask pypi.org (refused, but noisy).
	flags := []string{"--policy", pol, "-e", "PIP_DISABLE_PIP_VERSION_CHECK=1", "-e", "PIP_NO_INPUT=1"}
	pip := "python3 -m pip %s --no-cache-dir --retries 0 --index-url https://%s:%d/simple/ %s"
	p := up.pypi.port
	t.Run("sandbox", func(t *testing.T) {
		h.runChecks(t, flags, []check{{
			name:   "download",
			script: fmt.Sprintf(pip, "download --no-deps -d /tmp/w", pypiName, p, "airlocktest") + " && ls /tmp/w",
			stdout: []string{up.wheelName},
		}, {
			name: "install and import",
			script: fmt.Sprintf(pip, "install --target /tmp/t", pypiName, p, "airlocktest") +
				` && python3 -c 'import sys; sys.path.insert(0, "/tmp/t"); import airlocktest; print(airlocktest.VALUE)'`,
			stdout: []string{up.wheelValue},
		}, {
			// -vv: pip logs why it could not fetch at debug level.
			name:   "unlisted index",
			script: fmt.Sprintf(pip, "download -vv --no-deps -d /tmp/w", deniedPypi, p, "airlocktest"),
			code:   1,
			stdout: []string{"Tunnel connection failed: 403"},
			stderr: []string{"No matching distribution found for airlocktest", "airlock: egress: 1 request(s) refused by policy"},
		}})
	})
	up.pypi.saw(t, pypiName, "GET", "/simple/airlocktest/")
	up.pypi.saw(t, pypiName, "GET", "/files/"+up.wheelName)
	up.pypi.neverSaw(t, deniedPypi)
}

// fetchPy fetches argv[1] with urllib (POSTing argv[2] when given) and
// prints the status and body, or the error; exit 3 for an HTTP error, 4
// for any other failure.
const fetchPy = `
import sys, urllib.request, urllib.error
data = sys.argv[2].encode() if len(sys.argv) > 2 else None
try:
    r = urllib.request.urlopen(sys.argv[1], data=data, timeout=60)
    print("status", r.status)
    print(r.read().decode())
except urllib.error.HTTPError as e:
    print("HTTPError", e.code, e.headers.get("X-Airlock-Deny-Reason"))
    sys.exit(3)
except urllib.error.URLError as e:
    print("URLError", e.reason)
    sys.exit(4)
`

// TestPythonURLLib: Python's urllib follows HTTPS_PROXY and the trust store
// to an allowed name, and gets the proxy's refusal (an HTTPError with the
// reason header where the proxy can answer in HTTP) everywhere else.
func TestPythonURLLib(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "python3")
	pol := h.writePolicy(t, up.policy(policyOptions{echoMethods: "GET"}))
	e := up.echo.port
	fetch := func(url string, post ...string) string {
		s := "python3 -c " + shq(fetchPy) + " " + shq(url)
		for _, p := range post {
			s += " " + shq(p)
		}
		return s
	}
	t.Run("sandbox", func(t *testing.T) {
		h.runChecks(t, []string{"--policy", pol}, []check{{
			name:   "allowed name",
			script: fetch(fmt.Sprintf("https://%s:%d/urllib-get", echoName, e)),
			stdout: []string{"status 200", "path=/urllib-get\n"},
		}, {
			name:   "unlisted name over plain HTTP",
			script: fetch(fmt.Sprintf("http://%s:%d/urllib-denied", deniedName, e)),
			code:   3,
			stdout: []string{"HTTPError 403 policy:no_rule"},
		}, {
			// urllib reports a refused CONNECT as a tunnel error and
			// keeps no headers of it.
			name:   "unlisted name over CONNECT",
			script: fetch(fmt.Sprintf("https://%s:%d/urllib-denied", deniedName, e)),
			code:   4,
			stdout: []string{"URLError Tunnel connection failed: 403"},
		}, {
			name:   "method the inspected host does not allow",
			script: fetch(fmt.Sprintf("https://%s:%d/urllib-denied-post", echoName, e), "body"),
			code:   3,
			stdout: []string{"HTTPError 403 policy:method"},
		}, {
			name:   "path the inspected host does not allow",
			script: fetch(fmt.Sprintf("https://%s:%d/urllib-denied-path", pypiName, up.pypi.port)),
			code:   3,
			stdout: []string{"HTTPError 403 policy:path"},
		}, {
			name:   "loopback address through the proxy",
			script: unsetNoProxy + fetch(fmt.Sprintf("http://127.0.0.1:%d/urllib-direct", e)),
			code:   3,
			stdout: []string{"HTTPError 403 policy:no_rule"},
		}})
	})
	up.echo.saw(t, echoName, "GET", "/urllib-get")
	up.echo.neverSaw(t, "/urllib-denied")
	up.echo.neverSaw(t, "/urllib-direct")
	up.pypi.neverSaw(t, "/urllib-denied")
}

// npmFlags configure npm for a sandbox: a writable cache, no retries, and
// none of the extra requests (update check, audit, funding) npm would make.
var npmFlags = []string{
	"-e", "npm_config_cache=/tmp/npmcache", "-e", "npm_config_fetch_retries=0",
	"-e", "npm_config_update_notifier=false", "-e", "npm_config_audit=false", "-e", "npm_config_fund=false",
}

// TestNpm: npm reads a package document and fetches its tarball from an
// allowed registry through the proxy, and gets nothing from a registry
// under an unlisted name.
func TestNpm(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "npm")
	needTool(t, "node")
	pol := h.writePolicy(t, up.policy(policyOptions{}))
	reg := fmt.Sprintf("--registry https://%s:%d/", npmName, up.npm.port)
	t.Run("sandbox", func(t *testing.T) {
		h.runChecks(t, append([]string{"--policy", pol}, npmFlags...), []check{{
			name:   "view",
			script: "npm view airlocktest version " + reg,
			stdout: []string{"1.0.0"},
		}, {
			name: "install and require",
			script: "npm install --prefix /tmp/n " + reg + " airlocktest" +
				` && node -e 'console.log(require("/tmp/n/node_modules/airlocktest"))'`,
			stdout: []string{up.npmValue},
		}, {
			name:   "pack",
			script: "cd /tmp && npm pack " + reg + " airlocktest && tar -xzOf airlocktest-1.0.0.tgz package/index.js",
			stdout: []string{up.npmValue},
		}, {
			name:   "unlisted registry",
			script: fmt.Sprintf("npm view airlocktest version --registry https://%s:%d/", deniedNpm, up.npm.port),
			code:   1,
			stderr: []string{"403"},
		}})
	})
	up.npm.saw(t, npmName, "GET", "/airlocktest")
	up.npm.saw(t, npmName, "GET", "/airlocktest/-/airlocktest-1.0.0.tgz")
	up.npm.neverSaw(t, deniedNpm)
}

// fetchJS fetches argv[1] with Node's built-in fetch; exit 4 when it fails.
const fetchJS = `fetch(process.argv[1]).then(
  r => console.log("status", r.status),
  e => { console.log("fetch failed:", e.cause ? e.cause.code : e.message); process.exit(4); })`

// connectJS sends GET argv[3] to argv[1]:argv[2] over TLS through an HTTP
// CONNECT tunnel of the proxy in HTTPS_PROXY, and prints the response; exit
// 3 when the proxy refuses the tunnel.
const connectJS = `
const http = require("http"), tls = require("tls");
const [name, port, path] = process.argv.slice(1);
const proxy = new URL(process.env.HTTPS_PROXY);
const req = http.request({host: proxy.hostname, port: proxy.port, method: "CONNECT", path: name + ":" + port});
req.on("connect", (res, sock) => {
  if (res.statusCode !== 200) {
    console.log("CONNECT", res.statusCode, res.headers["x-airlock-deny-reason"]);
    process.exit(3);
  }
  const s = tls.connect({socket: sock, servername: name}, () =>
    s.write("GET " + path + " HTTP/1.1\r\nHost: " + name + ":" + port + "\r\nConnection: close\r\n\r\n"));
  s.on("data", d => process.stdout.write(d));
  s.on("end", () => process.exit(0));
  s.on("error", e => { console.log("tls:", e.message); process.exit(5); });
});
req.on("error", e => { console.log("proxy:", e.message); process.exit(6); });
req.end();
`

// TestNode: Node 20's built-in fetch (undici) ignores HTTPS_PROXY (env proxy
// support came with Node 22.21 and 24), so inside a sandbox it reaches
// nothing at all: no DNS, no route. Node's own https/tls over a CONNECT
// tunnel of the proxy works, trusting the proxy's per-run CA through
// NODE_EXTRA_CA_CERTS; the proxy refuses an unlisted name.
func TestNode(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "node")
	pol := h.writePolicy(t, up.policy(policyOptions{echoMethods: "GET"}))
	e := up.echo.port
	node := func(script string, args ...any) string {
		s := "node -e " + shq(script)
		for _, a := range args {
			s += " " + shq(fmt.Sprint(a))
		}
		return s
	}
	t.Run("sandbox", func(t *testing.T) {
		h.runChecks(t, []string{"--policy", pol}, []check{{
			name:   "fetch of an allowed name goes nowhere",
			script: node(fetchJS, fmt.Sprintf("https://%s:%d/node-fetch", echoName, e)),
			code:   4,
			stdout: []string{"fetch failed"},
		}, {
			name:   "fetch of the loopback address goes nowhere",
			script: node(fetchJS, fmt.Sprintf("https://127.0.0.1:%d/node-fetch", e)),
			code:   4,
			stdout: []string{"fetch failed: ECONNREFUSED"},
		}, {
			name:   "https through a CONNECT tunnel",
			script: node(connectJS, echoName, e, "/node-connect"),
			stdout: []string{"HTTP/1.1 200", "path=/node-connect\n"},
		}, {
			name:   "CONNECT to an unlisted name",
			script: node(connectJS, deniedName, e, "/node-denied"),
			code:   3,
			stdout: []string{"CONNECT 403 policy:no_rule"},
		}})
	})
	up.echo.saw(t, echoName, "GET", "/node-connect")
	up.echo.neverSaw(t, "/node-fetch")
	up.echo.neverSaw(t, "/node-denied")
}
