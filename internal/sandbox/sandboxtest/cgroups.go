package sandboxtest

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// CgroupDirs lists the directories at rel (a path such as a backend's cgroup
// parent, or parent/sandbox-id) below this process's cgroup, or below that
// cgroup's parent, in every hierarchy mounted under /sys/fs/cgroup.
func CgroupDirs(rel string) []string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil
	}
	mounts, _ := filepath.Glob("/sys/fs/cgroup/*")
	mounts = append(mounts, "/sys/fs/cgroup")
	seen := map[string]bool{}
	var dirs []string
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, m := range mounts {
			for _, own := range []string{parts[2], filepath.Dir(parts[2])} {
				d := filepath.Join(m, own, rel)
				if !seen[d] {
					seen[d] = true
					if fi, err := os.Stat(d); err == nil && fi.IsDir() {
						dirs = append(dirs, d)
					}
				}
			}
		}
	}
	return dirs
}

// Measured is sb's usage (sandbox.Measurer: its cgroup's CPU time and
// memory), failing tb if sb cannot measure itself.
func Measured(tb testing.TB, sb sandbox.Sandbox) sandbox.Metrics {
	tb.Helper()
	m, ok := sb.(sandbox.Measurer)
	if !ok {
		tb.Fatal("sandbox is no Measurer")
	}
	met, err := m.Measure()
	if err != nil {
		tb.Fatal(err)
	}
	return met
}
