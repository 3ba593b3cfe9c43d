//go:build linux && !amd64

package seccomp

import "golang.org/x/sys/unix"

// builtProgram is nil here: Install assembles the filter at run time.
var builtProgram []unix.SockFilter
