// Package cgroup gives each sandbox one cgroup "group": resource limits
// (memory, pids, cpu), usage and limit-hit counters, and reliable teardown of
// every process the sandbox started, however it forked or detached.
//
// A group spans every cgroup hierarchy the machine has:
//
//   - cgroup v2 (most hosts): one directory in the cgroup2 tree carries the
//     limits (memory.max, memory.swap.max, pids.max, cpu.max) and is used for
//     tracking and killing (cgroup.kill, cgroup.events).
//   - hybrid (systemd's legacy layout, e.g. Debian 12 with
//     systemd.unified_cgroup_hierarchy=0): limits live in the v1 memory, pids
//     and cpu hierarchies, and a directory in the controller-less cgroup2 tree
//     ("unified") is still created for CLONE_INTO_CGROUP, cgroup.kill and
//     cgroup.events, which work without any v2 controller.
//   - v1 only: v1 directories for the limits, plus the freezer hierarchy so
//     that Kill can stop every process before signalling it.
//
// Directories that would not be used are not created, to keep New cheap: the
// v1 cpuacct directory only when the cgroup2 tree cannot report CPU time
// (cpu.stat), the v1 freezer directory only when it cannot kill (cgroup.kill).
//
// Layout. Groups are created at <hierarchy>/<caller's own cgroup>/<parent>/<name>,
// where the caller's cgroup is read from /proc/self/cgroup. Groups are never
// placed at a hierarchy root: nesting under the caller keeps every limit the
// machine puts on the caller (systemd slice, container) in force for its
// sandboxes. The parent directory never holds processes. It is removed
// once it holds no group (Manager.RemoveParentIfEmpty) and made again by
// the next New; Sweep removes what hosts that are gone left in the parents
// of others (empty groups, then empty parents).
//
// cgroup v2 delegation. v2 controllers must be enabled in cgroup.subtree_control
// of every ancestor, and a cgroup with processes cannot enable them ("no
// internal processes"). When enabling them on the caller's own cgroup fails
// with EBUSY and the caller is the only process in it, the caller moves itself
// (all threads) into the leaf <own>/<parent>-host and retries, as container
// runtimes do in a delegated cgroup. It never moves other processes: if others
// share the cgroup, v2 limits are reported as unavailable in Mode.Reason. A
// process started by such a host (for example a supervisor) finds the same
// groups, because a caller cgroup named <parent>-host is read as its parent.
// Under systemd, run airlock with Delegate=yes so that systemd leaves the
// subtree to it.
//
// Rootless. Without write access to its own cgroup (v1 as non-root, or v2
// without a delegated subtree) Mode reports no controllers and New either fails
// (requireLimits) or returns a group that enforces and tracks nothing.
//
// Importers: the native Linux sandbox backend (internal/sandbox/linux, which
// also reports it to `airlock doctor`). It uses only the standard library
// and x/sys/unix.
package cgroup
