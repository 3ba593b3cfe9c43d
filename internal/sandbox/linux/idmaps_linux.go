package linux

import (
	"strconv"
	"syscall"

	"github.com/airlockrun/airlock/internal/executor/vfork"
)

// idMaps are the id maps the parent writes for its child's user
// namespace once the child has exec'd.
type idMaps struct {
	uid, gid  []syscall.SysProcIDMap
	setgroups bool
}

// write writes m for the user namespace of the child of pid and pidfd
// (vfork.WriteIDMaps).
func (m idMaps) write(pid, pidfd int) error {
	return vfork.WriteIDMaps(pid, pidfd, formatIDMap(m.uid), formatIDMap(m.gid), m.setgroups)
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
