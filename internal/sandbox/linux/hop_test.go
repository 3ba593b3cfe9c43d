package linux_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// The preview URL's hop, piece by piece (issue 24): what the executor's
// channel costs a byte that goes there and back on an open stream
// (BenchmarkHopPingPong), what a connection of its own costs (the dial
// inside the sandbox, the stream's opening and end: BenchmarkHopDial),
// and the HTTP exchange the data plane makes of a request
// (BenchmarkHopHTTP), each beside the same thing done inside the
// sandbox on its loopback by the same Go code, in one run. The data
// plane's own HTTP server and relay are internal/portproxy's
// BenchmarkRelay; the whole path is bench/ports.sh.

// echoRole serves the peer roles of the hop benchmarks: echo:PORT
// echoes every byte of every connection to 127.0.0.1:PORT; ping:PORT:N
// sends a byte and reads it back N times on one connection; dial:PORT:N
// does N times: connect, a byte there and back, close; get:URL:N GETs
// URL N times, a fresh connection each. The clients print the median
// time of one in nanoseconds.
func echoRole(kind, arg string) int {
	if kind == "echo" {
		return serveEach(arg, func(c net.Conn) { _, _ = io.Copy(c, c) })
	}
	i := strings.LastIndexByte(arg, ':')
	target := arg[:i]
	n, _ := strconv.Atoi(arg[i+1:])
	var times []time.Duration
	var err error
	switch kind {
	case "ping":
		var c net.Conn
		if c, err = net.Dial("tcp", "127.0.0.1:"+target); err == nil {
			times, err = pingPong(c, n)
			c.Close()
		}
	case "dial":
		times, err = dialEchoes(func() (net.Conn, error) { return net.Dial("tcp", "127.0.0.1:"+target) }, n)
	case "get":
		times, err = freshGets(&http.Transport{DisableKeepAlives: true}, target, n)
	default:
		fmt.Fprintf(os.Stderr, "unknown role %q\n", kind)
		return 2
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(median(times).Nanoseconds()) //nolint:forbidigo // the peer answers its parent on stdout
	return 0
}

// pingPong sends one byte on c and reads it back, n times.
func pingPong(c net.Conn, n int) ([]time.Duration, error) {
	times := make([]time.Duration, 0, n)
	b := []byte{'x'}
	for range n {
		t0 := time.Now()
		if _, err := c.Write(b); err != nil {
			return nil, err
		}
		if _, err := io.ReadFull(c, b); err != nil {
			return nil, err
		}
		times = append(times, time.Since(t0))
	}
	return times, nil
}

// dialEchoes makes n connections with dial, one after another, each
// carrying one byte there and back before it is closed.
func dialEchoes(dial func() (net.Conn, error), n int) ([]time.Duration, error) {
	times := make([]time.Duration, 0, n)
	b := []byte{'x'}
	for range n {
		t0 := time.Now()
		c, err := dial()
		if err != nil {
			return nil, err
		}
		_, err = c.Write(b)
		if err == nil {
			_, err = io.ReadFull(c, b)
		}
		c.Close()
		if err != nil {
			return nil, err
		}
		times = append(times, time.Since(t0))
	}
	return times, nil
}

// freshGets GETs url n times through t, which keeps no connection.
func freshGets(t *http.Transport, url string, n int) ([]time.Duration, error) {
	c := &http.Client{Transport: t}
	times := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		res, err := c.Get(url)
		if err != nil {
			return nil, err
		}
		_, err = io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if err != nil {
			return nil, err
		}
		times = append(times, time.Since(t0))
	}
	return times, nil
}

// inside runs the test binary in sb as a client role and returns the
// median it prints.
func inside(tb testing.TB, sb sandbox.Sandbox, role string) time.Duration {
	tb.Helper()
	var out, errb sandboxtest.SyncBuffer
	r, err := sandbox.Run(context.Background(), sb, sandbox.Command{
		Argv: []string{"/peer/linux.test"}, Env: []string{peerRoleEnv + "=" + role},
		Stdout: &out, Stderr: &errb,
	})
	if err != nil || r.ExitCode != 0 {
		tb.Fatalf("%s: %+v %v %s", role, r, err, errb.String())
	}
	ns, err := strconv.ParseInt(strings.TrimSpace(out.String()), 10, 64)
	if err != nil {
		tb.Fatalf("%s printed %q", role, out.String())
	}
	return time.Duration(ns)
}

