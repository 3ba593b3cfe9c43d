package egress_test

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/airlockrun/airlock/internal/egress"
)

// TestLoopbackRefused asks for loopback directly, in several spellings,
// while policy names those hosts (so the guard, not the policy, must stop
// them) and while a pin for another name points at the very same listener.
func TestLoopbackRefused(t *testing.T) {
	pki := newPKI(t)
	up := newUpstream(t, pki)
	port := up.port()
	dns := newDNS(t, map[string]string{"localhost": "127.0.0.1", "sneaky.test": "127.0.0.1"})
	doc := fmtPolicy(`
network:
  resolve:
    - {host: "pinned.test:80", to: "%[1]s"}
  allow:
    - {host: pinned.test, ports: [80]}
    - {host: 127.0.0.1, ports: [%[2]d]}
    - {host: localhost, ports: [%[2]d]}
    - {host: sneaky.test, ports: [%[2]d]}
    - {host: "::1", ports: [%[2]d]}
`, up.addr(), port)
	h := start(t, egress.Config{Policy: mustPolicy(t, doc), Resolver: dns.resolver()})
	targets := []string{
		fmt.Sprintf("127.0.0.1:%d", port),
		fmt.Sprintf("localhost:%d", port),
		fmt.Sprintf("0x7f.1:%d", port),
		fmt.Sprintf("2130706433:%d", port),
		fmt.Sprintf("0177.0.0.1:%d", port),
		fmt.Sprintf("127.1:%d", port),
		fmt.Sprintf("sneaky.test:%d", port),
		fmt.Sprintf("[::1]:%d", port),
		fmt.Sprintf("[::ffff:127.0.0.1]:%d", port),
	}
	for _, target := range targets {
		for _, method := range []string{"GET", "CONNECT"} {
			t.Run(method+" "+target, func(t *testing.T) {
				c := h.dial(t)
				req := fmt.Sprintf("GET http://%s/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				if method == "CONNECT" {
					req = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
				}
				resp := rawRequest(t, c, bufio.NewReader(c), req)
				if resp.StatusCode != 403 || reasonOf(resp) != "guard:loopback" {
					t.Errorf("%s %s = %d %q, want 403 guard:loopback", method, target, resp.StatusCode, reasonOf(resp))
				}
			})
		}
	}
	if n := up.conns.n.Load(); n != 0 {
		t.Errorf("the loopback listener accepted %d connections", n)
	}
	// The pin itself still works: only the pinned name reaches it.
	resp, _ := get(t, h.client(nil), "http://pinned.test/")
	if resp.StatusCode != 200 {
		t.Errorf("pinned name = %d %q", resp.StatusCode, reasonOf(resp))
	}
	for _, r := range h.audit.waitRecords(t, 2*len(targets)) {
		if r.Host != "pinned.test" && (r.Decision != egress.DecisionDenied || !strings.HasPrefix(r.Reason, "guard:") || r.Rule == "") {
			t.Errorf("record = %+v, want denied by the guard under an allow rule", r)
		}
	}
}

func TestUpstreamFailures(t *testing.T) {
	pki := newPKI(t)
	up := newUpstream(t, pki, "api.test")
	// A port with nothing listening: bind, note, close.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := l.Addr().String()
	l.Close()
	dns := newDNS(t, nil)
	doc := fmtPolicy(`
network:
  resolve:
    - {host: "down.test:80", to: "%[1]s"}
    - {host: "api.test:443", to: "%[2]s"}
  allow:
    - {host: down.test, ports: [80]}
    - {host: nxdomain.test, ports: [80]}
    - {host: api.test, ports: [443], methods: [GET]}
`, dead, up.addr())
	// No upstream_ca: the upstream's certificate is not trusted.
	h := start(t, egress.Config{Policy: mustPolicy(t, doc), Resolver: dns.resolver()})
	tests := []struct {
		url    string
		status int
		reason string
	}{
		{"http://down.test/", 502, "upstream:dial"},
		{"http://nxdomain.test/", 502, "upstream:resolve"},
		{"https://api.test/", 502, "upstream:tls"},
	}
	c := h.client(h.proxyRoots(t))
	for _, tt := range tests {
		resp, _ := get(t, c, tt.url)
		if resp.StatusCode != tt.status || reasonOf(resp) != tt.reason {
			t.Errorf("GET %s = %d %q, want %d %q", tt.url, resp.StatusCode, reasonOf(resp), tt.status, tt.reason)
		}
	}
	resp, c2, _ := h.connect(t, "down.test:80")
	if resp.StatusCode != 502 || reasonOf(resp) != "upstream:dial" {
		t.Errorf("CONNECT down.test:80 = %d %q", resp.StatusCode, reasonOf(resp))
	}
	c2.Close()
	c.CloseIdleConnections()
	for _, r := range h.audit.waitRecords(t, len(tests)+1) {
		if r.Decision != egress.DecisionAllowed || r.Status != 502 {
			t.Errorf("record = %+v, want an allowed request that failed upstream", r)
		}
	}
}

// netnsEnv marks the re-executed test binary that runs inside a fresh
// network namespace.
const netnsEnv = "AIRLOCK_EGRESS_TEST_NETNS"

