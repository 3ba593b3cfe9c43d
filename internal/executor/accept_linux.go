package executor

import (
	"errors"
	"syscall"

	"golang.org/x/sys/unix"
)

// acceptLoop accepts connections on the non-blocking listening socket
// behind rc, each as a non-blocking, close-on-exec descriptor handed to
// serve, until the listener fails for good. Errors that say nothing about
// the listener (descriptor or memory pressure, a connection aborted before
// it was accepted, a signal) are retried.
func acceptLoop(rc syscall.RawConn, serve func(fd int)) {
	for {
		var nfd int
		var aerr error
		err := rc.Read(func(fd uintptr) bool {
			nfd, _, aerr = unix.Accept4(int(fd), unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC)
			return !errors.Is(aerr, unix.EAGAIN)
		})
		if err != nil {
			return
		}
		if aerr != nil {
			if retryableAccept(aerr) {
				continue
			}
			return
		}
		serve(nfd)
	}
}

func retryableAccept(err error) bool {
	for _, e := range []error{unix.EMFILE, unix.ENFILE, unix.ENOBUFS, unix.ENOMEM, unix.ECONNABORTED, unix.EINTR} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}
