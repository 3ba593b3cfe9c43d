// Command egressbench measures airlock's egress proxy side by side with a
// direct connection and, when one is given, another forward proxy
// (tinyproxy), all in one run and on loopback only. It is the load
// generator of bench/egress.sh; run that, not this, to get the comparison.
//
// In one process it starts a plain HTTP upstream and a TLS upstream on
// 127.0.0.1, and an egress.Proxy whose policy pins bench.test and bulk.test
// to them, served on a unix socket (the shape a sandbox sees) and, for
// comparison with proxies that only listen on TCP, on a loopback TCP port.
// It then measures, interleaving the paths round by round so that load from
// elsewhere on the machine falls on all of them alike:
//
//   - latency of keep-alive GETs (p50, p90, and p50 added over direct);
//   - CONNECT tunnel throughput with TLS inside, both ways (median MB/s);
//   - many concurrent CONNECT tunnels through airlock, each used once
//     while all are open.
//
// Usage:
//
//	go run ./bench/egressbench [-tinyproxy 127.0.0.1:PORT] [-http-port N] [-tls-port N] ...
package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/policy"
)

func main() {
	var (
		tinyproxy = flag.String("tinyproxy", "", "host:port of a running tinyproxy to compare with (empty: skip)")
		tinyPID   = flag.Int("tinyproxy-pid", 0, "tinyproxy's process ID, to count its CPU time (0: not counted)")
		httpPort  = flag.Int("http-port", 0, "port of the plain HTTP upstream on 127.0.0.1 (0: any)")
		tlsPort   = flag.Int("tls-port", 0, "port of the TLS upstream on 127.0.0.1 (0: any; tinyproxy's ConnectPort must allow it)")
		requests  = flag.Int("requests", 300, "GETs per path per round")
		rounds    = flag.Int("rounds", 7, "latency rounds")
		body      = flag.Int("body", 512, "bytes in each GET's response body")
		mib       = flag.Int("mib", 128, "MiB moved per throughput trial")
		trials    = flag.Int("trials", 7, "throughput trials per path and direction")
		tunnels   = flag.Int("tunnels", 1000, "concurrent CONNECT tunnels held through airlock")
	)
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("egressbench: ")
	if err := run(config{
		tinyproxy: *tinyproxy, tinyPID: *tinyPID, httpPort: *httpPort, tlsPort: *tlsPort,
		requests: *requests, rounds: *rounds, body: *body,
		mib: *mib, trials: *trials, tunnels: *tunnels,
	}); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	tinyproxy              string
	tinyPID                int
	httpPort, tlsPort      int
	requests, rounds, body int
	mib, trials, tunnels   int
}

// path is one way to reach the upstreams: directly or through a proxy.
type path struct {
	name string
	// client does GETs of http://<host>/ through this path.
	client *http.Client
	// httpHost is the host GETs name: the pinned name through airlock,
	// the upstream's address otherwise.
	httpHost string
	// tunnel opens a TLS connection to the TLS upstream through this path.
	tunnel func() (net.Conn, error)
	// pid is another process whose CPU time the path costs (tinyproxy), or 0.
	pid int
}

