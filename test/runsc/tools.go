//go:build tools

// Package runsc builds gVisor's runsc at the version pinned in go.mod (the
// gvisor.dev/gvisor "go" branch, buildable with the go tool). It is a module
// of its own so that airlock's go.mod does not carry gVisor.
// scripts/runsc.sh builds it; nothing imports this package.
package runsc

import _ "gvisor.dev/gvisor/runsc"
