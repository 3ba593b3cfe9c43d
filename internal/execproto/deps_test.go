package execproto_test

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps execproto a leaf that imports only the standard library: both
// the host and the executor link it, so anything it imports ends up beside
// untrusted code (STYLE §1).
func TestDeps(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	const self = "github.com/airlockrun/airlock/internal/execproto"
	for _, platform := range []string{"linux/amd64", "linux/arm64", "darwin/arm64"} {
		t.Run(platform, func(t *testing.T) {
			goos, goarch, _ := strings.Cut(platform, "/")
			cmd := exec.Command(gocmd, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", self)
			cmd.Env = append(os.Environ(), "GOOS="+goos, "GOARCH="+goarch, "CGO_ENABLED=0")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr.Bytes())
			}
			for line := range strings.Lines(string(out)) {
				path, std, _ := strings.Cut(strings.TrimSpace(line), " ")
				if std != "true" && path != self {
					t.Errorf("execproto must import only the standard library, but depends on %s", path)
				}
			}
		})
	}
}