func run(cfg config) error {
	if err := raiseNoFile(uint64(4*cfg.tunnels + 1024)); err != nil {
		log.Printf("note: %v; the concurrent-tunnel step may fail", err)
	}
	cert, pool, err := selfSigned("bulk.test")
	if err != nil {
		return err
	}
	httpAddr, stopHTTP, upConns, err := serveHTTP(cfg.httpPort, cfg.body)
	if err != nil {
		return err
	}
	defer stopHTTP()
	tlsAddr, stopTLS, err := serveTLS(cfg.tlsPort, cert)
	if err != nil {
		return err
	}
	defer stopTLS()

	p, err := newProxy(httpAddr, tlsAddr, cfg.tunnels)
	if err != nil {
		return err
	}
	defer p.Close()
	dir, err := os.MkdirTemp("", "egressbench")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "egress.sock")
	ul, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	tl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	var serving sync.WaitGroup
	for _, l := range []net.Listener{ul, tl} {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := p.Serve(l); err != nil {
				log.Printf("serve: %v", err)
			}
		}()
	}
	defer serving.Wait()
	defer p.Close()

	tlsConf := &tls.Config{ServerName: "bulk.test", RootCAs: pool}
	dialUnix := func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}
	dialTCP := func(addr string) func(context.Context) (net.Conn, error) {
		return func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", addr)
		}
	}
	paths := []path{
		{
			name:     "direct",
			client:   &http.Client{Transport: &http.Transport{}},
			httpHost: httpAddr,
			tunnel: func() (net.Conn, error) {
				return tls.Dial("tcp", tlsAddr, tlsConf)
			},
		},
		{
			name:     "airlock (unix socket)",
			client:   proxyClient(dialUnix),
			httpHost: "bench.test",
			tunnel:   connectTunnel(dialUnix, "bulk.test:443", tlsConf),
		},
		{
			name:     "airlock (tcp listener)",
			client:   proxyClient(dialTCP(tl.Addr().String())),
			httpHost: "bench.test",
			tunnel:   connectTunnel(dialTCP(tl.Addr().String()), "bulk.test:443", tlsConf),
		},
	}
	if cfg.tinyproxy != "" {
		dial := dialTCP(cfg.tinyproxy)
		paths = append(paths, path{
			name:     "tinyproxy (tcp)",
			client:   proxyClient(dial),
			httpHost: httpAddr,
			tunnel:   connectTunnel(dial, tlsAddr, tlsConf),
			pid:      cfg.tinyPID,
		})
	}
	// Every path must work before anything is timed.
	for _, pa := range paths {
		if err := get(pa.client, pa.httpHost, cfg.body); err != nil {
			return fmt.Errorf("%s: GET: %w", pa.name, err)
		}
		c, err := pa.tunnel()
		if err != nil {
			return fmt.Errorf("%s: tunnel: %w", pa.name, err)
		}
		c.Close()
	}

	fmt.Printf("Shapes: airlock listens on a unix socket (a sandbox's only way out); tinyproxy only on TCP.\n")
	fmt.Printf("\"airlock (tcp listener)\" is the same proxy on a loopback TCP port, the shape tinyproxy has.\n")
	if cfg.tinyproxy == "" {
		fmt.Printf("tinyproxy: not given (-tinyproxy), its rows are left out.\n")
	}

	lat, conns, err := latency(paths, cfg, upConns)
	if err != nil {
		return err
	}
	printLatency(paths, lat, conns, cfg)

	tput, err := throughput(paths, cfg)
	if err != nil {
		return err
	}
	printThroughput(paths, tput, cfg)

	// Keep-alive connections of the GETs would count as open tunnels.
	for _, pa := range paths {
		pa.client.CloseIdleConnections()
	}
	for deadline := time.Now().Add(5 * time.Second); p.Stats().Conns > 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	return concurrent(p, paths[1], cfg.tunnels)
}

// newProxy builds airlock's proxy with a policy that pins bench.test:80 and
// bulk.test:443 to the loopback upstreams and allows them.
func newProxy(httpAddr, tlsAddr string, tunnels int) (*egress.Proxy, error) {
	doc := fmt.Sprintf(`
network:
  resolve:
    - {host: "bench.test:80", to: "%s"}
    - {host: "bulk.test:443", to: "%s"}
  allow:
    - {host: bench.test, ports: [80]}
    - {host: bulk.test, ports: [443]}
`, httpAddr, tlsAddr)
	d, err := policy.Parse([]byte(doc))
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	return egress.New(egress.Config{
		Identity: bridge.Identity{Tenant: "bench", Run: "bench", Sandbox: "bench"},
		Policy:   &d.Network,
		// Records are encoded as in production and thrown away.
		Audit:  egress.NewJSONLSink(io.Discard),
		Limits: egress.Limits{MaxConns: tunnels + 64},
	})
}

