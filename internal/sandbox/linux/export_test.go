package linux

import "github.com/airlockrun/airlock/internal/sandbox"

// IdmapsMade reports how many id-map namespaces b has made.
func IdmapsMade(b *Backend) int64 { return b.idmaps.made.Load() }

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
	return b.gvisorBundle(dir, &spec, r.Platform)
}

// GVisorExecutor is where the executor is bound inside a gvisor sandbox.
const GVisorExecutor = gvisorExecutor

// ChoosePlatform is choosePlatform, for its table.
var ChoosePlatform = choosePlatform

// RunscVersion is runscVersion, for its table.
var RunscVersion = runscVersion

// SetForkOnly makes b start every executor with syscall.ForkExec, its id
// maps written before the exec (the path without vforkExec).
func SetForkOnly(b *Backend) { b.forkOnly = true }

// VforkSupported is vforkSupported.
const VforkSupported = vforkSupported

// SetWriteMaps makes b write each late-ids executor's id maps with write,
// given the maps b would write (uid_map and gid_map lines) and pid.
func SetWriteMaps(b *Backend, write func(pid int, uidMap, gidMap string) error) {
	b.writeMaps = func(pid int, m idMaps) error { return write(pid, formatIDMap(m.uid), formatIDMap(m.gid)) }
}
