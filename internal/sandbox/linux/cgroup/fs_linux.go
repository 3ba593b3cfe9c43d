package cgroup

import (
	"errors"
	"time"

	"golang.org/x/sys/unix"
)

// Control files are read and written with raw syscalls: New and Destroy sit
// on the sandbox start path, and os.File costs allocations and an fstat per
// file for nothing here.

// writeFile writes data to the existing control file at p in one write(2),
// which is how cgroupfs expects values.
func writeFile(p, data string) error {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return err
	}
	_, err = retryEINTR(func() (int, error) { return unix.Write(fd, []byte(data)) })
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// preadAll reads a cgroup file from its start through an open descriptor:
// reading at offset 0 makes the kernel generate the contents afresh. Only
// for the few-line files Group.Counters keeps open: the kernel hands such a
// file over in one read when it is shorter than the buffer, so a short read
// ends it without a second call.
func preadAll(fd int) ([]byte, error) { return readAt(fd, true) }

// readFile returns the content of the control file at p.
func readFile(p string) ([]byte, error) {
	fd, err := retryEINTR(func() (int, error) { return unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0) })
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return readAt(fd, false)
}

// readAt reads fd from offset 0 to its end: until a read returns nothing,
// or, when shortEnds, until one does not fill the buffer.
func readAt(fd int, shortEnds bool) ([]byte, error) {
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := retryEINTR(func() (int, error) { return unix.Pread(fd, buf[len(buf):cap(buf)], int64(len(buf))) })
		if err != nil {
			return nil, err
		}
		if n == 0 || shortEnds && len(buf)+n < cap(buf) {
			return buf[:len(buf)+n], nil
		}
		buf = buf[:len(buf)+n]
	}
}

// exists reports whether p exists.
func exists(p string) bool {
	return unix.Access(p, unix.F_OK) == nil
}

// mkdir creates directory p; it reports whether it did (false if p existed).
func mkdir(p string) (bool, error) {
	err := unix.Mkdir(p, 0o755)
	if errors.Is(err, unix.EEXIST) {
		return false, nil
	}
	return err == nil, err
}

// rmdir removes the cgroup directory p; a missing p is not an error.
func rmdir(p string) error {
	err := unix.Rmdir(p)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// retryEINTR calls f until it does not fail with EINTR.
func retryEINTR(f func() (int, error)) (int, error) {
	for {
		n, err := f()
		if !errors.Is(err, unix.EINTR) {
			return n, err
		}
	}
}

// backoff is the first poll interval when waiting for a cgroup to empty or
// freeze; a SIGKILLed process usually exits in well under a millisecond.
const (
	backoffStart = 200 * time.Microsecond
	backoffMax   = 10 * time.Millisecond
)

// poll calls done until it reports true or an error, sleeping with
// exponential backoff between calls, and reports false if deadline passes
// first.
func poll(deadline time.Time, done func() (bool, error)) (bool, error) {
	wait := backoffStart
	for {
		ok, err := done()
		if ok || err != nil {
			return ok, err
		}
		now := time.Now()
		if !now.Before(deadline) {
			return false, nil
		}
		time.Sleep(min(wait, deadline.Sub(now)))
		wait = min(2*wait, backoffMax)
	}
}
