package linux_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// TestWritableHostRoot: with WritableRoot on the host's root, the
// sandbox's root writes anywhere (/, /usr/bin, over a host file in /usr),
// the default user only where its permissions let it, and nothing reaches
// the host; the sandbox's disk limit bounds what the writes take.
func TestWritableHostRoot(t *testing.T) {
	const disk = 64 << 20
	sb := attackSandbox(t, sandbox.RuntimeNative, sandbox.Spec{WritableRoot: true, Limits: sandbox.Limits{DiskBytes: disk}})
	name := "airlock-writable-" + attackToken()
	// A host file in a system directory, which the sandbox's root
	// changes in its own layer only.
	canary := filepath.Join("/usr/local", name)
	if err := os.WriteFile(canary, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(canary) })

	written := []string{"/usr/bin/" + name, "/" + name, "/" + name + "-dir/f", "/opt/" + name, "/etc/" + name}
	for _, p := range written {
		got := attackMust(t, sb, "root", "mkdir -p "+filepath.Dir(p)+" && echo inside > "+p+" && cat "+p+" && stat -c %U "+p)
		if got != "inside\nroot\n" {
			t.Errorf("root wrote %s inside: read back %q, want inside and root's", p, got)
		}
	}
	if got := attackMust(t, sb, "root", "stat -c %U "+canary+"; echo pwned > "+canary+"; cat "+canary); got != "root\npwned\n" {
		t.Errorf("root's overwrite of the host's %s inside = %q, want it root's and changed inside", canary, got)
	}
	if b, err := os.ReadFile(canary); err != nil || string(b) != "host\n" {
		t.Errorf("host %s = %q, %v after the sandbox changed it, want host", canary, b, err)
	}
	for _, p := range written {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("host %s exists after the sandbox wrote it", p)
			os.Remove(p)
		}
	}
	// The default user writes where its permissions let it, not into
	// root's directories.
	if res := attackRun(t, sb, "", "echo x > /usr/bin/"+name+"-user"); res.ok() || !strings.Contains(res.stderr, "Permission denied") {
		t.Errorf("the sandbox user wrote /usr/bin: %v", res)
	}
	// Devices, /proc and the generated /etc's read-only files stay so.
	for _, p := range []string{"/proc/sys/kernel/hostname", "/etc/ssl/" + name} {
		if res := attackRun(t, sb, "root", "echo x > "+p); res.ok() {
			t.Errorf("root wrote %s: %v", p, res)
		}
	}
	// The writes are in the disk limit: 128 MiB do not fit in 64, in /
	// or in a system directory's layer.
	for _, p := range []string{"/big", "/usr/big"} {
		res := attackRun(t, sb, "root", "head -c 134217728 /dev/zero > "+p)
		if res.ok() || !strings.Contains(res.stderr, "No space left") {
			t.Errorf("root wrote 128 MiB to %s under a 64 MiB disk limit: %v", p, res)
		}
		attackMust(t, sb, "root", "rm -f "+p)
	}
}

// TestReadOnlyHostRootDefault: without WritableRoot the host's root stays
// read-only, for root too (the native API's and agent runs' default).
func TestReadOnlyHostRootDefault(t *testing.T) {
	sb := attackSandbox(t, sandbox.RuntimeNative, sandbox.Spec{})
	for _, p := range []string{"/x", "/usr/bin/x"} {
		if res := attackRun(t, sb, "root", "echo x > "+p); res.ok() || !strings.Contains(res.stderr, "Read-only file system") {
			t.Errorf("root wrote %s in a read-only root: %v", p, res)
		}
	}
}