// TestSSRFNetns checks that nothing reaches the cloud metadata address or a
// private address, whatever the spelling. It needs addresses this machine
// must never send to, so it runs inside a network namespace of its own: the
// test re-executes itself under CLONE_NEWNET, adds 169.254.169.254 and
// 10.1.2.3 there, and counts connections to listeners on them. No packet can
// leave that namespace even if the proxy were broken.
func TestSSRFNetns(t *testing.T) {
	if os.Getenv(netnsEnv) == "1" {
		ssrfInside(t)
		return
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip tool")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestSSRFNetns$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if strings.Contains(err.Error(), "operation not permitted") {
			t.Skipf("cannot create a network namespace: %v", err)
		}
		t.Fatalf("inner run: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "--- PASS: TestSSRFNetns") {
		t.Fatalf("inner run did not pass:\n%s", out)
	}
	t.Logf("inner run:\n%s", out)
}

func ssrfInside(t *testing.T) {
	run := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("link", "set", "lo", "up"); err != nil {
		t.Fatal(err)
	}
	// A dummy interface when the kernel has the module; else loopback
	// holds the addresses (the namespace is ours either way).
	dev := "d0"
	if run("link", "add", dev, "type", "dummy") != nil {
		dev = "lo"
	} else if err := run("link", "set", dev, "up"); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"169.254.169.254/32", "10.1.2.3/32"} {
		if err := run("addr", "add", a, "dev", dev); err != nil {
			t.Fatal(err)
		}
	}
	var hits atomic.Int64
	for _, addr := range []string{"169.254.169.254:80", "10.1.2.3:80"} {
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				hits.Add(1)
				c.Close()
			}
		}()
	}
	dns := newDNS(t, map[string]string{
		"metadata.test": "169.254.169.254",
		"internal.test": "10.1.2.3",
		"mapped.test":   "::ffff:169.254.169.254",
	})
	// Every spelling is allowed by policy, so what stops them is the guard.
	doc := `
network:
  allow:
    - {host: 169.254.169.254, ports: [80]}
    - {host: 10.1.2.3, ports: [80]}
    - {host: metadata.test, ports: [80]}
    - {host: internal.test, ports: [80]}
    - {host: mapped.test, ports: [80]}
`
	h := start(t, egress.Config{Policy: mustPolicy(t, doc), Resolver: dns.resolver()})
	tests := []struct{ host, reason string }{
		{"169.254.169.254", "guard:link_local"},
		{"2852039166", "guard:link_local"},               // decimal
		{"0xa9fea9fe", "guard:link_local"},               // hex
		{"0xa9.0xfe.0xa9.0xfe", "guard:link_local"},      // hex parts
		{"0251.0376.0251.0376", "guard:link_local"},      // octal
		{"169.254.43518", "guard:link_local"},            // short form
		{"[::ffff:169.254.169.254]", "guard:link_local"}, // IPv4-mapped IPv6
		{"[::ffff:a9fe:a9fe]", "guard:link_local"},       // mapped, hex
		{"metadata.test", "guard:link_local"},            // DNS
		{"mapped.test", "guard:link_local"},              // DNS, AAAA mapped
		{"10.1.2.3", "guard:private_address"},
		{"0x0a010203", "guard:private_address"},
		{"internal.test", "guard:private_address"},
	}
	for _, tt := range tests {
		for _, method := range []string{"GET", "CONNECT"} {
			target := tt.host + ":80"
			c := h.dial(t)
			req := fmt.Sprintf("GET http://%s/latest/meta-data/ HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			if method == "CONNECT" {
				req = fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
			}
			resp := rawRequest(t, c, bufio.NewReader(c), req)
			if resp.StatusCode != 403 || reasonOf(resp) != tt.reason {
				t.Errorf("%s %s = %d %q, want 403 %q", method, target, resp.StatusCode, reasonOf(resp), tt.reason)
			}
			c.Close()
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("listeners on refused addresses accepted %d connections", n)
	}

	// Control: a CIDR rule lifts the guard for exactly its addresses, and
	// then the listener does count the connection, so the zero above means
	// something.
	allowed := start(t, egress.Config{Policy: mustPolicy(t, `
network:
  allow:
    - {cidr: 10.1.2.3/32, ports: [80]}
    - {host: 169.254.169.254, ports: [80]}
`)})
	c := allowed.dial(t)
	resp := rawRequest(t, c, bufio.NewReader(c), "CONNECT 10.1.2.3:80 HTTP/1.1\r\nHost: 10.1.2.3:80\r\n\r\n")
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT to a CIDR-allowed address = %d %q", resp.StatusCode, reasonOf(resp))
	}
	waitFor(t, "the control connection", func() bool { return hits.Load() == 1 })
	c2 := allowed.dial(t)
	resp = rawRequest(t, c2, bufio.NewReader(c2), "CONNECT 169.254.169.254:80 HTTP/1.1\r\nHost: x\r\n\r\n")
	if resp.StatusCode != 403 || reasonOf(resp) != "guard:link_local" {
		t.Errorf("CONNECT to metadata under a CIDR rule for another address = %d %q", resp.StatusCode, reasonOf(resp))
	}
}