// proxyClient is an HTTP client whose proxy is reached with dial, as a tool
// in a sandbox reaches airlock with HTTP_PROXY set.
func proxyClient(dial func(context.Context) (net.Conn, error)) *http.Client {
	return &http.Client{Transport: &http.Transport{
		Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: "proxy.invalid:3128"}),
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return dial(ctx)
		},
	}}
}

// connectTunnel returns a func that CONNECTs to target through the proxy
// reached with dial and completes TLS inside.
func connectTunnel(dial func(context.Context) (net.Conn, error), target string, conf *tls.Config) func() (net.Conn, error) {
	return func() (net.Conn, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		_ = c.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target); err != nil {
			c.Close()
			return nil, err
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			c.Close()
			return nil, err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			c.Close()
			return nil, fmt.Errorf("CONNECT %s: %s %s", target, resp.Status, resp.Header.Get(egress.ReasonHeader))
		}
		tc := tls.Client(&bufferedConn{Conn: c, r: br}, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			c.Close()
			return nil, fmt.Errorf("TLS through the tunnel: %w", err)
		}
		_ = c.SetDeadline(time.Time{})
		return tc, nil
	}
}

// bufferedConn reads through r, which may hold bytes after the CONNECT
// response.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// get does one GET of http://host/ and checks the body.
func get(c *http.Client, host string, size int) error {
	resp, err := c.Get("http://" + host + "/")
	if err != nil {
		return err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || n != int64(size) {
		return fmt.Errorf("status %d, %d bytes; want 200, %d", resp.StatusCode, n, size)
	}
	return nil
}

// latency times GETs, interleaving the paths round by round, and counts
// the upstream connections each path opened while timed (upConns counts
// the upstream's accepts).
func latency(paths []path, cfg config, upConns *atomic.Int64) ([][]time.Duration, []int64, error) {
	out := make([][]time.Duration, len(paths))
	conns := make([]int64, len(paths))
	for i, pa := range paths {
		for range 50 { // warm up: connections, pools, caches
			if err := get(pa.client, pa.httpHost, cfg.body); err != nil {
				return nil, nil, fmt.Errorf("%s: %w", pa.name, err)
			}
		}
		out[i] = make([]time.Duration, 0, cfg.rounds*cfg.requests)
	}
	for range cfg.rounds {
		for i, pa := range paths {
			c0 := upConns.Load()
			for range cfg.requests {
				t := time.Now()
				if err := get(pa.client, pa.httpHost, cfg.body); err != nil {
					return nil, nil, fmt.Errorf("%s: %w", pa.name, err)
				}
				out[i] = append(out[i], time.Since(t))
			}
			conns[i] += upConns.Load() - c0
		}
	}
	return out, conns, nil
}

func pct(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))]
}

