package executor

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// watch carries out a watch request: it reports changes under the directory
// at the request's path as WatchEvents until the host cancels the stream or
// the directory is removed, moved or unmounted. Watches are added with the
// default user's file-system identity (asUser), so a user cannot watch what
// it could not list, and paths resolve inside the sandbox like every other
// file operation's.
func (s *stream) watch() execproto.Result {
	if !s.e.beginWatch() {
		return errResult(fmt.Errorf("watch %s: %d watches are running, the most a sandbox has at once: %w",
			s.req.Path, execproto.MaxWatchStreams, syscall.EMFILE))
	}
	defer s.e.endWatch()
	w, err := newWatcher(s.req.Path, s.req.Recursive, s.asUser, execproto.MaxWatchDirs, execproto.MaxWatchQueue)
	if err != nil {
		return errResult(err)
	}
	defer w.close()
	if err := s.sendEvent(execproto.WatchEvent{Op: execproto.WatchStart}); err != nil {
		return errResult(err)
	}
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		w.forward(quit, s.sendEvent)
	}()
	go func() {
		defer wg.Done()
		select {
		case <-s.stop:
			s.out.Close() // a send waiting for credit gives up
			w.close()     // and so does the read
		case <-quit:
		}
	}()
	err = w.run()
	close(quit)
	wg.Wait()
	if err != nil {
		return errResult(err)
	}
	return execproto.Result{}
}

// beginWatch counts a watch stream against MaxWatchStreams; endWatch must
// follow a true answer.
func (e *executor) beginWatch() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.watches >= execproto.MaxWatchStreams {
		return false
	}
	e.watches++
	return true
}

func (e *executor) endWatch() {
	e.mu.Lock()
	e.watches--
	e.mu.Unlock()
}

// sendEvent sends one event in one data frame, waiting for the credit of
// the whole frame, so that a frame boundary is an event boundary.
func (s *stream) sendEvent(ev execproto.WatchEvent) error {
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	if len(b) > execproto.ChunkSize {
		// Validate bounds the path so that this cannot happen.
		return fmt.Errorf("watch event of %d bytes", len(b))
	}
	for got := 0; got < len(b); {
		n, err := s.out.Take(len(b) - got)
		if err != nil {
			return err
		}
		got += n
	}
	return s.e.w.Write(execproto.DataFrame(s.id, execproto.Stdout, b))
}

// diskUsage reports how full the sandbox's writable layers are: the scratch
// tmpfs (home, and the upper layers of the workspace and the root, which
// share it) seen through the home directory, plus /tmp.
func diskUsage(home string) execproto.Result {
	var d execproto.DiskUsage
	for _, p := range []string{home, "/tmp"} {
		var st unix.Statfs_t
		if err := unix.Statfs(p, &st); err != nil {
			return errResult(fmt.Errorf("statfs %s: %w", p, err))
		}
		bs := int64(st.Bsize)
		d.Total += int64(st.Blocks) * bs
		d.Used += int64(st.Blocks-st.Bfree) * bs
	}
	return execproto.Result{Disk: &d}
}

// Inotify masks. A directory's own deletion or move matters only for the
// watched root; its parent reports it for every other directory.
const (
	watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_ATTRIB | unix.IN_DELETE |
		unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF |
		unix.IN_ONLYDIR | unix.IN_EXCL_UNLINK
	// Subdirectories found while walking are never reached through a
	// symlink: a link planted in the tree must not widen the watch (or loop
	// it). The root may be a link; it resolves inside the sandbox.
	subdirMask = watchMask | unix.IN_DONT_FOLLOW
)

// errWatchEnded says the watched directory is gone (removed, moved away or
// unmounted); the watch ends without an error.
var errWatchEnded = errors.New("the watched directory is gone")

// watcher turns the inotify events of one directory (and, if recursive,
// every directory below it, including those created later) into
// WatchEvents, queued for a sender. Only the goroutine in run touches dirs
// and the queue's producer state; close may be called from anywhere.
type watcher struct {
	root      string
	recursive bool
	// as runs a function with the watching user's file-system identity.
	as      func(func() error) error
	maxDirs int

	f         *os.File // the inotify instance, non-blocking: reads park in the runtime's poller
	rc        syscall.RawConn
	closeOnce sync.Once

	dirs   map[int32]string // watch descriptor -> directory path
	rootWD int32

	// q holds events for forward. It has one slot beyond maxQueue, kept
	// for the overflow event that says the queue was full.
	q        chan execproto.WatchEvent
	maxQueue int
	dropping bool // events are dropped until the queue drains to half
}

func newWatcher(root string, recursive bool, as func(func() error) error, maxDirs, maxQueue int) (*watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("watch %s: inotify: %w", root, err)
	}
	f := os.NewFile(uintptr(fd), "inotify")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("watch %s: %w", root, err)
	}
	w := &watcher{
		root: root, recursive: recursive, as: as, maxDirs: maxDirs, f: f, rc: rc,
		dirs: map[int32]string{}, q: make(chan execproto.WatchEvent, maxQueue+1), maxQueue: maxQueue,
	}
	err = as(func() error {
		wd, err := w.add(root, watchMask)
		if err != nil {
			return &fs.PathError{Op: "watch", Path: root, Err: err}
		}
		w.rootWD = wd
		w.dirs[wd] = root
		if recursive {
			return w.addBelow(root, false)
		}
		return nil
	})
	if err != nil {
		w.close()
		return nil, err
	}
	return w, nil
}

