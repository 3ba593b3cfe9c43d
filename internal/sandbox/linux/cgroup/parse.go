package cgroup

import (
	"bytes"
	"path"
	"slices"
	"strconv"
	"strings"
)

// ctrlSet is a set of the controllers this package uses.
type ctrlSet uint8

const (
	ctrlMemory ctrlSet = 1 << iota
	ctrlPids
	ctrlCPU
	ctrlCPUAcct
	ctrlFreezer

	// limitCtrls are the controllers that carry limits.
	limitCtrls = ctrlMemory | ctrlPids | ctrlCPU
)

// ctrlByName maps a kernel controller name to its bit, or 0.
func ctrlByName(name string) ctrlSet {
	switch name {
	case "memory":
		return ctrlMemory
	case "pids":
		return ctrlPids
	case "cpu":
		return ctrlCPU
	case "cpuacct":
		return ctrlCPUAcct
	case "freezer":
		return ctrlFreezer
	}
	return 0
}

// String returns the kernel name of a single controller, or the names of a
// set joined by commas.
func (c ctrlSet) String() string {
	return strings.Join(c.names(), ",")
}

// names lists the controllers in c in a fixed order.
func (c ctrlSet) names() []string {
	var out []string
	for _, n := range []string{"memory", "pids", "cpu", "cpuacct", "freezer"} {
		if c&ctrlByName(n) != 0 {
			out = append(out, n)
		}
	}
	return out
}

// isV1Controller reports whether opt, a super option of a v1 cgroup mount,
// names a controller (as opposed to a flag such as rw or name=systemd).
func isV1Controller(opt string) bool {
	switch opt {
	case "cpuset", "cpu", "cpuacct", "blkio", "memory", "devices", "freezer",
		"net_cls", "perf_event", "net_prio", "hugetlb", "pids", "rdma", "misc":
		return true
	}
	return false
}

// cgroupMount is one cgroup or cgroup2 mount from /proc/self/mountinfo.
type cgroupMount struct {
	root       string  // root of the mount inside the hierarchy
	mountpoint string  // where it is mounted
	v2         bool    // cgroup2
	anyCtrl    bool    // v1: the hierarchy has at least one controller
	ctrls      ctrlSet // v1: the controllers among ours bound to it
	// favor: mounted with favordynmods (cgroup_threadgroup_rwsem kept
	// in its slow mode: a migration waits for no RCU grace period).
	favor bool
}

// parseMountinfo returns the cgroup mounts listed in /proc/self/mountinfo
// data, in order. Malformed lines are skipped.
func parseMountinfo(data []byte) []cgroupMount {
	var out []cgroupMount
	for line := range bytes.Lines(data) {
		// 40 30 0:37 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
		pre, post, ok := strings.Cut(strings.TrimRight(string(line), "\n"), " - ")
		if !ok {
			continue
		}
		pf := strings.Fields(pre)
		qf := strings.Fields(post)
		if len(pf) < 5 || len(qf) < 1 {
			continue
		}
		m := cgroupMount{root: unescapeMountinfo(pf[3]), mountpoint: unescapeMountinfo(pf[4])}
		if len(qf) >= 3 {
			m.favor = slices.Contains(strings.Split(qf[2], ","), "favordynmods")
		}
		switch qf[0] {
		case "cgroup2":
			m.v2 = true
		case "cgroup":
			if len(qf) < 3 {
				continue
			}
			for opt := range strings.SplitSeq(qf[2], ",") {
				if isV1Controller(opt) {
					m.anyCtrl = true
					m.ctrls |= ctrlByName(opt)
				}
			}
		default:
			continue
		}
		out = append(out, m)
	}
	return out
}

// unescapeMountinfo undoes the octal escapes (\040 for space, \011, \012,
// \134) the kernel uses for paths in mountinfo.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// procCgroup is the parsed content of /proc/self/cgroup.
type procCgroup struct {
	v1    map[string]string // v1 controller name -> cgroup path
	v2    string            // cgroup2 path
	hasV2 bool              // a "0::" line was present
}

// parseProcCgroup parses /proc/self/cgroup data. Malformed lines are skipped.
func parseProcCgroup(data []byte) procCgroup {
	pc := procCgroup{v1: map[string]string{}}
	for line := range bytes.Lines(data) {
		// 4:memory:/user.slice   or   0::/user.slice/foo.scope
		parts := strings.SplitN(strings.TrimRight(string(line), "\n"), ":", 3)
		if len(parts) != 3 || !strings.HasPrefix(parts[2], "/") {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			pc.v2, pc.hasV2 = parts[2], true
			continue
		}
		for c := range strings.SplitSeq(parts[1], ",") {
			if c != "" && !strings.HasPrefix(c, "name=") {
				pc.v1[c] = parts[2]
			}
		}
	}
	return pc
}

