package egress

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// maxClientHello bounds the bytes buffered while waiting for a tunnel's
// ClientHello: crypto/tls accepts handshake messages up to 64 KiB, which
// may arrive in several records, each with a 5-byte header.
const maxClientHello = 64<<10 + 1<<10

var (
	// errNotTLS means a tunnel did not start with a TLS ClientHello.
	errNotTLS = errors.New("egress: tunnel does not start with a TLS ClientHello")
	// errHelloSeen stops the handshake once the ClientHello is parsed.
	errHelloSeen = errors.New("egress: client hello seen")
	// errHelloTooLarge means the first flight exceeded maxClientHello.
	errHelloTooLarge = errors.New("egress: client hello too large")
)

// readClientHello reads a TLS ClientHello from r and returns its SNI ("" when
// the client sent none) and every byte it read, which the caller must pass
// upstream before anything else. The parsing is crypto/tls's own: a server
// handshake over a recording conn is stopped by GetConfigForClient, so no
// hand-written parser sees untrusted bytes, and nothing is ever written back
// to the client (the recording conn swallows the alert). The caller bounds
// the time with a read deadline on the connection r reads from.
func readClientHello(r io.Reader) (sni string, consumed []byte, err error) {
	rc := &recordingConn{r: r}
	var (
		name string
		seen bool
	)
	srv := tls.Server(rc, &tls.Config{
		GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) {
			name, seen = h.ServerName, true
			return nil, errHelloSeen
		},
	})
	herr := srv.Handshake()
	if seen {
		return name, rc.buf, nil
	}
	if rc.err != nil {
		// An error from the underlying reader (EOF, deadline, size).
		return "", rc.buf, fmt.Errorf("egress: read client hello: %w", rc.err)
	}
	return "", rc.buf, fmt.Errorf("%w: %w", errNotTLS, herr)
}

// recordingConn is the net.Conn crypto/tls sees while readClientHello runs:
// reads come from r and are kept (up to maxClientHello), writes vanish.
type recordingConn struct {
	r   io.Reader
	buf []byte
	err error
}

func (c *recordingConn) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	room := maxClientHello - len(c.buf)
	if room <= 0 {
		c.err = errHelloTooLarge
		return 0, c.err
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.buf = append(c.buf, p[:n]...)
	if err != nil {
		c.err = err
	}
	return n, err
}

func (c *recordingConn) Write(p []byte) (int, error)        { return len(p), nil }
func (c *recordingConn) Close() error                       { return nil }
func (c *recordingConn) LocalAddr() net.Addr                { return helloAddr{} }
func (c *recordingConn) RemoteAddr() net.Addr               { return helloAddr{} }
func (c *recordingConn) SetDeadline(t time.Time) error      { return nil }
func (c *recordingConn) SetReadDeadline(t time.Time) error  { return nil }
func (c *recordingConn) SetWriteDeadline(t time.Time) error { return nil }

type helloAddr struct{}

func (helloAddr) Network() string { return "hello" }
func (helloAddr) String() string  { return "hello" }
