package executor

import (
	"context"
	"io"
	"net"
	"sync"
)

// startProxy listens on the sandbox's loopback and forwards every connection
// to the host's egress socket, which was bound into the sandbox at setup.
// The socket identifies the sandbox to the host; nothing the sandbox sends
// can claim another identity. There is no other route out.
func (e *executor) startProxy() error {
	lc := net.ListenConfig{}
	// MPTCP slips past Landlock's TCP rules on some kernels; seccomp refuses
	// it anyway, so ask for plain TCP up front.
	lc.SetMultipathTCP(false)
	ln, err := lc.Listen(context.Background(), "tcp", e.setup.ProxyAddr)
	if err != nil {
		return err
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go forward(c)
		}
	}()
	return nil
}

func forward(c net.Conn) {
	defer c.Close()
	up, err := net.Dial("unix", proxySocket)
	if err != nil {
		return
	}
	defer up.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, c)
		if u, ok := up.(*net.UnixConn); ok {
			_ = u.CloseWrite()
		}
	}()
	_, _ = io.Copy(c, up)
	if t, ok := c.(*net.TCPConn); ok {
		_ = t.CloseWrite()
	}
	wg.Wait()
}