// hopRounds runs the host's side and the sandbox's side of a benchmark
// in turn, rounds of n each, and reports both medians (the median of
// the rounds' medians), their difference and their ratio.
func hopRounds(b *testing.B, host func(n int) []time.Duration, in func(n int) time.Duration) {
	const rounds = 3
	n := max(b.N/rounds, 20)
	in(20) // warm up: the client's binary in the page cache
	host(20)
	var hs, is []time.Duration
	b.ResetTimer()
	for range rounds {
		is = append(is, in(n))
		hs = append(hs, median(host(n)))
	}
	b.StopTimer()
	h, i := median(hs), median(is)
	b.ReportMetric(float64(h.Nanoseconds())/1e3, "host-p50-µs")
	b.ReportMetric(float64(i.Nanoseconds())/1e3, "inside-p50-µs")
	b.ReportMetric(float64((h-i).Nanoseconds())/1e3, "added-µs")
	b.ReportMetric(float64(h)/float64(i), "host/inside")
}

// BenchmarkHopPingPong: one byte there and back over a connect stream
// that stays open (the executor's channel alone: frames, credit, the
// goroutines on both ends), beside one byte there and back over a
// loopback connection inside the sandbox. An op is one of each.
//
//	go test -run '^$' -bench HopPingPong -benchtime 3000x ./internal/sandbox/linux/
func BenchmarkHopPingPong(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "echo:8000")
	ec := sb.(sandbox.EarlyConnector)
	c, err := ec.ConnectEarly(8000)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	hopRounds(b, func(n int) []time.Duration {
		ts, err := pingPong(c, n)
		if err != nil {
			b.Fatal(err)
		}
		return ts
	}, func(n int) time.Duration { return inside(b, sb, "ping:8000:"+strconv.Itoa(n)) })
}

// BenchmarkHopDial: a connection of its own carrying one byte there and
// back, through ConnectEarly (the stream's opening, the executor's dial
// inside the sandbox, the byte, the close and the stream's end), beside
// the same inside the sandbox (connect, the byte, close). What it adds
// over BenchmarkHopPingPong is what a connection per request costs.
//
//	go test -run '^$' -bench HopDial -benchtime 3000x ./internal/sandbox/linux/
func BenchmarkHopDial(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "echo:8000")
	ec := sb.(sandbox.EarlyConnector)
	hopRounds(b, func(n int) []time.Duration {
		ts, err := dialEchoes(func() (net.Conn, error) { return ec.ConnectEarly(8000) }, n)
		if err != nil {
			b.Fatal(err)
		}
		return ts
	}, func(n int) time.Duration { return inside(b, sb, "dial:8000:"+strconv.Itoa(n)) })
}

// BenchmarkHopHTTP: a GET on a connection of its own (as the data plane
// makes one a request), its connection a ConnectEarly, beside the same
// GET inside the sandbox on its loopback (the same Go client and server).
//
//	go test -run '^$' -bench HopHTTP -benchtime 3000x ./internal/sandbox/linux/
func BenchmarkHopHTTP(b *testing.B) {
	sb := peerSandbox(b, benchBackend(b))
	startPeer(b, sb, "http:8000")
	ec := sb.(sandbox.EarlyConnector)
	t := &http.Transport{
		DisableKeepAlives: true,
		DialContext:       func(context.Context, string, string) (net.Conn, error) { return ec.ConnectEarly(8000) },
	}
	hopRounds(b, func(n int) []time.Duration {
		ts, err := freshGets(t, "http://sandbox/hello", n)
		if err != nil {
			b.Fatal(err)
		}
		return ts
	}, func(n int) time.Duration { return inside(b, sb, "get:http://127.0.0.1:8000/hello:"+strconv.Itoa(n)) })
}
