package postgres

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"sync"
	"testing"
)

// dropMode says what a commitProxy does to the next COMMIT a client sends.
type dropMode int

const (
	// passAll forwards everything.
	passAll dropMode = iota
	// dropCommit closes both connections instead of forwarding the
	// COMMIT: the server never sees it and rolls back.
	dropCommit
	// dropCommitReply forwards the COMMIT, waits for the server's reply
	// (so the transaction has committed) and closes both connections
	// instead of passing the reply on.
	dropCommitReply
)

func (m dropMode) String() string {
	return [...]string{"pass", "commit_never_arrives", "commit_reply_lost"}[m]
}

// commitProxy forwards PostgreSQL connections from a unix socket in a
// directory of its own to the test server's socket, reading the frames of
// the protocol on the way so that it can break the next COMMIT on demand.
// Only the simple-query COMMIT that pgx sends to end a transaction is
// recognized; everything else passes untouched.
type commitProxy struct {
	dir    string // holds the proxy's socket
	target string // the server's socket

	mu sync.Mutex
	// mode is what to do to the next COMMIT; it goes back to passAll once
	// done. Guarded by mu.
	mode dropMode
	// dropped counts the COMMITs broken. Guarded by mu.
	dropped int
}

// newCommitProxy starts a proxy to the server whose socket is in
// serverDir; it stops when t ends.
func newCommitProxy(t *testing.T, serverDir string) *commitProxy {
	t.Helper()
	p := &commitProxy{dir: t.TempDir(), target: filepath.Join(serverDir, ".s.PGSQL.5432")}
	ln, err := net.Listen("unix", filepath.Join(p.dir, ".s.PGSQL.5432"))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	conns := map[net.Conn]bool{}
	var connsMu sync.Mutex
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			connsMu.Lock()
			conns[c] = true
			connsMu.Unlock()
			wg.Go(func() { p.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		connsMu.Lock()
		for c := range conns {
			c.Close() // ends serve, which closes the server side
		}
		connsMu.Unlock()
		wg.Wait()
	})
	return p
}

// url returns dbURL (a URL of pgtest's) with its socket directory replaced
// by the proxy's.
func (p *commitProxy) url(t *testing.T, dbURL string) string {
	t.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("host", p.dir)
	u.RawQuery = q.Encode()
	return u.String()
}

func (p *commitProxy) arm(m dropMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mode = m
}

func (p *commitProxy) drops() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// take returns the mode for a COMMIT just seen and disarms the proxy.
func (p *commitProxy) take() dropMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	m := p.mode
	if m != passAll {
		p.mode = passAll
		p.dropped++
	}
	return m
}

func (p *commitProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("unix", p.target)
	if err != nil {
		return
	}
	defer server.Close()
	// swallow is closed when the client sent a COMMIT whose reply must
	// not reach it.
	swallow := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		defer server.Close()
		defer client.Close()
		// The startup message has a length but no type byte.
		if err := copyFrame(server, client, false); err != nil {
			return
		}
		for {
			typ, body, err := readFrame(client, true)
			if err != nil {
				return
			}
			if typ == 'Q' && string(body) == "commit\x00" {
				switch p.take() {
				case dropCommit:
					return
				case dropCommitReply:
					close(swallow)
				}
			}
			if err := writeFrame(server, typ, body); err != nil {
				return
			}
		}
	})
	wg.Go(func() {
		defer server.Close()
		defer client.Close()
		for {
			typ, body, err := readFrame(server, true)
			if err != nil {
				return
			}
			select {
			case <-swallow:
				if typ == 'C' { // CommandComplete: COMMIT is done
					return
				}
			default:
			}
			if err := writeFrame(client, typ, body); err != nil {
				return
			}
		}
	})
	wg.Wait()
}

// readFrame reads one protocol message: a type byte (if typed), a
// big-endian length that counts itself, and the body.
func readFrame(r io.Reader, typed bool) (byte, []byte, error) {
	var typ byte
	if typed {
		var b [1]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return 0, nil, err
		}
		typ = b[0]
	}
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return 0, nil, err
	}
	size := binary.BigEndian.Uint32(n[:])
	if size < 4 || size > 1<<30 {
		return 0, nil, errors.New("bad frame length")
	}
	body := make([]byte, size-4)
	if _, err := io.ReadFull(r, body); err != nil {
		return 0, nil, err
	}
	return typ, body, nil
}

func writeFrame(w io.Writer, typ byte, body []byte) error {
	b := make([]byte, 0, 5+len(body))
	b = append(b, typ)
	b = binary.BigEndian.AppendUint32(b, uint32(4+len(body)))
	b = append(b, body...)
	_, err := w.Write(b)
	return err
}

// copyFrame copies one untyped frame from r to w.
func copyFrame(w io.Writer, r io.Reader, typed bool) error {
	_, body, err := readFrame(r, typed)
	if err != nil {
		return err
	}
	b := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
	_, err = w.Write(append(b, body...))
	return err
}
