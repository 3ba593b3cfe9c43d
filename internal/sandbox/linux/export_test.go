package linux

// IdmapsMade reports how many id-map namespaces b has made.
func IdmapsMade(b *Backend) int64 { return b.idmaps.made.Load() }
