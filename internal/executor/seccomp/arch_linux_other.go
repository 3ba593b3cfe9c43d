//go:build linux && !amd64 && !arm64

package seccomp

import (
	"fmt"
	"runtime"
)

// nativeArch fails on architectures without a syscall table here, so Install
// refuses to run rather than run without a filter.
func nativeArch() (*arch, error) {
	return nil, fmt.Errorf("unsupported architecture %s", runtime.GOARCH)
}