func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func printLatency(paths []path, lat [][]time.Duration, conns []int64, cfg config) {
	fmt.Printf("\n== HTTP GET latency: keep-alive GET, %d-byte body, %d rounds x %d requests per path, interleaved\n",
		cfg.body, cfg.rounds, cfg.requests)
	fmt.Printf("%-24s %10s %10s %14s %10s %14s\n", "path", "p50", "p90", "added p50", "p50 ratio", "upstream conns")
	d50 := pct(lat[0], 0.5)
	for i, pa := range paths {
		p50, p90 := pct(lat[i], 0.5), pct(lat[i], 0.9)
		added, ratio := "-", "-"
		if i > 0 {
			added = us(p50 - d50)
			ratio = fmt.Sprintf("%.2f", float64(p50)/float64(d50))
		}
		fmt.Printf("%-24s %10s %10s %14s %10s %14d\n", pa.name, us(p50), us(p90), added, ratio, conns[i])
	}
	if i := find(paths, "tinyproxy (tcp)"); i >= 0 {
		fmt.Printf("ratio airlock (unix socket)/tinyproxy p50: %.2f; airlock (tcp listener)/tinyproxy p50: %.2f\n",
			float64(pct(lat[1], 0.5))/float64(pct(lat[i], 0.5)), float64(pct(lat[2], 0.5))/float64(pct(lat[i], 0.5)))
	}
	added := pct(lat[1], 0.5) - d50
	fmt.Printf("target: p50 added by airlock (unix socket) <= 300 µs: %s (%s)\n", verdict(added <= 300*time.Microsecond), us(added))
	fmt.Printf("upstream conns: connections the upstream accepted while the %d requests of a path were timed (0: kept alive)\n",
		cfg.rounds*cfg.requests)
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func find(paths []path, name string) int {
	for i, pa := range paths {
		if pa.name == name {
			return i
		}
	}
	return -1
}

// Operations of the TLS upstream: after the handshake the client sends one
// op byte and, for up and down, a big-endian uint64 length.
const (
	opUp   = 'u' // the client sends n bytes, the server answers one byte
	opDown = 'd' // the server sends n bytes
	opEcho = 'e' // the server echoes until EOF
)

// rates are the results of one path's throughput trials, per direction
// (0 up, 1 down): MB/s of each trial, and CPU time per GiB over all trials.
type rates struct {
	mbs     [2][]float64
	cpu     [2]time.Duration
	written [2]int64
}

func (r *rates) cpuPerGiB(dir int) time.Duration {
	return time.Duration(float64(r.cpu[dir]) / (float64(r.written[dir]) / (1 << 30)))
}

// throughput runs the trials, interleaving paths and directions.
func throughput(paths []path, cfg config) ([]rates, error) {
	out := make([]rates, len(paths))
	n := int64(cfg.mib) << 20
	buf := make([]byte, 256<<10)
	for range cfg.trials {
		for i, pa := range paths {
			for dir, op := range []byte{opUp, opDown} {
				c0 := cpuTime(pa.pid)
				mbs, err := transfer(pa, op, n, buf)
				if err != nil {
					return nil, fmt.Errorf("%s: %c: %w", pa.name, op, err)
				}
				out[i].cpu[dir] += cpuTime(pa.pid) - c0
				out[i].written[dir] += n
				out[i].mbs[dir] = append(out[i].mbs[dir], mbs)
			}
		}
	}
	return out, nil
}

// cpuTime is the CPU time (user and system) used so far by this process
// and, when pid is not 0, by process pid.
func cpuTime(pid int) time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	t := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	if pid == 0 {
		return t
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return t
	}
	// Fields after the parenthesized command name; utime and stime are
	// the 14th and 15th fields, in clock ticks (USER_HZ, 100 on Linux).
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 13 {
		return t
	}
	var ut, st int64
	_, _ = fmt.Sscan(f[11], &ut)
	_, _ = fmt.Sscan(f[12], &st)
	return t + time.Duration(ut+st)*10*time.Millisecond
}

// transfer moves n bytes through a fresh tunnel of pa and returns MB/s
// (10^6 bytes per second), timed from the first byte of the request to
// the last byte of the answer.
func transfer(pa path, op byte, n int64, buf []byte) (float64, error) {
	c, err := pa.tunnel()
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Minute))
	head := make([]byte, 9)
	head[0] = op
	binary.BigEndian.PutUint64(head[1:], uint64(n))
	start := time.Now()
	if _, err := c.Write(head); err != nil {
		return 0, err
	}
	switch op {
	case opUp:
		for left := n; left > 0; {
			m := min(int64(len(buf)), left)
			if _, err := c.Write(buf[:m]); err != nil {
				return 0, err
			}
			left -= m
		}
		if _, err := io.ReadFull(c, buf[:1]); err != nil {
			return 0, fmt.Errorf("ack: %w", err)
		}
	case opDown:
		for left := n; left > 0; {
			m, err := c.Read(buf[:min(int64(len(buf)), left)])
			left -= int64(m)
			if err != nil && left > 0 {
				return 0, err
			}
		}
	}
	return float64(n) / time.Since(start).Seconds() / 1e6, nil
}

