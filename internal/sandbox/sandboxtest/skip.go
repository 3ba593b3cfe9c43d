package sandboxtest

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// RunSkipping is Run for a backend that cannot pass every case yet: skip
// maps a case's name below the suite ("Exec/TTY", or a group, "Limits") to
// the reason it is skipped, which the skip reports. Every skip is listed
// by name in the backend's test and documentation; nothing is skipped
// silently.
func RunSkipping(t *testing.T, newBackend func(t *testing.T) sandbox.Backend, skip map[string]string) {
	RunWith(t, newBackend, Options{Skip: skip})
}

// skipped finds the reason test name (with the suite's own test first) is
// skipped for, if it is.
func skipped(name string, skip map[string]string) (string, bool) {
	_, rest, ok := strings.Cut(name, "/")
	if !ok {
		return "", false
	}
	for {
		if reason, ok := skip[rest]; ok {
			return reason, true
		}
		i := strings.LastIndexByte(rest, '/')
		if i < 0 {
			return "", false
		}
		rest = rest[:i]
	}
}
