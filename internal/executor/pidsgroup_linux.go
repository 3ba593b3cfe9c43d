package executor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// pidsGroup is, under gVisor, the pids cgroup of gVisor's kernel that
// every command starts in (execproto.Setup.Pids). The host's cgroup holds
// runsc, its gofer and the sentry as well, whose tasks grow with the
// commands' on the ptrace platform: a fork bomb stopped only there starved
// the sentry and ended the sandbox. gVisor's own pids controller stops the
// commands' forks (EAGAIN) below that.
//
// The group is joined by the thread that forks every command (procThread):
// a v1 hierarchy moves threads one by one, so the executor's other threads,
// those that answer the host, stay in the root group and can always run.
// The hierarchy's mount is detached once the thread has joined: no command
// can reach a cgroup file to leave the group (they cannot mount either).
type pidsGroup struct {
	mu      sync.Mutex
	current *os.File // the group's pids.current: read from the start under mu
	max     int64    // its pids.max: the commands' limit and the thread
}

// pidsGroupMount is where the pids hierarchy is mounted while the group is
// made (under the executor's tmpfs); nothing is left there after.
const pidsGroupMount = "/run/airlock/.pids"

// pidsPoll is how often a running command's group is read for the limit.
const pidsPoll = 50 * time.Millisecond

// newPidsGroup makes a group of gVisor's pids controller that holds limit
// tasks besides the joining thread, and has the thread pt forks from join
// it. dir is a directory to mount the hierarchy on, made and removed here.
func newPidsGroup(pt *procThread, dir string, limit int64) (*pidsGroup, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	defer os.Remove(dir)
	if err := unix.Mount("airlock-pids", dir, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "pids"); err != nil {
		return nil, fmt.Errorf("mount gVisor's pids controller: %w", err)
	}
	defer func() { _ = unix.Unmount(dir, unix.MNT_DETACH) }()
	group := filepath.Join(dir, "commands")
	if err := os.Mkdir(group, 0o755); err != nil {
		return nil, err
	}
	// The thread counts as one task of the group.
	most := limit + 1
	if err := os.WriteFile(filepath.Join(group, "pids.max"), []byte(strconv.FormatInt(most, 10)), 0); err != nil {
		return nil, err
	}
	current, err := os.Open(filepath.Join(group, "pids.current"))
	if err != nil {
		return nil, err
	}
	tasks, err := os.OpenFile(filepath.Join(group, "tasks"), os.O_WRONLY, 0)
	if err != nil {
		current.Close()
		return nil, err
	}
	defer tasks.Close()
	pt.do(func() {
		_, err = tasks.WriteString(strconv.Itoa(unix.Gettid()))
	})
	if err != nil {
		current.Close()
		return nil, fmt.Errorf("join: %w", err)
	}
	g := &pidsGroup{current: current, max: most}
	if n, err := g.count(); err != nil || n != 1 {
		current.Close()
		if err != nil {
			return nil, fmt.Errorf("count the group's tasks after the thread joined: %w", err)
		}
		return nil, fmt.Errorf("the group holds %d tasks after the thread joined, want 1", n)
	}
	return g, nil
}

// count returns how many tasks the group holds.
func (g *pidsGroup) count() (int64, error) {
	// From the start each time; gVisor's cgroup files take no pread.
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, err := g.current.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	var buf [32]byte
	n, err := g.current.Read(buf[:])
	if n == 0 && err != nil {
		return 0, err
	}
	v, err := strconv.ParseInt(string(bytes.TrimSpace(buf[:n])), 10, 64)
	if err != nil {
		return 0, errors.New("pids.current: not a number")
	}
	return v, nil
}

// full reports whether the commands hold every task the group allows.
func (g *pidsGroup) full() bool { return g.fullBut(0) }

// fullBut reports whether the commands hold every task the group allows
// but n.
func (g *pidsGroup) fullBut(n int64) bool {
	c, err := g.count()
	return err == nil && c >= g.max-n
}

// drain waits, briefly, until the tasks of a tree killed at the limit
// are gone, so that the next command starts below it.
func (g *pidsGroup) drain() {
	deadline := time.Now().Add(5 * time.Second)
	for g.full() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
}
