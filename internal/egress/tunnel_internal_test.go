package egress

import (
	"bytes"
	"errors"
	"io"
	"math"
	"net"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// unixPair returns the two ends of a unix stream connection.
func unixPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	l, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	a, err := net.Dial("unix", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	b, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestCopyHalf copies through one tunnel half over sockets (read in
// place, buffers borrowed) and over net.Pipe (a plain Read), with and
// without a byte budget: every byte arrives in order and is counted once,
// and a spent budget ends the copy with its error and nothing beyond it.
func TestCopyHalf(t *testing.T) {
	data := make([]byte, 3<<20+12345)
	for i := range data {
		data[i] = byte(i * 7)
	}
	pipePair := func(t *testing.T) (net.Conn, net.Conn) {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return a, b
	}
	for _, tc := range []struct {
		name   string
		pair   func(*testing.T) (net.Conn, net.Conn)
		budget int64 // 0: unlimited
	}{
		{"unix", unixPair, 0},
		{"pipe", pipePair, 0},
		{"unix budget", unixPair, 1<<20 + 3},
		{"pipe budget", pipePair, 1<<20 + 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sandbox, src := tc.pair(t) // the test writes to sandbox; the half reads src
			dst, up := tc.pair(t)      // the half writes dst; the test reads up
			var counted atomic.Int64
			left := func() (int64, error) {
				if tc.budget == 0 {
					return math.MaxInt64, nil
				}
				if n := counted.Load(); n < tc.budget {
					return tc.budget - n, nil
				}
				return 0, errBytesOut
			}
			idle := newIdleTimer(time.Hour, func() {})
			defer idle.stop()
			h := &tunnelHalf{
				dst: dst, src: src, idle: idle, left: left,
				countRead: func(n int) { counted.Add(int64(n)) },
			}
			done := make(chan error, 1)
			go func() { done <- h.copy(); dst.Close() }()
			go func() {
				_, _ = sandbox.Write(data)
				sandbox.Close()
			}()
			got, _ := io.ReadAll(up)
			err := <-done
			want := data
			if tc.budget > 0 {
				want = data[:tc.budget]
				if !errors.Is(err, errBytesOut) {
					t.Errorf("copy with a spent budget = %v, want errBytesOut", err)
				}
			} else if err != nil {
				t.Errorf("copy = %v, want nil at EOF", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("copied %d bytes, want the first %d in order", len(got), len(want))
			}
			if n := counted.Load(); n != int64(len(want)) {
				t.Errorf("counted %d bytes, want %d", n, len(want))
			}
		})
	}
}
