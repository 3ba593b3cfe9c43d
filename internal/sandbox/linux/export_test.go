package linux

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/executor/vfork"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// IdmapsMade reports how many id-map namespaces b has made.
func IdmapsMade(b *Backend) int64 { return b.idmaps.made.Load() }

// IdmapsDirect reports how many of the id-map namespaces b has made came
// from a helper started sharing b's process's memory (vfork.Exec).
func IdmapsDirect(b *Backend) int64 { return b.idmaps.direct.Load() }

// Detachable reports whether sb's DestroyDetached leaves its killed
// processes to die after it returns.
func Detachable(sb *Sandbox) bool {
	sb.mu.Lock()
	defer sb.mu.Unlock()
	return sb.detachable()
}

// ExecutorPID returns the host pid of sb's executor.
func ExecutorPID(sb *Sandbox) int { return sb.proc.pid }

// CPUWeight reads sb's cgroup's CPU weight back (0 without a cgroup).
func CPUWeight(sb *Sandbox) (int, error) {
	if sb.cg == nil {
		return 0, nil
	}
	return sb.cg.CPUWeight()
}

// GVisorBundle writes the OCI bundle of a gvisor sandbox of spec into dir
// and returns the runsc flags it needs.
func GVisorBundle(b *Backend, dir string, spec sandbox.Spec) ([]string, error) {
	r, err := b.Runsc()
	if err != nil {
		return nil, err
	}
	return b.gvisorBundle(dir, &spec, r)
}

// GVisorExecutor is where the executor is bound inside a gvisor sandbox.
const GVisorExecutor = gvisorExecutor

// ChoosePlatform is choosePlatform, for its table.
var ChoosePlatform = choosePlatform

// HardwareVirt is hardwareVirt, for its table.
var HardwareVirt = hardwareVirt

// RunscVersion is runscVersion, for its table.
var RunscVersion = runscVersion

// SetForkOnly makes b start every executor with syscall.ForkExec, its id
// maps written before the exec (the path without vfork.Exec), directly and through the spawner.
func SetForkOnly(b *Backend) { b.forkOnly = true }

// SetCPUAtBoot makes b give a gvisor sandbox's cgroup its CPU limit from
// the start, gVisor's boot included (as before cgroup.Limits.CPULater).
func SetCPUAtBoot(b *Backend) { b.cpuAtBoot = true }

// CPULimit reads sb's cgroup's CPU limit back from its file (in CPUs, 0
// for none), with the directory that holds it and whether that is
// cgroup2's; "" without a cgroup or a cpu controller.
func CPULimit(sb *Sandbox) (cpus float64, dir string, v2 bool, err error) {
	if sb.cg == nil {
		return 0, "", false, nil
	}
	if dir, v2 = sb.cg.CPUDir(); dir == "" {
		return 0, "", false, nil
	}
	cpus, err = sb.cg.CPUs()
	return cpus, dir, v2, err
}

// SetFailLate makes b's Create fail, with fail's error, where it takes
// the uid range and writes the cgroup's limits after the executor of pid
// started (Backend.lateReserve).
func SetFailLate(b *Backend, fail func(pid int) error) { b.failLate = fail }

// LateReserve reports whether b starts the executor of a sandbox of spec
// before it takes its uid range and writes its cgroup's limits.
func LateReserve(b *Backend, spec sandbox.Spec) bool { return b.lateReserve(&spec) }

// VforkSupported is vfork.Supported.
const VforkSupported = vfork.Supported

// SetEditMaps makes b start each late-ids executor with the id maps
// edit returns for the maps b would write (uid_map and gid_map lines, and
// setgroups allowed): on the direct path b writes them (WriteIDMaps), and
// through the spawner b asks for them in the Spawn request (the spawner
// writes them).
func SetEditMaps(b *Backend, edit func(uid, gid string, setgroups bool) (string, string, bool)) {
	b.writeMaps = func(pid, pidfd int, m idMaps) error {
		uid, gid, sg := edit(formatIDMap(m.uid), formatIDMap(m.gid), m.setgroups)
		return vfork.WriteIDMaps(pid, pidfd, uid, gid, sg)
	}
	b.editSpawn = func(r *execproto.Spawn) {
		uid, gid, sg := edit(formatSpawnMap(r.UIDMap), formatSpawnMap(r.GIDMap), r.Setgroups)
		r.UIDMap, r.GIDMap, r.Setgroups = parseSpawnMap(uid), parseSpawnMap(gid), sg
	}
}

