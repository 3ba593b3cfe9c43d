package executor

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/executor/seccomp"
)

// The link notifier of an rw workspace (docs/checkpoints.md, "The rw
// mode", and seccomp/notify_linux.go).
//
// A second name for a file, made in a directory the tracker does not
// watch yet, written through and removed before it does, reaches no
// event: the write is reported at that name only, in a directory no one
// listened to. So every link and linkat of a sandbox process stops in the
// kernel until the executor has noted it here; it then goes on. Noting it
// is cheap and takes no lock the tracker holds for long: the count of
// links goes up (every dirty set registered before then counts as
// "everything" when a delta takes it) and the calling thread joins the
// links in flight (a set registered while one may still be making its name
// is "everything" too: the name may land in a directory made after that
// set's drain, unwatched).

// maxInflight bounds the threads a notifier keeps as maybe still in a
// link; past it, after a look at each, the tracker turns off.
const maxInflight = 4096

// linkState is what the notifier tells the tracker.
type linkState struct {
	mu sync.Mutex
	// gen counts the links noted. Guarded by mu.
	gen uint64
	// inflight holds the threads whose noted link may not have returned
	// yet. Guarded by mu.
	inflight map[int]struct{}
	// lost: a thread could not be kept (too many, or no id in this PID
	// namespace); the tracker must turn off. Guarded by mu.
	lost bool
	// linkNrs are the numbers of link and linkat here.
	linkNrs []uint32
	// ignoreInflight, for tests, takes every link as returned.
	ignoreInflight bool
	// hook, for tests, runs after a link is noted and before it is let
	// go on; set before the notifier starts.
	hook func(seccomp.Notif)
}

// noted records a link of thread tid before it goes on.
func (l *linkState) noted(tid int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	if tid <= 0 {
		l.lost = true
		return
	}
	if len(l.inflight) >= maxInflight {
		l.prune()
		if len(l.inflight) >= maxInflight {
			l.lost = true
			return
		}
	}
	l.inflight[tid] = struct{}{}
}

// check returns the count of links noted and whether one may still be
// in flight, after dropping the threads that are out of their link.
func (l *linkState) check() (gen uint64, busy, lost bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.prune()
	return l.gen, len(l.inflight) > 0 && !l.ignoreInflight, l.lost
}

// prune drops the threads that have left their link. Preconditions: l.mu
// held.
func (l *linkState) prune() {
	for tid := range l.inflight {
		if l.returned(tid) {
			delete(l.inflight, tid)
		}
	}
}

// returned reports whether thread tid is out of the link it was noted in:
// gone, or stopped in the kernel anywhere but in link or linkat
// (/proc/TID/syscall names the call a blocked thread is in, -1 for none).
// A thread that runs ("running") may still be in it. A thread id reused
// by another thread means the first is gone. A link restarted after a
// signal is noted again.
func (l *linkState) returned(tid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(tid) + "/syscall")
	if err != nil {
		return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESRCH)
	}
	f, _, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	nr, err := strconv.ParseInt(f, 10, 64)
	if err != nil {
		return false // "running", or unreadable
	}
	for _, l := range l.linkNrs {
		if nr == int64(l) {
			return false
		}
	}
	return true
}

// linkNotifier serves the link filter's listener for a tracker.
type linkNotifier struct {
	f    *os.File
	rc   syscall.RawConn
	l    *linkState
	done chan struct{} // closed when serve returns
}

// startLinkNotifier puts the link filter on pt, the thread that forks
// every command, and serves its listener for t in a goroutine. installed
// says whether the filter is in place: from then on a link of a command
// goes on only once noted, or fails (ENOSYS) once the notifier is gone.
// Without the filter (a kernel before 5.5, installed false), the caller
// must not trust t's sets.
func startLinkNotifier(pt *procThread, t *tracker) (n *linkNotifier, installed bool, err error) {
	if err := seccomp.ContinueSupported(); err != nil {
		return nil, false, err
	}
	nrs, err := seccomp.LinkSyscalls()
	if err != nil {
		return nil, false, err
	}
	prog, err := seccomp.LinkNotifyProgram()
	if err != nil {
		return nil, false, err
	}
	fd := -1
	pt.do(func() { fd, err = seccomp.InstallListener(prog) })
	if err != nil {
		return nil, false, err
	}
	// Non-blocking, so serve waits in the runtime's poller (the listener
	// is readable while a notification waits).
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, true, fmt.Errorf("link listener: %w", err)
	}
	f := os.NewFile(uintptr(fd), "seccomp-listener")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, true, fmt.Errorf("link listener: %w", err)
	}
	l := &t.links
	l.mu.Lock()
	l.linkNrs = nrs
	l.mu.Unlock()
	n = &linkNotifier{f: f, rc: rc, l: l, done: make(chan struct{})}
	go n.serve()
	return n, true, nil
}

// serve answers the listener's notifications until it is closed or fails;
// then it closes it, and every link waiting or to come fails with ENOSYS.
func (n *linkNotifier) serve() {
	defer close(n.done)
	defer n.f.Close()
	var req seccomp.Notif
	for {
		var serr error
		err := n.rc.Read(func(fd uintptr) bool {
			for {
				fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
				if _, err := unix.Poll(fds, 0); err != nil {
					if errors.Is(err, unix.EINTR) {
						continue
					}
					serr = err
					return true
				}
				if fds[0].Revents&unix.POLLIN == 0 {
					if fds[0].Revents&(unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0 {
						// No task uses the filter any more (tests:
						// the thread that carried it ended).
						serr = errors.New("link listener: hung up")
						return true
					}
					return false // wait in the poller
				}
				// POLLIN: a notification waits, and the kernel's count of
				// them is at least one: the read does not block.
				if err := seccomp.NotifRecv(int(fd), &req); err != nil {
					if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINTR) {
						continue // the caller went away
					}
					serr = err
					return true
				}
				n.l.noted(int(req.Pid))
				if n.l.hook != nil {
					n.l.hook(req)
				}
				// ENOENT: the caller was killed meanwhile.
				if err := seccomp.NotifContinue(int(fd), req.ID); err != nil && !errors.Is(err, unix.ENOENT) {
					serr = err
					return true
				}
			}
		})
		if err != nil || serr != nil {
			return
		}
	}
}

// stop closes the listener (tests; the executor serves for its life) and
// waits for serve to return.
func (n *linkNotifier) stop() {
	n.f.Close()
	<-n.done
}
