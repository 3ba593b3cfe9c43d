//go:build unix

package egress

import (
	"errors"
	"io"
	"os"
	"syscall"
)

// reader returns how h reads its source. On a socket the buffer is taken
// from the pool only once the socket has data, and given back when it has
// none: the read runs inside RawConn.Read, which waits for readability in
// Go's poller like an ordinary Read but without a buffer held. So a
// thousand idle tunnels hold no buffers, however large the buffers are.
// Deadlines and Close end the wait as they end a Read.
func (h *tunnelHalf) reader() readFunc {
	sc, ok := h.src.(syscall.Conn)
	if !ok {
		return h.heldRead
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return h.heldRead
	}
	// One closure per tunnel half, not per read: its state lives here.
	var (
		bp    *[]byte
		limit int
		n     int
		rerr  error
	)
	try := func(fd uintptr) bool {
		if bp == nil {
			bp = tunnelPool.Get().(*[]byte)
		}
		for {
			n, rerr = syscall.Read(int(fd), (*bp)[:limit])
			if !errors.Is(rerr, syscall.EINTR) {
				break
			}
		}
		if errors.Is(rerr, syscall.EAGAIN) {
			tunnelPool.Put(bp)
			bp = nil
			return false // wait for data
		}
		return true
	}
	return func(m int) (*[]byte, int, error) {
		limit = m
		err := rc.Read(try)
		b := bp
		bp = nil
		switch {
		case err != nil:
			return b, 0, err
		case rerr != nil:
			return b, 0, os.NewSyscallError("read", rerr)
		case n == 0:
			return b, 0, io.EOF
		}
		return b, n, nil
	}
}
