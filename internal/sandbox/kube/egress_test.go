package kube_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// egressHost is the host side of a sandbox's egress in these tests: a real
// egress proxy (internal/egress) on a unix socket of its own, under a
// policy that allows allowed.test and nothing else, both names pinned to
// an HTTP server of the test's on the host's loopback, which counts what
// reaches it by path.
type egressHost struct {
	socket string
	port   string
	mu     sync.Mutex
	hits   map[string]int
	audit  []egress.Record
}

func startEgressHost(t *testing.T) *egressHost {
	t.Helper()
	h := &egressHost{hits: map[string]int{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.hits[r.URL.Path]++
		h.mu.Unlock()
		fmt.Fprintf(w, "host says %s\n", strings.TrimPrefix(r.URL.Path, "/"))
	}))
	t.Cleanup(srv.Close)
	_, h.port, _ = net.SplitHostPort(srv.Listener.Addr().String())
	port := 0
	fmt.Sscan(h.port, &port)
	pol := &policy.Network{
		Default: policy.Deny,
		Allow:   []policy.Rule{{Host: "allowed.test", Ports: []int{port}}},
		Resolve: []policy.Pin{
			{Host: "allowed.test:" + h.port, To: "127.0.0.1:" + h.port},
			{Host: "denied.test:" + h.port, To: "127.0.0.1:" + h.port},
		},
	}
	if err := pol.Validate(); err != nil {
		t.Fatal(err)
	}
	p, err := egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: "t", Run: "r", Sandbox: "sb"},
		Policy:   pol,
		Audit: recordFunc(func(r egress.Record) {
			h.mu.Lock()
			h.audit = append(h.audit, r)
			h.mu.Unlock()
		}),
	})
	if err != nil {
		t.Fatal(err)
	}
	h.socket = filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", h.socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = p.Serve(ln) }()
	t.Cleanup(func() { _ = p.Close() })
	return h
}

func (h *egressHost) hit(path string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.hits[path]
}

func (h *egressHost) decisions() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.audit {
		out = append(out, r.Decision+" "+r.Host)
	}
	return out
}

type recordFunc func(egress.Record)

func (f recordFunc) Record(r egress.Record) { f(r) }

