package egress_test

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/egress"
)

// helloRecord returns the ClientHello record a crypto/tls client sends
// for serverName.
func helloRecord(t testing.TB, serverName string) []byte {
	t.Helper()
	c, s := net.Pipe()
	defer s.Close()
	go func() {
		defer c.Close()
		tc := tls.Client(c, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
		_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
		_ = tc.Handshake() // fails when s closes; only the hello matters
	}()
	_ = s.SetReadDeadline(time.Now().Add(5 * time.Second))
	head := make([]byte, 5)
	if _, err := io.ReadFull(s, head); err != nil {
		t.Fatal(err)
	}
	rec := make([]byte, 5+int(binary.BigEndian.Uint16(head[3:])))
	copy(rec, head)
	if _, err := io.ReadFull(s, rec[5:]); err != nil {
		t.Fatal(err)
	}
	return rec
}

// TestTunnelBytesAfterHello passes on, in order, bytes the sandbox sends in
// the same write as its ClientHello (read with the request head), then the
// rest of the stream, both ways.
func TestTunnelBytesAfterHello(t *testing.T) {
	hello := helloRecord(t, "raw.test")
	got := make(chan []byte, 1)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			got <- nil
			return
		}
		defer c.Close()
		want := len(hello) + len("early") + len("later")
		b := make([]byte, want)
		_, err = io.ReadFull(c, b)
		got <- b
		if err == nil {
			_, _ = io.WriteString(c, "reply")
		}
	}()
	h := start(t, egress.Config{Policy: mustPolicy(t, fmtPolicy(`
network:
  resolve: [{host: "raw.test:443", to: "%s"}]
  allow: [{host: raw.test, ports: [443]}]
`, l.Addr().String()))})
	c := h.dial(t)
	br := bufio.NewReader(c)
	first := "CONNECT raw.test:443 HTTP/1.1\r\nHost: raw.test:443\r\n\r\n" + string(hello) + "early"
	if resp := rawRequest(t, c, br, first); resp.StatusCode != 200 {
		t.Fatalf("CONNECT = %d %q", resp.StatusCode, reasonOf(resp))
	}
	if _, err := io.WriteString(c, "later"); err != nil {
		t.Fatal(err)
	}
	if b, want := <-got, string(hello)+"earlylater"; string(b) != want {
		t.Fatalf("upstream got %q, want the hello then %q", b[min(len(b), len(hello)):], "earlylater")
	}
	reply := make([]byte, 5)
	if _, err := io.ReadFull(br, reply); err != nil || string(reply) != "reply" {
		t.Fatalf("sandbox got %q, %v; want %q", reply, err, "reply")
	}
}
