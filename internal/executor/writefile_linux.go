package executor

import (
	"errors"
	"io/fs"
	"os"

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

// subdirs returns parent/NAME/sub for each entry NAME of parent, in name
// order, that is a directory (following symbolic links): what
// filepath.Glob(parent+"/*/"+sub) returns and a Stat of each confirms, in
// one directory read and one stat per entry, where Glob opens and reads
// every entry's whole directory to find sub in it.
func subdirs(parent, sub string) []string {
	ents, err := os.ReadDir(parent) // sorted by name
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		d := parent + "/" + e.Name() + "/" + sub
		var st unix.Stat_t
		if unix.Stat(d, &st) == nil && st.Mode&unix.S_IFMT == unix.S_IFDIR {
			out = append(out, d)
		}
	}
	return out
}
