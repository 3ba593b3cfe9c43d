package executor

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// notRegular is the refusal of a read of what is not a regular file: a
// FIFO (whose open would wait for a writer and whose read for data that
// may never come), a socket or a device (endless, or with side effects).
type notRegular struct {
	path, kind string
}

func (e *notRegular) Error() string {
	return fmt.Sprintf("read %s: a %s, not a regular file", e.path, e.kind)
}

func (e *notRegular) Unwrap() error { return unix.EINVAL }

func fileKind(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFIFO:
		return "FIFO"
	case unix.S_IFSOCK:
		return "socket"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFLNK:
		return "symlink"
	}
	return "special file"
}

// errShrank ends a read with a head whose file yielded less than the size
// it had when opened.
type errShrank struct {
	path      string
	got, size int64
}

func (e *errShrank) Error() string {
	return fmt.Sprintf("read %s: the file shrank while read (%d of the %d bytes it had when opened)", e.path, e.got, e.size)
}

// tooBig refuses a read of more than its limit.
func tooBig(path string, size, limit int64) error {
	if size < 0 {
		return fmt.Errorf("read %s: the file yields more than %d bytes: %w", path, limit, unix.EFBIG)
	}
	return fmt.Errorf("read %s: the file is %d bytes, over the %d read: %w", path, size, limit, unix.EFBIG)
}

// read streams the file at the request's path to the host on the stdout
// channel (OpRead). The file is opened without waiting (a FIFO opens at
// once, writer or not) and must be a regular file. Everything after the
// open works on the open file: a symlink or name swapped while the file is
// read changes nothing. A cancelled stream stops at its next chunk.
//
// With the request's Head, the file's fstat goes first (on the stderr
// channel, which is then closed), and exactly the size it gave is sent
// (Request.Head). Without it, the file is read to its end, cut at the
// request's Limit.
func (s *stream) read() (execproto.Result, error) {
	req := &s.req
	var res execproto.Result
	fd, err := openRead(req.Path)
	if err != nil {
		return res, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return res, &fs.PathError{Op: "stat", Path: req.Path, Err: err}
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
	case unix.S_IFDIR:
		return res, &fs.PathError{Op: "read", Path: req.Path, Err: unix.EISDIR}
	default:
		return res, &notRegular{path: req.Path, kind: fileKind(st.Mode)}
	}
	// Reads of a regular file never wait on O_NONBLOCK, but clear it all
	// the same.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFL, unix.O_RDONLY); err != nil {
		return res, &fs.PathError{Op: "fcntl", Path: req.Path, Err: err}
	}
	en := s.e.statEntry(req.Path, &st)
	want, limit := int64(-1), req.Limit // want: the bytes to send, -1 to the end
	if req.Head {
		if limit > 0 && st.Size > limit {
			return res, tooBig(req.Path, st.Size, limit)
		}
		head, err := execproto.AppendMessage(nil, en)
		if err != nil {
			return res, err
		}
		if err := s.e.w.SendData(s.id, execproto.Stderr, s.errc, s.chunk, head); err != nil {
			return res, err
		}
		if err := s.e.w.Write(execproto.CloseFrame(s.id, execproto.Stderr)); err != nil {
			return res, err
		}
		if st.Size > 0 {
			want = st.Size
		}
	}
	n, err := s.sendFile(fd, want, limit, req.Head)
	if err != nil {
		return res, err
	}
	en.Size = n
	res.Entries = []execproto.Entry{en}
	return res, nil
}

// openRead opens path to read it without waiting and without making it
// the executor's terminal.
func openRead(path string) (int, error) {
	for {
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return -1, &fs.PathError{Op: "open", Path: path, Err: err}
		}
		return fd, nil
	}
}

// sendFile sends fd's content on the stdout channel: want bytes (an early
// end is an error), or, with want < 0, to its end; limit > 0 caps what is
// sent, silently unless strict.
func (s *stream) sendFile(fd int, want, limit int64, strict bool) (int64, error) {
	path := s.req.Path
	buf := make([]byte, s.chunk)
	var sent int64
	for want < 0 || sent < want {
		p := buf
		if want >= 0 && want-sent < int64(len(p)) {
			p = p[:want-sent]
		}
		if limit > 0 && !strict && limit-sent < int64(len(p)) {
			p = p[:limit-sent]
		}
		if len(p) == 0 {
			break
		}
		m, err := unix.Read(fd, p)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return sent, &fs.PathError{Op: "read", Path: path, Err: err}
		}
		if m == 0 {
			if want >= 0 {
				return sent, &errShrank{path: path, got: sent, size: want}
			}
			break
		}
		if strict && limit > 0 && sent+int64(m) > limit {
			return sent, tooBig(path, -1, limit)
		}
		if _, err := s.e.w.SendDataUntil(s.id, execproto.Stdout, s.out, s.chunk, p[:m], s.stop); err != nil {
			if errors.Is(err, execproto.ErrStopped) {
				return sent, fmt.Errorf("read %s: cancelled", path)
			}
			return sent, err
		}
		sent += int64(m)
	}
	return sent, nil
}

// statEntry describes the open file of st, found at p, as entry does a
// path's (without its extended attributes).
func (e *executor) statEntry(p string, st *unix.Stat_t) execproto.Entry {
	mode := fs.FileMode(st.Mode & 0o777)
	if st.Mode&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if st.Mode&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if st.Mode&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return execproto.Entry{
		Name: filepath.Base(p), Size: st.Size, Mode: uint32(mode),
		ModTime: time.Unix(st.Mtim.Unix()).UnixNano(),
		Owner:   e.idName(e.uidNames, int(st.Uid)), Group: e.idName(e.gidNames, int(st.Gid)),
	}
}
