package executor

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
)

// file carries out a file operation. It runs with the file-system identity of
// the sandbox's default user, on a thread of its own, so files it creates
// belong to that user and it can touch nothing that user could not. Paths
// resolve inside the sandbox's root: symlinks and ".." cannot leave it,
// because the host's files are not in this mount namespace at all.
func (s *stream) file() execproto.Result {
	if s.req.Op == execproto.OpMkdir && s.req.MkdirAsRoot {
		if err := s.mkdirAsRoot(); err != nil {
			return errResult(err)
		}
		return execproto.Result{}
	}
	var res execproto.Result
	err := s.asUser(func() (err error) {
		res, err = s.fileOp()
		return err
	})
	if err != nil {
		return errResult(err)
	}
	return res
}

// mkdirAsRoot makes the directory at the request's path and its missing
// parents as the sandbox's root (the executor's own identity), and gives
// each it makes to the request's user (Request.MkdirAsRoot). A component
// that exists must be a directory; a symlink to one is followed, as
// MkdirAll does, and is not the user's to be given.
func (s *stream) mkdirAsRoot() error {
	u, err := s.e.findUser(s.req.User)
	if err != nil {
		return err
	}
	mode := uint32(s.req.Mode)
	if mode == 0 {
		mode = 0o755
	}
	p := "/"
	for _, name := range strings.Split(strings.Trim(filepath.Clean(s.req.Path), "/"), "/") {
		if name == "" {
			continue
		}
		p = filepath.Join(p, name)
		err := unix.Mkdir(p, mode)
		if errors.Is(err, unix.EEXIST) {
			var st unix.Stat_t
			if err := unix.Stat(p, &st); err != nil {
				return &fs.PathError{Op: "mkdir", Path: p, Err: err}
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				return &fs.PathError{Op: "mkdir", Path: p, Err: unix.ENOTDIR}
			}
			continue
		}
		if err != nil {
			return &fs.PathError{Op: "mkdir", Path: p, Err: err}
		}
		if err := unix.Lchown(p, u.UID, u.GID); err != nil {
			return &fs.PathError{Op: "chown", Path: p, Err: err}
		}
	}
	return nil
}

// asUser runs f on a thread of its own with the file-system identity of the
// request's user (the sandbox's default user unless it names one), so what
// f creates belongs to that user and f can touch nothing that user could
// not. An error wrapping errFsid means the
// identity could not be set: f did not run, and the caller must not use
// asUser again (the thread's identity may be half changed; it stays locked,
// and ends with the goroutine rather than go back to the scheduler).
func (s *stream) asUser(f func() error) error {
	u, err := s.e.findUser(s.req.User)
	if err != nil {
		return err
	}
	runtime.LockOSThread()
	if err := setfsid(u.UID, u.GID); err != nil {
		return err
	}
	err = f()
	// Restore root's fs identity and return the thread: a thread that ends
	// must be replaced, and a new thread may be impossible once commands
	// have used up the sandbox's pids limit.
	if resetfsid() == nil {
		runtime.UnlockOSThread()
	}
	return err
}

func (s *stream) fileOp() (execproto.Result, error) {
	req := &s.req
	var res execproto.Result
	switch req.Op {
	case execproto.OpRead:
		return s.read()
	case execproto.OpWrite:
		mode := os.FileMode(req.Mode)
		if mode == 0 {
			mode = 0o644
		}
		flags := os.O_WRONLY | os.O_CREATE | os.O_TRUNC
		if req.Append {
			flags = os.O_WRONLY | os.O_CREATE | os.O_APPEND
		}
		f, err := os.OpenFile(req.Path, flags, mode)
		if err != nil {
			s.discardStdin()
			return res, err
		}
		if req.XattrPrefix != "" {
			if err := replaceXattrs(int(f.Fd()), req.XattrPrefix, req.Xattrs); err != nil {
				f.Close()
				s.discardStdin()
				return res, err
			}
		}
		var werr error
		for {
			c, ok := s.stdin.Get()
			if !ok {
				break
			}
			if werr == nil {
				_, werr = f.Write(c.Data)
			}
			_ = s.e.w.Write(execproto.AckFrame(s.id, execproto.Stdin, uint32(len(c.Data))))
		}
		if err := f.Close(); werr == nil {
			werr = err
		}
		if werr != nil {
			return res, werr
		}
	case execproto.OpList:
		des, err := os.ReadDir(req.Path)
		if err != nil {
			return res, err
		}
		res.Entries = make([]execproto.Entry, 0, len(des))
		for _, de := range des {
			fi, err := de.Info()
			if err != nil {
				continue // removed while listing
			}
			en := s.e.entry(filepath.Join(req.Path, de.Name()), fi)
			if fi.Mode()&os.ModeSymlink != 0 {
				en.Link, _ = os.Readlink(filepath.Join(req.Path, de.Name()))
			}
			res.Entries = append(res.Entries, en)
		}
	case execproto.OpStat:
		fi, err := os.Lstat(req.Path)
		if err != nil {
			return res, err
		}
		res.Entries = []execproto.Entry{s.e.entry(req.Path, fi)}
		if fi.Mode()&os.ModeSymlink != 0 {
			res.Entries[0].Link, _ = os.Readlink(req.Path)
		}
	case execproto.OpMkdir:
		mode := os.FileMode(req.Mode)
		if mode == 0 {
			mode = 0o755
		}
		if req.Recursive {
			return res, os.MkdirAll(req.Path, mode)
		}
		return res, os.Mkdir(req.Path, mode)
	case execproto.OpRemove:
		if req.Recursive {
			return res, os.RemoveAll(req.Path)
		}
		return res, os.Remove(req.Path)
	case execproto.OpRename:
		return res, os.Rename(req.Path, req.NewPath)
	case execproto.OpExport:
		return res, s.export(req.Path)
	case execproto.OpImport:
		return res, s.importTar(req.Path)
	default:
		return res, fmt.Errorf("unknown op %q", req.Op)
	}
	return res, nil
}