func median(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	return s[len(s)/2]
}

func printThroughput(paths []path, t []rates, cfg config) {
	fmt.Printf("\n== CONNECT tunnel throughput: TLS inside (airlock admits only TLS tunnels), %d MiB per trial, median of %d, interleaved\n",
		cfg.mib, cfg.trials)
	fmt.Printf("%-24s %12s %8s %14s %8s %15s %15s\n", "path", "upload MB/s", "/direct", "download MB/s", "/direct", "CPU/GiB up", "CPU/GiB down")
	du, dd := median(t[0].mbs[0]), median(t[0].mbs[1])
	for i, pa := range paths {
		u, d := median(t[i].mbs[0]), median(t[i].mbs[1])
		fmt.Printf("%-24s %12.0f %8.2f %14.0f %8.2f %12.0f ms %12.0f ms\n", pa.name, u, u/du, d, d/dd,
			ms(t[i].cpuPerGiB(0)), ms(t[i].cpuPerGiB(1)))
	}
	fmt.Printf("CPU/GiB: CPU time per GiB moved, of this process (client, upstream and airlock together)%s;\n",
		map[bool]string{true: " plus tinyproxy's on its row", false: ""}[cfg.tinyPID != 0])
	fmt.Printf("the excess over direct is what the proxy costs, steadier than MB/s on a busy machine.\n")
	if i := find(paths, "tinyproxy (tcp)"); i >= 0 {
		tu, td := median(t[i].mbs[0]), median(t[i].mbs[1])
		fmt.Printf("ratio airlock (unix socket)/tinyproxy: upload %.2f, download %.2f; airlock (tcp listener)/tinyproxy: upload %.2f, download %.2f\n",
			median(t[1].mbs[0])/tu, median(t[1].mbs[1])/td, median(t[2].mbs[0])/tu, median(t[2].mbs[1])/td)
	}
	worst := min(median(t[1].mbs[0])/du, median(t[1].mbs[1])/dd)
	fmt.Printf("target: airlock (unix socket) >= 0.80 of direct both ways: %s (%.2f)\n", verdict(worst >= 0.8), worst)
	if i := find(paths, "tinyproxy (tcp)"); i >= 0 {
		ok := median(t[1].mbs[0]) >= median(t[i].mbs[0]) && median(t[1].mbs[1]) >= median(t[i].mbs[1])
		fmt.Printf("target: airlock (unix socket) >= tinyproxy both ways: %s\n", verdict(ok))
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// concurrent opens n tunnels through pa (airlock) at once, then uses each
// one while all are open, and reports failures.
func concurrent(p *egress.Proxy, pa path, n int) error {
	fmt.Printf("\n== %d concurrent CONNECT tunnels through %s, TLS inside, all open at once\n", n, pa.name)
	conns := make([]net.Conn, n)
	errs := make([]error, n)
	heap0 := heapInUse()
	start := time.Now()
	var wg sync.WaitGroup
	next := make(chan int)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				c, err := pa.tunnel()
				if err == nil {
					_, err = c.Write([]byte{opEcho})
				}
				conns[i], errs[i] = c, err
			}
		}()
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	opened := time.Since(start)
	open := p.Stats().Conns
	perTunnel := (int64(heapInUse()) - int64(heap0)) / int64(n)
	failed := 0
	msg := make([]byte, 16)
	for i, c := range conns {
		if errs[i] == nil {
			copy(msg, fmt.Sprintf("tunnel %9d", i))
			_ = c.SetDeadline(time.Now().Add(30 * time.Second))
			_, errs[i] = c.Write(msg)
			if errs[i] == nil {
				back := make([]byte, len(msg))
				if _, err := io.ReadFull(c, back); err != nil {
					errs[i] = err
				} else if string(back) != string(msg) {
					errs[i] = errors.New("echo does not match")
				}
			}
		}
		if errs[i] != nil {
			failed++
		}
	}
	for _, c := range conns {
		if c != nil {
			c.Close()
		}
	}
	fmt.Printf("opened in %.2f s; open at the proxy at once: %d; used without error: %d/%d\n",
		opened.Seconds(), open, n-failed, n)
	fmt.Printf("Go heap in use per open tunnel: %.1f KiB (client, airlock and upstream sides together, TLS state included)\n",
		float64(perTunnel)/1024)
	fmt.Printf("target: %d tunnels held without error: %s\n", n, verdict(failed == 0 && open == int64(n)))
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("tunnel %d: %w (and %d more failures)", i, err, failed-1)
		}
	}
	return nil
}