// TestPodModeEgress: a pod's sandbox reaches the host's egress proxy over
// the executor's connection (egress streams), and by no other way. Through
// the proxy, a host the policy allows answers and one it does not is
// refused by the proxy (the server never sees it); many connections at
// once, more than the streams kept waiting, all go through; a direct
// connection to any address but the sandbox's loopback (the node's, a
// pod's, the metadata address) finds no route, so nothing leaves. The
// executor runs as a pod runs it (TestPodModeLocal), the host side is the
// backend's (execconn.ServeEgress), the proxy is airlock's.
func TestPodModeEgress(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	h := startEgressHost(t)
	setup := podSetup()
	setup.ProxyAddr, setup.ProxyStreams = "127.0.0.1:3128", true
	pm := startPodMode(t, ctx, setup)
	if l := strings.Join(pm.c.Ready.Layers, " "); !strings.Contains(l, "network:proxy") {
		t.Errorf("Ready.Layers = %q, want network:proxy", l)
	}
	served := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(served)
		pm.c.ServeEgress(sctx, "sb", h.socket)
	}()
	run := func(script string) (string, int) {
		t.Helper()
		var o, e bytes.Buffer
		p, err := pm.c.Start(execproto.Request{Argv: []string{"/bin/sh", "-c", script}, Dir: "/"}, nil, &o, &e)
		if err != nil {
			t.Fatal(err)
		}
		r, err := p.Wait(ctx)
		if err != nil {
			t.Fatalf("Wait = %v", err)
		}
		return o.String() + e.String(), r.ExitCode
	}
	url := func(host, path string) string { return "http://" + host + ":" + h.port + "/" + path }

	for _, tc := range []struct {
		name   string
		script string
		want   string // the whole output
		code   int    // exit code
		path   string // on the server: hit once when reached, else never
		reach  bool
	}{
		{name: "Allowed", script: "curl -sS --max-time 20 " + url("allowed.test", "hello"), want: "host says hello\n", path: "/hello", reach: true},
		{name: "Denied", script: "curl -s --max-time 20 -o /dev/null -w '%{http_code}' " + url("denied.test", "denied"), want: "403", path: "/denied"},
		{name: "DeniedCONNECT", script: "curl -s --max-time 20 -p -o /dev/null -w '%{http_connect}' " + url("denied.test", "tunnel"), want: "403", code: 56, path: "/tunnel"},
		{name: "DirectHostLoopbackIsOwn", script: "curl -sS --noproxy '*' --max-time 5 -o /dev/null http://127.0.0.1:" + h.port + "/direct 2>&1 | grep -c 'Failed to connect'", want: "1\n", path: "/direct"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, code := run(tc.script)
			if out != tc.want || code != tc.code {
				t.Errorf("%s: output %q exit %d, want %q exit %d", tc.script, out, code, tc.want, tc.code)
			}
			want := 0
			if tc.reach {
				want = 1
			}
			if got := h.hit(tc.path); got != want {
				t.Errorf("the host's server saw %s %d times, want %d", tc.path, got, want)
			}
		})
	}

	// Addresses outside the sandbox: the node's (this machine's own, as
	// the pod sees its node), a pod's on the test cluster's bridge, the
	// metadata address, the host's loopback by its other name. The
	// sandbox's network namespace has loopback alone, so each connect
	// fails at once with no route: no packet is sent anywhere.
	t.Run("DirectOut", func(t *testing.T) {
		for _, addr := range []string{"10.244.0.1:80", "169.254.169.254:80", "[fd00::1]:80", "192.0.2.1:443"} {
			host, port, _ := net.SplitHostPort(addr)
			script := fmt.Sprintf("exec 3<>/dev/tcp/%s/%s && echo connected", host, port)
			out, code := run("bash -c '" + script + "' 2>&1")
			if code == 0 || !strings.Contains(out, "unreachable") {
				t.Errorf("direct connect to %s: exit %d, %q; want Network is unreachable", addr, code, out)
			}
		}
	})

	// The metadata trick through the proxy: the address as a literal and
	// a name of the policy's own that is not pinned; the proxy refuses
	// both before it dials (policy, then the address guard), so nothing
	// is sent there.
	t.Run("MetadataThroughProxy", func(t *testing.T) {
		for _, u := range []string{"http://169.254.169.254/latest/meta-data/", "http://[fd00:ec2::254]/latest/meta-data/"} {
			out, _ := run("curl -s --max-time 20 -o /dev/null -w '%{http_code}' " + u)
			if out != "403" {
				t.Errorf("%s through the proxy: %q, want 403", u, out)
			}
		}
	})

	t.Run("Many", func(t *testing.T) {
		n := 4*execconn.EgressWaiting + 3
		out, _ := run(fmt.Sprintf(`for i in $(seq 1 %d); do curl -sS --max-time 30 -o /dev/null -w '%%{http_code}\n' %s$i & done; wait`, n, url("allowed.test", "many")))
		if got := strings.Count(out, "200\n"); got != n {
			t.Errorf("%d connections at once: %d answered 200 (%q)", n, got, out)
		}
	})

	var denied, allowed int
	for _, d := range h.decisions() {
		switch {
		case d == "allowed allowed.test":
			allowed++
		case strings.HasPrefix(d, "denied "):
			denied++
		}
	}
	if allowed == 0 || denied < 4 {
		t.Errorf("the proxy's decisions %q: want allowed.test allowed and the others denied", h.decisions())
	}

	stop()
	select {
	case <-served:
	case <-time.After(30 * time.Second):
		t.Fatal("ServeEgress did not return after its context ended")
	}
	pm.end(t)
}
