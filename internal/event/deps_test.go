package event_test

import (
	"bytes"
	"os/exec"
	"strings"
	"testing"
)

// TestDeps keeps event a leaf (STYLE §1): the standard library only, so
// the store, the engine, the API and the CLI can all import it, and it can
// be fuzzed in isolation.
func TestDeps(t *testing.T) {
	gocmd, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("go command not found: %v", err)
	}
	const self = "github.com/airlockrun/airlock/internal/event"
	cmd := exec.Command(gocmd, "list", "-deps", "-f", "{{.ImportPath}} {{.Standard}}", self)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", self, err, stderr.Bytes())
	}
	for line := range strings.Lines(string(out)) {
		path, std, _ := strings.Cut(strings.TrimSpace(line), " ")
		if std != "true" && path != self {
			t.Errorf("event must import only the standard library, but depends on %s", path)
		}
	}
}