func (s *stream) discardStdin() {
	for {
		c, ok := s.stdin.Get()
		if !ok {
			return
		}
		_ = s.e.w.Write(execproto.AckFrame(s.id, execproto.Stdin, uint32(len(c.Data))))
	}
}

// entry describes fi, found at p.
func (e *executor) entry(p string, fi fs.FileInfo) execproto.Entry {
	en := execproto.Entry{Name: filepath.Base(p), Size: fi.Size(), Mode: uint32(fi.Mode()), ModTime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		en.Owner, en.Group = e.idName(e.uidNames, int(st.Uid)), e.idName(e.gidNames, int(st.Gid))
	}
	if fi.Mode()&os.ModeSymlink == 0 {
		en.Xattrs = userXattrs(p)
	}
	return en
}

// userXattrs reads p's user.* extended attributes (names without
// "user."), within execproto's bounds; nil when it has none or they cannot
// be read (a file system without them says nothing).
func userXattrs(p string) map[string]string {
	buf := make([]byte, 8192)
	n, err := unix.Listxattr(p, buf)
	if err != nil || n == 0 {
		return nil
	}
	var out map[string]string
	size := 0
	for _, name := range strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00") {
		key, ok := strings.CutPrefix(name, "user.")
		if !ok || key == "" || len(out) >= execproto.MaxXattrs {
			continue
		}
		val := make([]byte, execproto.MaxXattrBytes)
		m, err := unix.Getxattr(p, name, val)
		if err != nil || size+len(name)+m > execproto.MaxXattrBytes {
			continue
		}
		size += len(name) + m
		if out == nil {
			out = map[string]string{}
		}
		out[key] = string(val[:m])
	}
	return out
}

// replaceXattrs makes the user.<prefix>* extended attributes of the file
// open at fd exactly attrs (names without "user.").
func replaceXattrs(fd int, prefix string, attrs map[string]string) error {
	buf := make([]byte, 8192)
	n, err := unix.Flistxattr(fd, buf)
	if err != nil && !errors.Is(err, unix.ENOTSUP) {
		return fmt.Errorf("list xattrs: %w", err)
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:max(n, 0)]), "\x00"), "\x00") {
		key, ok := strings.CutPrefix(name, "user.")
		if _, keep := attrs[key]; ok && strings.HasPrefix(key, prefix) && !keep {
			if err := unix.Fremovexattr(fd, name); err != nil && !errors.Is(err, unix.ENODATA) {
				return fmt.Errorf("remove xattr %s: %w", name, err)
			}
		}
	}
	for k, v := range attrs {
		if err := unix.Fsetxattr(fd, "user."+k, []byte(v), 0); err != nil {
			return fmt.Errorf("set xattr user.%s: %w", k, err)
		}
	}
	return nil
}

// idName is id's name in names, else id in decimal.
func (e *executor) idName(names map[int]string, id int) string {
	if n, ok := names[id]; ok {
		return n
	}
	return strconv.Itoa(id)
}

// streamWriter writes to the host on the stdout channel.
type streamWriter struct{ s *stream }

