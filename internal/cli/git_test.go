package cli_test

import (
	"bytes"
	"context"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/testgit"
)

// TestRunGit: `airlock run --git URL --git-ref REF` starts the workspace as
// the repository, fetched inside the sandbox through the egress proxy that
// --allow and --resolve open; the patch is against the fetched tree. Bad
// flags are refused before anything is created.
func TestRunGit(t *testing.T) {
	home, exe := serveHome(t, "algit-")
	srv := testgit.NewServer(t)
	srv.Repo(t, "proj")
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	script := filepath.Join(home, "script.yaml")
	if err := os.WriteFile(script, []byte(`turns:
  - tool_calls:
      - name: run_command
        args: {command: "cat README && echo more >> README"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(home, "out")
	ctx := context.Background()
	var stdout bytes.Buffer
	code := airlockIn(t, ctx, home, exe, &stdout, "run", "read the readme", "--script", script, "--out", out,
		"--git", "http://git.test:"+port+"/proj.git", "--git-ref", "v1",
		"--allow", "git.test:"+port, "--resolve", "git.test:"+port+"=127.0.0.1:"+port)
	if code != 0 {
		t.Fatalf("airlock run --git = %d\n%s", code, stdout.String())
	}
	if !strings.Contains(stdout.String(), "first") || !strings.Contains(stdout.String(), "workspace fetched from http://git.test:"+port+"/proj.git (v1)") {
		t.Errorf("the command did not see the v1 tree:\n%s", stdout.String())
	}
	patch, err := os.ReadFile(filepath.Join(out, "patch.diff"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(patch), "+more") || strings.Contains(string(patch), "new file") || strings.Contains(string(patch), ".git/") {
		t.Errorf("patch against the fetched tree:\n%s", patch)
	}

	srv.ResetHits()
	for _, args := range [][]string{
		{"--git", "https://user:pw@git.example/a.git"},
		{"--git", "ftp://git.example/a.git"},
		{"--git-ref", "main"},
		{"--git", "https://git.example/a.git", "--workspace", home},
		{"--git", "https://git.example/a.git", "--git-ref", "-x"},
	} {
		if code := airlockIn(t, ctx, home, exe, io.Discard, append([]string{"run", "t", "--script", script}, args...)...); code != 2 {
			t.Errorf("airlock run %v = %d, want 2", args, code)
		}
	}
	if n := srv.Hits(); n != 0 {
		t.Errorf("refused runs reached the repository %d times", n)
	}
}
