package executor

import (
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// killTree kills the process root and every descendant. It first stops the
// tree (a stopped process cannot fork), rescanning until no new member
// appears, then kills all of them. Members are found by parentage and by
// process group, so children of processes that already died are still found
// while their group lives. A process that left both (setsid and re-parented
// to PID 1) survives until the sandbox is destroyed, which kills everything.
func killTree(root int) {
	members := map[int]bool{root: true}
	for range 8 {
		grew := false
		for pid, st := range procTable() {
			if members[pid] {
				continue
			}
			if members[st.ppid] || st.pgid == root || st.sid == root {
				members[pid] = true
				grew = true
			}
		}
		for pid := range members {
			_ = unix.Kill(pid, unix.SIGSTOP)
		}
		if !grew {
			break
		}
	}
	_ = unix.Kill(-root, unix.SIGKILL)
	for pid := range members {
		_ = unix.Kill(pid, unix.SIGKILL)
	}
}

type procStat struct{ ppid, pgid, sid int }

// procTable reads ppid, process group and session of every process.
func procTable() map[int]procStat {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	out := make(map[int]procStat, len(names))
	for _, n := range names {
		pid, err := strconv.Atoi(n)
		if err != nil || pid == 1 {
			continue
		}
		b, err := os.ReadFile("/proc/" + n + "/stat")
		if err != nil {
			continue
		}
		// The command name may contain spaces and parentheses: fields
		// start after the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 4 {
			continue
		}
		ppid, _ := strconv.Atoi(f[1])
		pgid, _ := strconv.Atoi(f[2])
		sid, _ := strconv.Atoi(f[3])
		out[pid] = procStat{ppid, pgid, sid}
	}
	return out
}
