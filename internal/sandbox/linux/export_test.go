package linux

// IdmapsMade reports how many id-map namespaces b has made.
func IdmapsMade(b *Backend) int64 { return b.idmaps.made.Load() }

// ExecutorPID returns the host pid of sb's executor.
func ExecutorPID(sb *Sandbox) int { return sb.proc.pid }
