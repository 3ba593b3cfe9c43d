package execconn

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// EgressWaiting is how many egress streams ServeEgress keeps waiting in
// the executor: as many connections out of the sandbox as that start at
// once find a stream at hand; more wait a round trip, in the listener's
// backlog, for the streams opened in their place.
const EgressWaiting = 4

// ServeEgress relays the connections a sandbox makes to its proxy address
// (Setup.ProxyStreams) to the host's egress socket, a unix socket of the
// egress proxy that knows the sandbox by it: it keeps EgressWaiting egress
// streams open, and for each that comes up dials socket and copies both
// ways, half-closes included, while another stream waits in its place. It
// returns when ctx ends or the executor connection does; the relays in
// progress end with the connection.
func (c *Conn) ServeEgress(ctx context.Context, sandboxID, socket string) {
	var wg sync.WaitGroup
	defer wg.Wait()
	for range EgressWaiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.egressLoop(ctx, sandboxID, socket)
		}()
	}
}

// egressLoop waits for one connection at a time and relays it in its own
// goroutine, so the loop opens the next stream at once.
func (c *Conn) egressLoop(ctx context.Context, sandboxID, socket string) {
	var relays sync.WaitGroup
	defer relays.Wait()
	for ctx.Err() == nil {
		conn, err := c.Egress(ctx, sandboxID)
		if err != nil {
			select {
			case <-c.Done():
				return
			case <-ctx.Done():
				return
			case <-time.After(100 * time.Millisecond):
				// A refused stream (the connect bound): try again.
			}
			continue
		}
		relays.Add(1)
		go func() {
			defer relays.Done()
			relayEgress(ctx, conn, socket)
		}()
	}
}

// relayEgress copies conn to a new connection to socket and back, each
// direction's end a half-close of the other, until both are done or ctx
// ends.
func relayEgress(ctx context.Context, conn net.Conn, socket string) {
	defer conn.Close()
	var d net.Dialer
	up, err := d.DialContext(ctx, "unix", socket)
	if err != nil {
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() {
		conn.Close()
		up.Close()
	})
	defer stop()
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(up, conn)
		closeWrite(up)
	}()
	_, _ = io.Copy(conn, up)
	closeWrite(conn)
	<-done
}

// closeWrite half-closes c when it can, and closes it otherwise.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}
