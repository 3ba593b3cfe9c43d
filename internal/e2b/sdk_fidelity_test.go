package e2b_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestSDKFidelity drives the newest SDK through what E2B's own JS test
// suite expects of a sandbox (testdata/fidelity.js), one check per
// behaviour the suite found airlock lacking.
func TestSDKFidelity(t *testing.T) {
	needRoot(t)
	node := needNode(t)
	dir := installSDKs(t)
	h := newHarness(t, harnessOptions{})
	script, err := filepath.Abs("testdata/fidelity.js")
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]json.RawMessage
	h.runNode(t, node, 2*time.Minute, "alpha", &got, script, filepath.Join(dir, "node_modules", "e2b"))
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
		// A writable root.
		{"writeAnywhere", `["/0/multi.txt","/home/user/multi.txt"]`},
		{"writtenAnywhere", `"zerouser\n"`},
		{"rootUsr", `"usr\n"`},
		{"sudo", `[0,"[]\nroot\nuser\n"]`},
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
		{"exitError", `["CommandExitError","exit status 3","exit status 3",3]`},
		{"killedError", `["CommandExitError","signal: killed","signal: killed",-1]`},
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
	if _, err := os.Lstat("/usr/bin/airlock-e2b-probe"); err == nil {
		t.Errorf("the sandbox's write to /usr/bin reached the host")
		os.Remove("/usr/bin/airlock-e2b-probe")
	}
}
