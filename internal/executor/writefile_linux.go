package executor

import (
	"errors"
	"io/fs"
	"slices"

	"golang.org/x/sys/unix"
)

// writeFile is os.WriteFile in three system calls (open, write, close):
// os.OpenFile offers every file it opens to the runtime's poller (four
// fcntl calls and an epoll_ctl, which a regular file refuses; a procfs
// file is added and removed again). The executor writes about twenty
// files while it builds a sandbox (/etc's, the mount targets, /proc's
// limits), each in a fresh process where a system call is dear.
func writeFile(name string, data []byte, perm fs.FileMode) error {
	fd, err := unix.Open(name, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			unix.Close(fd)
			return &fs.PathError{Op: "write", Path: name, Err: err}
		}
		if n == 0 {
			unix.Close(fd)
			return &fs.PathError{Op: "write", Path: name, Err: unix.EIO}
		}
		data = data[n:]
	}
	if err := unix.Close(fd); err != nil {
		return &fs.PathError{Op: "close", Path: name, Err: err}
	}
	return nil
}

// createFile makes name if it does not exist, as a mount target, without
// truncating one that does: os.OpenFile(name, O_CREATE|O_RDONLY, perm)
// and Close, in two system calls.
func createFile(name string, perm fs.FileMode) error {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CREAT|unix.O_CLOEXEC, uint32(perm.Perm()))
	if err != nil {
		return &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return unix.Close(fd)
}

// readSmallFile is os.ReadFile without an os.File: open, read to the end,
// close. An os.File of a regular file or a /proc file registers it with
// the runtime's poller first (four fcntl calls and an epoll_ctl that
// fails), which costs more than the read of the few lines the executor
// reads this way once per sandbox (its id maps, /etc/passwd). O_NONBLOCK
// keeps a FIFO planted at the path from blocking the read.
func readSmallFile(name string) ([]byte, error) {
	fd, err := unix.Open(name, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	defer unix.Close(fd)
	buf := make([]byte, 0, 512)
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, cap(buf))
		}
		n, err := unix.Read(fd, buf[len(buf):cap(buf)])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "read", Path: name, Err: err}
		}
		if n == 0 {
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

// readDirNames is the names in directory dir, but . and .., in the order the
// file system gives them.
func readDirNames(dir string) ([]string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer unix.Close(fd)
	var names []string
	buf := make([]byte, 8192)
	for {
		n, err := unix.Getdents(fd, buf)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "getdents", Path: dir, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// subdirs returns parent/NAME/sub for each entry NAME of parent, in name
// order, that is a directory (following symbolic links): what
// filepath.Glob(parent+"/*/"+sub) returns and a Stat of each confirms, in
// one directory read and one stat per entry, where Glob opens and reads
// every entry's whole directory to find sub in it.
//
// It reads parent with getdents itself: os.ReadDir's File registers the
// directory with the runtime's poller (four fcntl calls and an epoll_ctl
// that fails) and allocates an entry per name, once per sandbox.
func subdirs(parent, sub string) []string {
	names, err := readDirNames(parent)
	if err != nil {
		return nil
	}
	slices.Sort(names)
	var out []string
	for _, name := range names {
		d := parent + "/" + name + "/" + sub
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, d)
		}
	}
	return out
}
