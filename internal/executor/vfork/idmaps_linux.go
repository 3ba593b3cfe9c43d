package vfork

import (
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// WriteIDMaps writes the id maps of the user namespace of the process of
// pid and pidfd, a child of this one started by Exec: uidMap, then
// setgroups ("allow" or "deny"), then gidMap (the order the kernel needs
// for an unprivileged writer), each in one write. The maps are lines of
// "inside outside count". An empty map is not written.
//
// The files are opened under the process's /proc directory, which is
// checked to be the pidfd's process once open: a child that died and was
// collected (by another waiter) may have left its pid to another process,
// whose maps must never be written.
func WriteIDMaps(pid, pidfd int, uidMap, gidMap string, setgroups bool) error {
	dirPath := "/proc/" + strconv.Itoa(pid)
	dir, err := unix.Open(dirPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dirPath, Err: err}
	}
	defer unix.Close(dir)
	// Alive (or a zombie not yet collected) after the open: the directory
	// is this process's.
	if err := unix.PidfdSendSignal(pidfd, 0, nil, 0); err != nil {
		return &os.PathError{Op: "pidfd_send_signal", Path: dirPath, Err: err}
	}
	sg := "deny"
	if setgroups {
		sg = "allow"
	}
	for _, w := range []struct{ file, data string }{
		{"uid_map", uidMap},
		{"setgroups", sg},
		{"gid_map", gidMap},
	} {
		if w.data == "" {
			continue
		}
		if err := writeAt(dir, dirPath, w.file, w.data); err != nil {
			return err
		}
	}
	return nil
}

// writeAt writes data to file under dir in one write (open, write, close:
// no poller for a file it would refuse).
func writeAt(dir int, dirPath, file, data string) error {
	path := dirPath + "/" + file
	fd, err := unix.Openat(dir, file, unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
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