// close ends the watch: a read in progress returns. It is idempotent.
func (w *watcher) close() {
	w.closeOnce.Do(func() { w.f.Close() })
}

// add adds an inotify watch on p. It holds a reference on the descriptor
// while it does, so a concurrent close cannot hand its number to another
// file first.
func (w *watcher) add(p string, mask uint32) (int32, error) {
	var wd int
	var err error
	if cerr := w.rc.Control(func(fd uintptr) { wd, err = unix.InotifyAddWatch(int(fd), p, mask) }); cerr != nil {
		return 0, cerr
	}
	return int32(wd), err
}

func (w *watcher) remove(wd int32) {
	_ = w.rc.Control(func(fd uintptr) { _, _ = unix.InotifyRmWatch(int(fd), uint32(wd)) })
}

// addBelow watches every directory below dir, breadth first, without
// following symlinks. With emit, it reports what it finds as created, and
// a file with content as written too: a directory made and filled before
// its watch was added would otherwise hide its first files (what is in a
// directory made during the watch was written during it). It stops at
// maxDirs directories and reports an overflow where it stopped.
// Preconditions: runs inside w.as.
func (w *watcher) addBelow(dir string, emit bool) error {
	queue := []string{dir}
	for len(queue) > 0 {
		d := queue[0]
		queue = queue[1:]
		des, err := os.ReadDir(d)
		if err != nil {
			continue // removed meanwhile, or not readable by the user
		}
		for _, de := range des {
			p := joinPath(d, de.Name())
			isDir := de.Type().IsDir()
			if emit {
				w.push(execproto.WatchEvent{Op: execproto.WatchCreate, Path: p, Dir: isDir})
				if de.Type().IsRegular() {
					if fi, err := de.Info(); err == nil && fi.Size() > 0 {
						w.push(execproto.WatchEvent{Op: execproto.WatchWrite, Path: p})
					}
				}
			}
			if !isDir {
				continue
			}
			if len(w.dirs) >= w.maxDirs {
				w.push(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: p})
				return nil
			}
			wd, err := w.add(p, subdirMask)
			switch {
			case errors.Is(err, unix.ENOSPC):
				// The kernel's watch limit for the user: as good as ours.
				w.push(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: p})
				return nil
			case err != nil:
				continue // gone, replaced by a link, or not readable
			}
			if _, known := w.dirs[wd]; !known {
				w.dirs[wd] = p
				queue = append(queue, p)
			}
		}
	}
	return nil
}

// forget stops watching dir and everything below it (moved away: the paths
// of its events would be wrong from now on).
func (w *watcher) forget(dir string) {
	for wd, p := range w.dirs {
		if wd != w.rootWD && (p == dir || strings.HasPrefix(p, dir+"/")) {
			delete(w.dirs, wd)
			w.remove(wd)
		}
	}
}

// push queues ev for the sender without ever blocking. When the queue holds
// maxQueue events it queues one overflow event in the spare slot and drops
// everything until the sender has taken half of them.
func (w *watcher) push(ev execproto.WatchEvent) {
	if ev.Validate() != nil {
		// A path too long for the protocol: say that something changed.
		ev = execproto.WatchEvent{Op: execproto.WatchOverflow, Path: w.root}
	}
	if w.dropping {
		if len(w.q) > w.maxQueue/2 {
			return
		}
		w.dropping = false
	}
	if len(w.q) >= w.maxQueue {
		w.dropping = true
		w.q <- execproto.WatchEvent{Op: execproto.WatchOverflow, Path: w.root}
		return
	}
	w.q <- ev
}

// forward hands queued events to send until quit is closed, then sends what
// is left. It stops early if send fails (the stream was cancelled or the
// connection is gone); push never blocks, so the reader is not stuck then.
func (w *watcher) forward(quit <-chan struct{}, send func(execproto.WatchEvent) error) {
	for {
		select {
		case ev := <-w.q:
			if send(ev) != nil {
				return
			}
		case <-quit:
			for {
				select {
				case ev := <-w.q:
					if send(ev) != nil {
						return
					}
				default:
					return
				}
			}
		}
	}
}

// run reads inotify events until the watcher is closed (nil) or the watched
// directory is gone (nil, after its remove or rename event).
func (w *watcher) run() error {
	// Room for many events; one needs at most 16 bytes and a name of
	// NAME_MAX+1.
	buf := make([]byte, 64<<10)
	for {
		n, err := w.f.Read(buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || errors.Is(err, fs.ErrClosed) {
				return nil
			}
			return fmt.Errorf("watch %s: read: %w", w.root, err)
		}
		evs, err := parseInotify(buf[:n])
		if err != nil {
			return fmt.Errorf("watch %s: %w", w.root, err)
		}
		for _, ev := range evs {
			if err := w.handle(ev); err != nil {
				if errors.Is(err, errWatchEnded) {
					return nil
				}
				return err
			}
		}
	}
}