func (w *streamWriter) Write(p []byte) (int, error) {
	if err := w.s.e.w.SendData(w.s.id, execproto.Stdout, w.s.out, w.s.chunk, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// export writes a tar stream of the tree at root (or of the file or link
// root, as one entry of its base name). Symlinks are stored as links, never
// followed; sockets, devices and fifos are skipped.
func (s *stream) export(root string) error {
	// Buffered to the stream's frame size: headers and small files share
	// frames, and a large file goes out in frames of that size, not in
	// io.Copy's 32 KiB.
	bw := bufio.NewWriterSize(&streamWriter{s: s}, s.chunk)
	tw := &tarWriter{w: bw}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		if rel == "." {
			if d.IsDir() {
				return nil
			}
			// A file (or link) exported alone is one entry, its name.
			rel = filepath.Base(p)
		}
		h := tarHeader{Name: filepath.ToSlash(rel), Mode: int64(fi.Mode().Perm()), ModTime: fi.ModTime().Unix()}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			h.UID, h.GID = int(st.Uid), int(st.Gid)
			h.Mode = int64(st.Mode & 0o7777)
		}
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			h.Type = tarSymlink
			if h.Linkname, err = os.Readlink(p); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			h.Type, h.Size = tarReg, fi.Size()
		case fi.IsDir():
			h.Type = tarDir
			h.Name += "/"
		default:
			return nil
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			if _, err := io.CopyN(tw, f, h.Size); err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return bw.Flush()
}

var errFsid = errors.New("set file-system identity")

// setfsid sets the thread's file-system identity. Its errors wrap errFsid
// but not setfsgid's or setfsuid's errno (%v, not %w): errResult would
// report that errno as the file operation's own, and EPERM here means the
// identity could not be set, not that the file is off limits.
func setfsid(uid, gid int) error {
	// setfsgid first: once the fsuid is not 0 the thread may lose the
	// capability to change its fsgid.
	if err := unix.Setfsgid(gid); errors.Is(err, unix.ENOSYS) {
		return setEffectiveIDs(uid, gid, true)
	} else if err != nil {
		return fmt.Errorf("%w: %v", errFsid, err) //nolint:errorlint // the errno is not the file operation's (see above)
	}
	if err := unix.Setfsuid(uid); err != nil {
		return fmt.Errorf("%w: %v", errFsid, err) //nolint:errorlint // the errno is not the file operation's (see above)
	}
	return nil
}

// resetfsid gives the thread back root's file-system identity after a
// file operation (setfsid), and under gVisor the capabilities it set aside.
func resetfsid() error {
	if err := unix.Setfsgid(0); errors.Is(err, unix.ENOSYS) {
		return setEffectiveIDs(0, 0, false)
	} else if err != nil {
		return fmt.Errorf("%w: %v", errFsid, err) //nolint:errorlint // the errno is not the file operation's (see setfsid)
	}
	if err := unix.Setfsuid(0); err != nil {
		return fmt.Errorf("%w: %v", errFsid, err) //nolint:errorlint // the errno is not the file operation's (see setfsid)
	}
	return nil
}

// setEffectiveIDs is setfsid where the kernel has no setfsuid (gVisor's):
// it sets the thread's effective ids and keeps the real and saved ones
// (executorUID, outOfKillReach); CAP_SETUID, kept in the permitted set,
// lets it change back. The raw system calls change this thread only,
// as setfsuid does (syscall.Setresuid would change every thread). Going
// back to root, the uid changes first: only root may change the gid.
//
// For a file operation (op), the thread's effective capabilities are set
// aside too, also when it acts as root: the operation may do what a
// command of its user may, and commands run without capabilities. With an
// effective uid 0, the kernel would keep them (setfsuid(0) keeps them as
// well, but natively what they could reach beyond a command's rights, the
// generated /etc, is a read-only mount; gVisor cannot make it one).
// Without op they are taken back.
func setEffectiveIDs(uid, gid int, op bool) error {
	keep := ^uintptr(0) // -1: unchanged
	setgid := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, keep, uintptr(gid), keep); e != 0 {
			return fmt.Errorf("%w: setresgid: %v", errFsid, e) //nolint:errorlint // the errno is not the file operation's (see setfsid)
		}
		return nil
	}
	setuid := func() error {
		if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, keep, uintptr(uid), keep); e != 0 {
			return fmt.Errorf("%w: setresuid: %v", errFsid, e) //nolint:errorlint // the errno is not the file operation's (see setfsid)
		}
		return nil
	}
	if uid == 0 {
		// Under gVisor the saved uid is not 0 (outOfKillReach): going
		// back needs CAP_SETUID, from the permitted set.
		if err := setEffectiveCaps(true); err != nil {
			return err
		}
		if err := setuid(); err != nil {
			return err
		}
		if err := setgid(); err != nil {
			return err
		}
	} else {
		if err := setgid(); err != nil {
			return err
		}
		if err := setuid(); err != nil {
			return err
		}
	}
	return setEffectiveCaps(!op)
}

// setEffectiveCaps sets the calling thread's effective capabilities to its
// permitted ones (on) or to none: capset with pid 0 changes this thread only.
func setEffectiveCaps(on bool) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("%w: capget: %v", errFsid, err) //nolint:errorlint // the errno is not the file operation's (see setfsid)
	}
	for i := range data {
		data[i].Effective = 0
		if on {
			data[i].Effective = data[i].Permitted
		}
	}
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("%w: capset: %v", errFsid, err) //nolint:errorlint // the errno is not the file operation's (see setfsid)
	}
	return nil
}