// serveHTTP serves GET / with a body of size bytes on 127.0.0.1:port. The
// counter counts connections accepted.
func serveHTTP(port, size int) (string, func(), *atomic.Int64, error) {
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
	if err != nil {
		return "", nil, nil, fmt.Errorf("http upstream: %w", err)
	}
	body := []byte(strings.Repeat("x", size))
	var conns atomic.Int64
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain")
			_, _ = w.Write(body)
		}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				conns.Add(1)
			}
		},
		ErrorLog: log.New(io.Discard, "", 0),
	}
	go func() { _ = srv.Serve(l) }()
	return l.Addr().String(), func() { _ = srv.Close() }, &conns, nil
}

// serveTLS serves the op protocol on 127.0.0.1:port.
func serveTLS(port int, cert tls.Certificate) (string, func(), error) {
	l, err := tls.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		return "", nil, fmt.Errorf("tls upstream: %w", err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns = map[net.Conn]bool{}
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns[c] = true
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				serveOp(c)
				c.Close()
				mu.Lock()
				delete(conns, c)
				mu.Unlock()
			}()
		}
	}()
	return l.Addr().String(), func() {
		l.Close()
		mu.Lock()
		for c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	}, nil
}

func serveOp(c net.Conn) {
	head := make([]byte, 1)
	if _, err := io.ReadFull(c, head); err != nil {
		return
	}
	if head[0] == opEcho {
		_, _ = io.Copy(c, c)
		return
	}
	var nb [8]byte
	if _, err := io.ReadFull(c, nb[:]); err != nil {
		return
	}
	n := int64(binary.BigEndian.Uint64(nb[:]))
	buf := make([]byte, 256<<10)
	switch head[0] {
	case opUp:
		if _, err := io.CopyBuffer(io.Discard, io.LimitReader(c, n), buf); err != nil {
			return
		}
		_, _ = c.Write([]byte{1})
	case opDown:
		for left := n; left > 0; {
			m := min(int64(len(buf)), left)
			if _, err := c.Write(buf[:m]); err != nil {
				return
			}
			left -= m
		}
	}
}

// selfSigned makes a certificate for name (and 127.0.0.1) and a pool that
// trusts it.
func selfSigned(name string) (tls.Certificate, *x509.CertPool, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		DNSNames:              []string{name},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	pool.AddCert(leaf)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}, pool, nil
}

// raiseNoFile raises the soft descriptor limit to at least need (Go already
// raises it to the hard limit at start on Linux; this reports a shortfall).
func raiseNoFile(need uint64) error {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	if rl.Cur >= need {
		return nil
	}
	rl.Cur = min(need, rl.Max)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return fmt.Errorf("setrlimit: %w", err)
	}
	if rl.Cur < need {
		return fmt.Errorf("RLIMIT_NOFILE %d is below the %d descriptors wanted", rl.Cur, need)
	}
	return nil
}

// heapInUse is the Go heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