// handle turns one inotify event into WatchEvents.
func (w *watcher) handle(ev inotifyEvent) error {
	if ev.mask&unix.IN_Q_OVERFLOW != 0 {
		w.push(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: w.root})
		return nil
	}
	dir, ok := w.dirs[ev.wd]
	if !ok {
		return nil // a watch already forgotten
	}
	if ev.mask&unix.IN_IGNORED != 0 {
		delete(w.dirs, ev.wd)
		if ev.wd == w.rootWD {
			return errWatchEnded
		}
		return nil
	}
	isDir := ev.mask&unix.IN_ISDIR != 0
	p := dir
	if ev.name != "" {
		p = joinPath(dir, ev.name)
	}
	switch {
	case ev.mask&unix.IN_CREATE != 0:
		w.push(execproto.WatchEvent{Op: execproto.WatchCreate, Path: p, Dir: isDir})
		if isDir && w.recursive {
			return w.addNew(p, true)
		}
	case ev.mask&unix.IN_MOVED_TO != 0:
		// Watched before it is reported: once its event is out, a change
		// inside is reported too.
		if isDir && w.recursive {
			if err := w.addNew(p, false); err != nil {
				return err
			}
		}
		w.push(execproto.WatchEvent{Op: execproto.WatchCreate, Path: p, Dir: isDir})
	case ev.mask&unix.IN_MODIFY != 0:
		w.push(execproto.WatchEvent{Op: execproto.WatchWrite, Path: p})
	case ev.mask&unix.IN_ATTRIB != 0:
		w.push(execproto.WatchEvent{Op: execproto.WatchChmod, Path: p, Dir: isDir})
	case ev.mask&unix.IN_DELETE != 0:
		w.push(execproto.WatchEvent{Op: execproto.WatchRemove, Path: p, Dir: isDir})
	case ev.mask&unix.IN_MOVED_FROM != 0:
		// Forgotten before it is reported, likewise.
		if isDir && w.recursive {
			w.forget(p)
		}
		w.push(execproto.WatchEvent{Op: execproto.WatchRename, Path: p, Dir: isDir})
	case ev.mask&unix.IN_DELETE_SELF != 0 && ev.wd == w.rootWD:
		w.push(execproto.WatchEvent{Op: execproto.WatchRemove, Path: w.root, Dir: true})
	case ev.mask&(unix.IN_MOVE_SELF|unix.IN_UNMOUNT) != 0 && ev.wd == w.rootWD:
		// The paths of later events would be wrong: end here.
		if ev.mask&unix.IN_MOVE_SELF != 0 {
			w.push(execproto.WatchEvent{Op: execproto.WatchRename, Path: w.root, Dir: true})
		}
		return errWatchEnded
	}
	return nil
}

// addNew watches a directory that appeared in the tree, and what is below
// it.
func (w *watcher) addNew(dir string, emit bool) error {
	return w.as(func() error {
		if len(w.dirs) >= w.maxDirs {
			w.push(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: dir})
			return nil
		}
		wd, err := w.add(dir, subdirMask)
		switch {
		case errors.Is(err, unix.ENOSPC):
			w.push(execproto.WatchEvent{Op: execproto.WatchOverflow, Path: dir})
			return nil
		case err != nil:
			return nil // gone again, or replaced by a link
		}
		if _, known := w.dirs[wd]; known {
			return nil
		}
		w.dirs[wd] = dir
		return w.addBelow(dir, emit)
	})
}

func joinPath(dir, name string) string {
	if dir == "/" {
		return "/" + name
	}
	return dir + "/" + name
}

// inotifyEvent is one decoded inotify record.
type inotifyEvent struct {
	wd     int32
	mask   uint32
	cookie uint32 // pairs the two halves of a move
	name   string
}

// parseInotify decodes the records the kernel wrote into b: each a fixed
// header (wd, mask, cookie, name length) followed by a NUL-padded name.
func parseInotify(b []byte) ([]inotifyEvent, error) {
	var out []inotifyEvent
	for len(b) > 0 {
		if len(b) < unix.SizeofInotifyEvent {
			return out, fmt.Errorf("inotify: %d bytes left, short of a record", len(b))
		}
		ev := inotifyEvent{
			wd:     int32(binary.NativeEndian.Uint32(b[0:4])),
			mask:   binary.NativeEndian.Uint32(b[4:8]),
			cookie: binary.NativeEndian.Uint32(b[8:12]),
		}
		n := binary.NativeEndian.Uint32(b[12:16])
		b = b[unix.SizeofInotifyEvent:]
		if uint64(n) > uint64(len(b)) {
			return out, fmt.Errorf("inotify: a name of %d bytes with %d left", n, len(b))
		}
		name := b[:n]
		if i := strings.IndexByte(string(name), 0); i >= 0 {
			name = name[:i]
		}
		ev.name = string(name)
		b = b[n:]
		out = append(out, ev)
	}
	return out, nil
}
