package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Mode describes what this machine offers to the calling process.
type Mode struct {
	// Version is "v2", "v1" or "hybrid" (v1 controllers plus a cgroup2 tree).
	Version string
	// Controllers lists the controllers limits can be set with, a subset of
	// memory, pids and cpu, in that order.
	Controllers []string
	// Unified is the mount point of the cgroup2 tree used for tracking and
	// killing, or "" if there is none the caller can use.
	Unified string
	// Reason says why a controller or the cgroup2 tree is missing; "" when
	// nothing is.
	Reason string
	// V1Controllers lists those of Controllers that live in v1
	// hierarchies (hybrid and v1 modes). A process is moved into them by
	// a write to cgroup.procs, whose writer waits for an RCU grace period
	// (cgroup_threadgroup_rwsem) unless FavorDynmods; an executor started
	// with vfork.Exec moves itself through `tasks`, which does not wait.
	V1Controllers []string
	// FavorDynmods: a cgroup hierarchy is mounted with favordynmods (one
	// is enough: the rwsem is every hierarchy's).
	FavorDynmods bool
}

// v1Hier is a v1 hierarchy the caller may create cgroups in.
type v1Hier struct {
	ctrls ctrlSet // our controllers bound to it
	own   string  // the caller's cgroup directory
}

// v2Tree is the caller's place in the cgroup2 tree.
type v2Tree struct {
	mount string  // mount point; "" when there is no usable tree
	own   string  // the caller's cgroup directory
	ctrls ctrlSet // limit controllers offered by own/cgroup.controllers
}

// layout is what Detect found: the caller's cgroup in every hierarchy it may
// write to, and the controllers available there.
type layout struct {
	version string
	v1      []v1Hier
	v2      v2Tree
	reasons []string // why something is missing
	favor   bool     // location.favor
}

// located caches where the caller's cgroups are: /proc/self/cgroup changes
// only when the process is moved, and Manager accounts for the one move this
// package makes.
var located = sync.OnceValues(func() (location, error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return location{}, fmt.Errorf("detect cgroups: %w", err)
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return location{}, fmt.Errorf("detect cgroups: %w", err)
	}
	loc := locate(parseMountinfo(mi), parseProcCgroup(cg))
	if loc.version == "" {
		return location{}, errors.New("detect cgroups: no cgroup filesystem is mounted")
	}
	return loc, nil
})

// detected caches Detect's answer.
var detected = sync.OnceValues(func() (Mode, error) {
	loc, err := located()
	if err != nil {
		return Mode{}, err
	}
	l := probe(loc)
	return l.mode(), nil
})

// Detect inspects /proc/self/cgroup, /proc/self/mountinfo and the caller's
// own cgroup directories. The result is computed once per process.
//
// Detect reports what the machine offers; Manager.Mode also reports what
// preparing the parent group found (for example v2 controllers that cannot be
// enabled because other processes share the caller's cgroup).
func Detect() (Mode, error) {
	m, err := detected()
	m.Controllers = slices.Clone(m.Controllers)
	m.V1Controllers = slices.Clone(m.V1Controllers)
	return m, err
}

// probe turns a location into a layout by checking which directories the
// caller can write to and which v2 controllers it is offered.
func probe(loc location) layout {
	l := layout{version: loc.version, reasons: slices.Clone(loc.reasons), favor: loc.favor}
	for _, h := range loc.v1 {
		if err := unix.Access(h.dir, unix.W_OK); err != nil {
			l.reasons = append(l.reasons, fmt.Sprintf("%s: cannot create cgroups in %s: %v", h.ctrls, h.dir, err))
			continue
		}
		l.v1 = append(l.v1, v1Hier{ctrls: h.ctrls, own: h.dir})
	}
	if loc.v2Dir != "" {
		l.v2, l.reasons = probeV2(loc.v2Mount, loc.v2Dir, l.v1Ctrls(), loc.version == "v2", l.reasons)
	}
	l.reasons = noteMissing(l.reasons, (l.v1Ctrls()|l.v2.ctrls)&limitCtrls, l.version == "v2")
	return l
}

// noteMissing adds a reason for each limit controller not in have that no
// reason explains yet.
func noteMissing(reasons []string, have ctrlSet, pureV2 bool) []string {
	for _, c := range []ctrlSet{ctrlMemory, ctrlPids, ctrlCPU} {
		if have&c == 0 && len(reasonsFor(reasons, c, pureV2)) == 0 {
			reasons = append(reasons, c.String()+" controller is not available")
		}
	}
	return reasons
}

// reasonsFor returns the reasons that explain why controller c is missing:
// those that start with its name (alone or in a list such as
// "memory,pids:"), and on pure v2 those about the cgroup2 tree, which all
// limits depend on there.
func reasonsFor(reasons []string, c ctrlSet, pureV2 bool) []string {
	var out []string
	for _, r := range reasons {
		head, _, _ := strings.Cut(r, " ")
		head = strings.TrimSuffix(head, ":")
		if slices.Contains(strings.Split(head, ","), c.String()) || pureV2 && head == "cgroup2" {
			out = append(out, r)
		}
	}
	return out
}

// probeV2 checks the caller's cgroup2 directory own: whether it is writable
// and which limit controllers (not already bound to v1) it is offered.
func probeV2(mount, own string, v1 ctrlSet, pure bool, reasons []string) (v2Tree, []string) {
	if err := unix.Access(own, unix.W_OK); err != nil {
		return v2Tree{}, append(reasons, fmt.Sprintf("cgroup2: cannot create cgroups in %s: %v", own, err))
	}
	t := v2Tree{mount: mount, own: own}
	data, err := os.ReadFile(own + "/cgroup.controllers")
	if err != nil {
		return t, append(reasons, fmt.Sprintf("cgroup2: %v", err))
	}
	var offered ctrlSet
	for _, f := range strings.Fields(string(data)) {
		offered |= ctrlByName(f)
	}
	offered &= limitCtrls &^ v1
	if offered != 0 {
		if err := unix.Access(own+"/cgroup.subtree_control", unix.W_OK); err != nil {
			return t, append(reasons, fmt.Sprintf("%s: cannot enable controllers in %s: %v", offered, own, err))
		}
	}
	t.ctrls = offered
	if pure {
		for _, c := range []ctrlSet{ctrlMemory, ctrlPids, ctrlCPU} {
			if offered&c == 0 {
				reasons = append(reasons, fmt.Sprintf("%s controller is not delegated to %s", c, own))
			}
		}
	}
	return t, reasons
}

// v1Ctrls returns the controllers of all writable v1 hierarchies.
func (l *layout) v1Ctrls() ctrlSet {
	var c ctrlSet
	for _, h := range l.v1 {
		c |= h.ctrls
	}
	return c
}

// mode summarises the layout.
func (l *layout) mode() Mode {
	m := Mode{
		Version:       l.version,
		Controllers:   ((l.v1Ctrls() | l.v2.ctrls) & limitCtrls).names(),
		Unified:       l.v2.mount,
		V1Controllers: (l.v1Ctrls() & limitCtrls).names(),
		FavorDynmods:  l.favor,
	}
	m.Reason = strings.Join(l.reasons, "; ")
	return m
}

// hostLeafParent returns the parent of own if own is the leaf a host moved
// itself into (see the package doc), else own.
func hostLeafParent(own, parentName string) string {
	if path.Base(own) == parentName+"-host" {
		return path.Dir(own)
	}
	return own
}