func formatSpawnMap(ms []execproto.IDMap) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%d %d %d\n", m.Inside, m.Outside, m.Size)
	}
	return b.String()
}

func parseSpawnMap(s string) []execproto.IDMap {
	var ms []execproto.IDMap
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		var m execproto.IDMap
		if _, err := fmt.Sscanf(l, "%d %d %d", &m.Inside, &m.Outside, &m.Size); err != nil {
			continue
		}
		ms = append(ms, m)
	}
	return ms
}

// RunscExecutor runs runsc (its arguments args: flags, run, the bundle of
// a gvisor sandbox of spec, an id) with the executor as the bundle's
// process, as Create does but outside any Sandbox: the handshake with
// spec's setup, then the control socket's end, on which the executor
// exits and runsc with it. It returns the time to the executor's Ready,
// to runsc's end, and the CPU time runsc and what it waited for took.
// sys, when not nil, is runsc's SysProcAttr (a cgroup to start it in).
func RunscExecutor(b *Backend, spec sandbox.Spec, args []string, sys *syscall.SysProcAttr) (ready, total, cpu time.Duration, err error) {
	r, err := b.Runsc()
	if err != nil {
		return 0, 0, 0, err
	}
	host, child, err := socketpair()
	if err != nil {
		return 0, 0, 0, err
	}
	cmd := exec.Command(r.Path, args...)
	cmd.Stdin = child
	cmd.SysProcAttr = sys
	start := time.Now()
	err = cmd.Start()
	child.Close()
	if err != nil {
		host.Close()
		return 0, 0, 0, err
	}
	conn, err := execconn.Dial(context.Background(), host, b.gvisorSetup(&spec))
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 0, 0, 0, fmt.Errorf("handshake: %w", err)
	}
	ready = time.Since(start)
	conn.Close()
	if err := cmd.Wait(); err != nil {
		return 0, 0, 0, fmt.Errorf("runsc run: %w", err)
	}
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	return ready, time.Since(start), time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), nil
}

// DetachedLayers reports whether the executor can mount read-only
// directories as overlays of a detached layer here (false where the probe
// cannot tell: unprivileged).
func DetachedLayers() bool {
	ok, _ := detachedLayers()
	return ok
}

// CgroupV2Dir returns sb's cgroup2 directory, "" without one.
func CgroupV2Dir(sb *Sandbox) string {
	if sb.cg == nil {
		return ""
	}
	return sb.cg.V2Dir()
}

// SlotFile returns the path of the uid slot file sb holds, "" without one.
func SlotFile(sb *Sandbox) string {
	if sb.slot == nil {
		return ""
	}
	return sb.slot.Name()
}

// SlotFree reports whether a uid allocator of slot directory dir would hand
// out the slot of file name now (and releases it again if it took it).
func SlotFree(dir, name string) (bool, error) {
	k, err := strconv.Atoi(filepath.Base(name))
	if err != nil {
		return false, err
	}
	a := &uidAllocator{dir: dir}
	f, err := a.take(k, "probe")
	if f == nil || err != nil {
		return false, err
	}
	f.Close()
	return true, nil
}

// SetEditTasks makes b call edit with the cgroup v1 tasks descriptors each
// executor is to write itself into before its exec, on the direct path and
// through the spawner, before b starts it.
func SetEditTasks(b *Backend, edit func(fds []int)) { b.editTasks = edit }

// CgroupParentDirs returns the directories of b's cgroup parent in every
// hierarchy, whether or not they exist.
func CgroupParentDirs(b *Backend) ([]string, error) {
	m, err := b.cgroups()
	if err != nil {
		return nil, err
	}
	return m.ParentDirs(), nil
}
