package e2b

import (
	"bufio"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestRelayFullDuplex: a relayed request whose answer begins before the
// relay's transport is done with the request's body (as a process's
// start event may: the transport reads the body once more, for its end,
// after sending it) gets its whole answer back. An HTTP/1 relay that is
// not full duplex closes the body as the answer begins; the transport's
// last read then fails, it closes the connection to the owner, and the
// answer is cut after its first event. The transport here holds that
// last read until the client has the answer's first line, which is the
// order a loaded machine sometimes runs it in.
func TestRelayFullDuplex(t *testing.T) {
	answered, lastRead := make(chan struct{}), make(chan struct{})
	owner := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || string(body) != `{"process":{"cmd":"true"}}` {
			t.Errorf("the owner's body = %q, %v", body, err)
		}
		if r.Header.Get(relayedHeader) != "replica-b" {
			t.Errorf("%s = %q, want replica-b", relayedHeader, r.Header.Get(relayedHeader))
		}
		io.WriteString(w, "start\n")
		w.(http.Flusher).Flush()
		select {
		case <-lastRead:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, "end\n")
	}))
	defer owner.Close()
	target, _ := url.Parse(owner.URL)
	transport := newRelayTransport()
	defer transport.CloseIdleConnections()
	held := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		r.Body = &heldEnd{ReadCloser: r.Body, left: r.ContentLength, release: answered, done: lastRead}
		return transport.RoundTrip(r)
	})
	relay := httptest.NewServer(relayTo(target, held, "replica-b", func(err error) {
		t.Errorf("the relay failed: %v", err)
	}))
	defer relay.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // a deadlock guard, not a measure
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", relay.URL+"/process.Process/Start", strings.NewReader(`{"process":{"cmd":"true"}}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("through the relay: %v", err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if line, err := br.ReadString('\n'); err != nil || line != "start\n" {
		t.Fatalf("the answer's first line = %q, %v", line, err)
	}
	close(answered)
	if rest, err := io.ReadAll(br); err != nil || string(rest) != "end\n" {
		t.Errorf("the rest of the answer = %q, %v; want its end", rest, err)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// heldEnd is a request body whose reads past its content wait for
// release; done is closed when such a read returned.
type heldEnd struct {
	io.ReadCloser
	left          int64
	release, done chan struct{}
	once          sync.Once
}

func (h *heldEnd) Read(p []byte) (int, error) {
	if h.left > 0 {
		n, err := h.ReadCloser.Read(p[:min(int64(len(p)), h.left)])
		h.left -= int64(n)
		return n, err
	}
	<-h.release
	defer h.once.Do(func() { close(h.done) })
	return h.ReadCloser.Read(p)
}
