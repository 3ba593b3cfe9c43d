package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSDKFidelity drives the newest SDK through what E2B's own JS test
// suite expects of a sandbox (testdata/fidelity.js), one check per
// behaviour the suite found airlock lacking.
func TestSDKFidelity(t *testing.T) {
	needRoot(t)
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	dir := installSDKs(t)
	h := newHarness(t, harnessOptions{})
	script, err := filepath.Abs("testdata/fidelity.js")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script, filepath.Join(dir, "node_modules", "e2b"))
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "E2B_API_URL=" + h.apiURL, "E2B_SANDBOX_URL=" + h.envdURL, "E2B_API_KEY=" + h.keys["alpha"]}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n--- stdout\n%s--- stderr\n%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var got map[string]json.RawMessage
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &got); err != nil {
		t.Fatalf("result %q: %v\n%s", lines[len(lines)-1], err, stderr.String())
	}
	created := string(got["created"])
	tests := []struct{ key, want string }{
		// E2B's user and paths: user in /home/user (the workspace), root
		// in /root, relative paths in the acting user's home.
		{"whoami", `"user\n/home/user\n/home/user\n"`},
		{"rootHome", `"root\n/root\n/root\n"`},
		{"writePath", `"/home/user/rel.txt"`},
		{"rootWrite", `["/root/rel.txt","root"]`},
		{"rootOwned", `"root\n"`},
		{"inWorkspace", `"hi"`},
		// EntryInfo: permission bits alone, owner and group names, an
		// absolute symlink target.
		{"file", `[420,"-rw-r--r--","user","user"]`},
		{"dir", `[493,"drwxr-xr-x","user","user"]`},
		{"symlinkTarget", `"/home/user/rel.txt"`},
		{"listedLink", `["/home/user/rel.txt"]`},
		{"mdWrite", `{"author":"mish","purpose":"upload"}`},
		{"mdInfo", `{"author":"mish","purpose":"upload"}`},
		{"mdOctet", `{"author":"mish","purpose":"upload"}`},
		{"mdList", `[{"author":"mish","purpose":"upload"}]`},
		{"mdRename", `{"author":"mish","purpose":"upload"}`},
		{"mdCleared", `true`},
		{"mdXattr", `{"author":"other","purpose":"upload"}`},
		{"mdBad", `"InvalidArgumentError"`},
		{"watchEntry", `["f.txt","/home/user/w/f.txt","file"]`},
		{"exitError", `["CommandExitError","exit status 3",3]`},
		{"listOrder", created},
		{"expired", `[401,{"message":"signature is already expired","code":401}]`},
		{"valid", `[200,"hi"]`},
		{"killedDuringRun", `[true,"[unknown] terminated: The sandbox was killed or reached its end of life while the request was in flight."]`},
		{"forks", `[[true,"before fork","env kept\n"],[true,"before fork","env kept\n"]]`},
		{"forkIDs", `2`},
		{"afterFork", `"before fork"`},
		{"forkKilled", `"SandboxNotFoundError"`},
		{"paused", `true`},
		{"afterResume", `"hi"`},
		// Lifecycle: paused at the timeout, resumed by connect, or by
		// a request with autoResume.
		{"autoPaused", `[{"onTimeout":"pause","autoResume":false},"paused",false]`},
		{"autoPauseConnect", `["running","kept"]`},
		{"autoResumed", `["paused","kept","running"]`},
	}
	for _, tt := range tests {
		if g := string(got[tt.key]); g != tt.want {
			t.Errorf("%s = %s, want %s", tt.key, g, tt.want)
		}
	}
}