// mountDir returns the directory of cgroup path p under mount m, and false
// if p is not below the mount's root (a bind mount of a subtree that does not
// contain the caller, or a path outside the caller's cgroup namespace).
func mountDir(m cgroupMount, p string) (string, bool) {
	// Outside the caller's cgroup namespace the kernel prints paths such as
	// "/../../system.slice"; path.Clean would hide that.
	if !strings.HasPrefix(p, "/") || p == "/.." || strings.HasPrefix(p, "/../") {
		return "", false
	}
	p = path.Clean(p)
	root := path.Clean(m.root)
	var rel string
	switch {
	case root == "/":
		rel = p
	case p == root:
		rel = "/"
	case strings.HasPrefix(p, root+"/"):
		rel = p[len(root):]
	default:
		return "", false
	}
	if rel == "/" {
		return m.mountpoint, true
	}
	return strings.TrimSuffix(m.mountpoint, "/") + rel, true
}

// v1Loc is where the caller's cgroup is in one v1 hierarchy.
type v1Loc struct {
	ctrls ctrlSet // our controllers bound to this hierarchy
	dir   string  // the caller's cgroup directory
}

// location is where the caller's cgroups are, derived from mountinfo and
// /proc/self/cgroup alone.
type location struct {
	version string  // "v2", "v1", "hybrid" or "" when there is no cgroup fs
	v1      []v1Loc // hierarchies holding our controllers
	v2Mount string  // cgroup2 mount point, "" if none
	v2Path  string  // the caller's cgroup2 path
	v2Dir   string  // the caller's cgroup2 directory, "" if unreachable
	reasons []string
	// favor: some cgroup hierarchy is mounted with favordynmods, which
	// is global (one rwsem for every hierarchy's migrations).
	favor bool
}

// locate finds the caller's cgroup directories in every hierarchy.
func locate(mounts []cgroupMount, pc procCgroup) location {
	var loc location
	var have ctrlSet
	anyV1 := false
	for _, m := range mounts {
		loc.favor = loc.favor || m.favor
		if m.v2 {
			if loc.v2Dir != "" || !pc.hasV2 {
				continue
			}
			if loc.v2Mount == "" {
				loc.v2Mount = m.mountpoint
			}
			if d, ok := mountDir(m, pc.v2); ok {
				loc.v2Mount, loc.v2Path, loc.v2Dir = m.mountpoint, pc.v2, d
			}
			continue
		}
		if !m.anyCtrl {
			continue
		}
		anyV1 = true
		ours := m.ctrls &^ have
		if ours == 0 {
			continue // a second mount of a hierarchy we already have
		}
		first := ours.names()[0]
		p, ok := pc.v1[first]
		if !ok {
			continue
		}
		d, ok := mountDir(m, p)
		if !ok {
			continue // maybe another mount of this hierarchy shows the caller
		}
		have |= ours
		loc.v1 = append(loc.v1, v1Loc{ctrls: ours, dir: d})
	}
	for _, c := range []ctrlSet{ctrlMemory, ctrlPids, ctrlCPU} {
		for _, m := range mounts {
			if !m.v2 && m.ctrls&c != 0 && have&c == 0 {
				loc.reasons = append(loc.reasons, c.String()+" controller: the caller's cgroup is not visible under "+m.mountpoint)
				break
			}
		}
	}
	if loc.v2Mount != "" && loc.v2Dir == "" {
		loc.reasons = append(loc.reasons, "the caller's cgroup2 path "+strconv.Quote(pc.v2)+" is not visible under "+loc.v2Mount)
	}
	switch {
	case anyV1 && loc.v2Mount != "":
		loc.version = "hybrid"
	case anyV1:
		loc.version = "v1"
	case loc.v2Mount != "":
		loc.version = "v2"
	}
	return loc
}

// keyedValue returns the value of key in a flat keyed file such as
// memory.events or cpu.stat ("key value" per line).
func keyedValue(data []byte, key string) (int64, bool) {
	for line := range bytes.Lines(data) {
		k, v, ok := bytes.Cut(bytes.TrimSpace(line), []byte{' '})
		if !ok || string(k) != key {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		return n, err == nil
	}
	return 0, false
}

// parseInt parses a single-value control file such as memory.current.
func parseInt(data []byte) (int64, error) {
	return strconv.ParseInt(string(bytes.TrimSpace(data)), 10, 64)
}

// parsePids parses cgroup.procs.
func parsePids(data []byte) []int {
	var out []int
	for f := range bytes.FieldsSeq(data) {
		if n, err := strconv.Atoi(string(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}
