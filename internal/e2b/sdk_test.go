package e2b_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The official SDKs the test installs: the newest, which creates with POST
// /v2/sandboxes, and one of the older family, which creates with POST
// /sandboxes.
var sdks = []struct{ name, spec string }{
	{"e2b-2.51.0", "e2b@2.51.0"},
	{"e2b-2.49.1", "e2b249@npm:e2b@2.49.1"},
}

// installSDKs installs the SDKs (installNPM) and returns the directory
// holding node_modules.
func installSDKs(t *testing.T) string {
	t.Helper()
	var specs []string
	for _, s := range sdks {
		specs = append(specs, s.spec)
	}
	return installNPM(t, "e2b-sdks", specs...)
}

// installNPM installs the npm packages specs under $AIRLOCK_TEST_CACHE/sub
// when set (reused across runs) or the test's temp dir, and returns the
// directory holding node_modules; it skips t without npm.
func installNPM(t *testing.T, sub string, specs ...string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Skip("npm is not installed: the SDK tests install the SDKs with it")
	}
	var dir string
	if c := os.Getenv("AIRLOCK_TEST_CACHE"); c != "" {
		dir = filepath.Join(c, sub)
	} else {
		dir = t.TempDir()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	want := strings.Join(specs, " ")
	stamp := filepath.Join(dir, "installed")
	if b, err := os.ReadFile(stamp); err == nil && string(b) == want {
		return dir
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npm, append([]string{
		"install", "--prefix", dir, "--no-audit", "--no-fund", "--no-save",
		"--no-package-lock", "--no-update-notifier",
	}, specs...)...)
	cmd.Env = append(os.Environ(), "npm_config_cache="+filepath.Join(dir, ".npm"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm install %s: %v\n%s", want, err, out)
	}
	if err := os.WriteFile(stamp, []byte(want), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// sdkResult is what testdata/sdk.js prints.
type sdkResult struct {
	ID       string `json:"id"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	ExitCode int    `json:"exitCode"`
	Streamed string `json:"streamed"`
	Failed   struct {
		Name     string `json:"name"`
		ExitCode int    `json:"exitCode"`
		Stdout   string `json:"stdout"`
	} `json:"failed"`
	TextRoundTrip  bool              `json:"textRoundTrip"`
	BytesRoundTrip bool              `json:"bytesRoundTrip"`
	CatFromCommand string            `json:"catFromCommand"`
	List           []string          `json:"list"`
	Exists         []bool            `json:"exists"`
	Missing        string            `json:"missing"`
	Network        json.RawMessage   `json:"network"`
	Listed         []string          `json:"listed"`
	Info           map[string]string `json:"info"`
	Egress         string            `json:"egress"`
	Connected      string            `json:"connected"`
	Watched        []string          `json:"watched"`
	Metrics        []struct {
		Timestamp  time.Time `json:"timestamp"`
		CPUCount   int       `json:"cpuCount"`
		CPUUsedPct float64   `json:"cpuUsedPct"`
		MemUsed    int64     `json:"memUsed"`
		MemTotal   int64     `json:"memTotal"`
		DiskUsed   int64     `json:"diskUsed"`
		DiskTotal  int64     `json:"diskTotal"`
	} `json:"metrics"`
	Snapshot *struct {
		Names        []string `json:"names"`
		ByID         string   `json:"byID"`
		ByName       string   `json:"byName"`
		Listed       []bool   `json:"listed"`
		Deleted      bool     `json:"deleted"`
		DeletedAgain bool     `json:"deletedAgain"`
	} `json:"snapshot"`
	Killed      bool `json:"killed"`
	KilledAgain bool `json:"killedAgain"`
	Running     bool `json:"running"`
}

// needNode returns node's path, and skips t without it.
func needNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("node is not installed")
	}
	return node
}

// runNode runs node with args (a script and its arguments) against h's
// API and data plane, as tenant's key, for at most timeout, and decodes
// the last line of its stdout, a JSON document, into v. It fails t when
// node fails or prints no JSON, with what node printed.
func (h *harness) runNode(t *testing.T, node string, timeout time.Duration, tenant string, v any, args ...string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "E2B_API_URL=" + h.apiURL, "E2B_SANDBOX_URL=" + h.envdURL, "E2B_API_KEY=" + h.keys[tenant]}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("node: %v\n--- stdout\n%s--- stderr\n%s", err, stdout.String(), stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), v); err != nil {
		t.Fatalf("result %q: %v\n%s", lines[len(lines)-1], err, stderr.String())
	}
}

// TestSDK drives the real E2B SDKs against the API on loopback, with real
// sandboxes.
func TestSDK(t *testing.T) {
	needRoot(t)
	node := needNode(t)
	needCurl(t)
	dir := installSDKs(t)
	h := newHarness(t, harnessOptions{trust: true})
	for _, tenant := range []string{"alpha", "beta"} {
		h.putPolicy(tenant, "egress", h.upstream.egressPolicy())
	}
	script, err := filepath.Abs("testdata/sdk.js")
	if err != nil {
		t.Fatal(err)
	}
	for i, sdk := range sdks {
		t.Run(sdk.name, func(t *testing.T) {
			t.Parallel()
			tenant := []string{"alpha", "beta"}[i%2]
			module := filepath.Join(dir, "node_modules", strings.SplitN(sdk.spec, "@", 2)[0])
			started := time.Now()
			var r sdkResult
			h.runNode(t, node, 2*time.Minute, tenant, &r, script, module, itoa(h.upstream.port), sdk.name)
			check := func(what string, ok bool) {
				t.Helper()
				if !ok {
					t.Errorf("%s: %+v", what, r)
				}
			}
			check("stdout", r.Stdout == "hi from /home/user\n42\n" && r.Streamed == r.Stdout)
			check("stderr", r.Stderr == "err\n")
			check("exit code", r.ExitCode == 0)
			check("non-zero exit", r.Failed.Name == "CommandExitError" && r.Failed.ExitCode == 3 && r.Failed.Stdout == "partial\n")
			check("file round trips", r.TextRoundTrip && r.BytesRoundTrip && r.CatFromCommand == "round trip ✓\n")
			check("list", slices.Equal(r.List, []string{"a.txt:file"}))
			check("exists", slices.Equal(r.Exists, []bool{true, false}))
			check("missing file", r.Missing == "FileNotFoundError" || r.Missing == "NotFoundError")
			var network struct{ ExitCode int }
			check("network refused by the default policy", json.Unmarshal(r.Network, &network) == nil && network.ExitCode != 0)
			check("listed", slices.Equal(r.Listed, []string{r.ID}) && r.Info["run"] == sdk.name)
			check("egress", strings.HasPrefix(r.Egress, "hello from upstream allowed.test") && strings.HasSuffix(r.Egress, "\ndenied:403\n0\n"))
			check("connect", r.Connected == "100015")
			check("watch", slices.Contains(r.Watched, "sub:create") && slices.Contains(r.Watched, "sub/f.txt:write"))
			check("metrics", len(r.Metrics) >= 1)
			for _, m := range r.Metrics {
				check("metric values", m.MemTotal > 0 && m.MemUsed > 0 && m.MemUsed <= m.MemTotal && m.CPUCount >= 1 &&
					m.CPUUsedPct >= 0 && m.CPUUsedPct <= 100 && m.DiskTotal > 0 && m.DiskUsed <= m.DiskTotal && !m.Timestamp.Before(started))
			}
			if sdk.name == "e2b-2.51.0" {
				sn := r.Snapshot
				check("snapshot", sn != nil && slices.Equal(sn.Names, []string{sdk.name + "-snap"}) &&
					sn.ByID == "round trip ✓\n" && sn.ByName == sn.ByID && slices.Equal(sn.Listed, []bool{true}) && sn.Deleted && !sn.DeletedAgain)
			}
			check("kill", r.Killed && !r.KilledAgain && !r.Running)
		})
	}
	t.Run("rate limits", func(t *testing.T) { sdkRateLimits(t, node, dir) }) // sdk_limits_test.go
	t.Cleanup(func() {
		var creates, starts, writes int
		for _, rec := range h.audit.records(t) {
			switch rec.Op {
			case "sandbox.create":
				creates++
			case "process.start":
				starts++
			case "files.write":
				writes++
			}
		}
		if creates < 4 || starts < 10 || writes < 4 {
			t.Errorf("audit log: %d creates, %d process starts, %d writes; want every operation recorded", creates, starts, writes)
		}
		if strings.Contains(h.audit.String(), canary) {
			t.Error("the audit log holds the injected credential")
		}
	})
}
