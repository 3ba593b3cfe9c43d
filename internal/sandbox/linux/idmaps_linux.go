package linux

import (
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// idMaps are the id maps the parent writes for its child's user
// namespace once the child has exec'd.
type idMaps struct {
	uid, gid  []syscall.SysProcIDMap
	setgroups bool
}

// write writes m for the user namespace of pid: the uid map, setgroups,
// the gid map (the order the kernel needs for an unprivileged writer).
func (m idMaps) write(pid int) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	sg := "deny"
	if m.setgroups {
		sg = "allow"
	}
	for _, w := range []struct{ file, data string }{
		{"uid_map", formatIDMap(m.uid)},
		{"setgroups", sg},
		{"gid_map", formatIDMap(m.gid)},
	} {
		if err := writeProcFile(dir+w.file, w.data); err != nil {
			return err
		}
	}
	return nil
}

func formatIDMap(ms []syscall.SysProcIDMap) string {
	var b []byte
	for _, m := range ms {
		b = strconv.AppendInt(b, int64(m.ContainerID), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(m.HostID), 10)
		b = append(b, ' ')
		b = strconv.AppendInt(b, int64(m.Size), 10)
		b = append(b, '\n')
	}
	return string(b)
}

// writeProcFile writes data to a procfs file in one write (open, write,
// close: no poller for a file it would refuse).
func writeProcFile(path, data string) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: path, Err: err}
	}
	_, err = unix.Write(fd, []byte(data))
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		return &os.PathError{Op: "write", Path: path, Err: err}
	}
	return nil
}
