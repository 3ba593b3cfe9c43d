package deptest_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

// layers place every package of the module, lowest first (STYLE §1:
// dependencies point one way, entry points → wiring → components →
// leaves). A package may import packages of its own layer or below, never
// above; a package with no layer fails the test, so a new one is placed
// by a decision made here.
var layers = []struct {
	name string
	pkgs []string
}{
	{"leaves: vocabularies and pure functions, no I/O beyond their own", []string{
		"internal/event", "internal/execproto", "internal/api", "internal/clock", "internal/hostname", "internal/sse",
		"internal/param", "internal/ratelimit", "internal/price", "internal/bridge", "internal/policy",
		"internal/secret/token", "internal/secret/scan", "internal/store/blob", "internal/store/chunk", "internal/sandbox/linux/cgroup",
		"internal/executor/landlock", "internal/executor/seccomp", "internal/executor/vfork", "internal/testpki", "internal/testgit", "internal/deptest",
		"internal/dockerfile", "internal/report", "internal/portproxy/portproxytest", "internal/thinentry",
	}},
	{"contracts: what the components implement and consume", []string{
		"internal/sandbox", "internal/store", "internal/secret", "internal/model",
		"internal/executor", "internal/executor/spawn",
	}},
	{"components", []string{
		"internal/sandbox/execconn", "internal/sandbox/linux", "internal/sandbox/pool", "internal/sandbox/handoff", "internal/sandbox/sandboxtest",
		"internal/supervisor", "internal/store/schema", "internal/store/sqlrow", "internal/store/sqlite", "internal/store/postgres", "internal/store/postgres/pgtest",
		"internal/store/storetest", "internal/store/chunk/chunktest", "internal/checkpoint", "internal/egress/guard", "internal/egress", "internal/gateway/wire", "internal/gateway",
		"internal/tools", "internal/auth", "internal/client", "internal/credit", "internal/image", "internal/image/imagetest", "internal/imageroot",
		"internal/build",
		"internal/template", "internal/interp", "internal/mcpclient", "internal/sandbox/kube", "internal/portproxy",
	}},
	{"the run engine", []string{"internal/engine"}},
	{"services: the APIs, telemetry, the sandbox commands", []string{
		"internal/server", "internal/server/servertest", "internal/e2b", "internal/mcp", "internal/telemetry", "internal/sandboxcli",
	}},
	{"wiring", []string{"internal/host"}},
	{"the command line", []string{"internal/cli"}},
	{"entry points, benchmarks and end-to-end tests", []string{
		"cmd/airlock", "cmd/airlock-exec", "cmd/airlock-host", "internal/e2e",
		"bench/egressbench", "bench/filefloor", "bench/forkcost", "bench/idle", "bench/imagereg", "bench/mcpbench", "bench/pagetouch", "bench/pgserver", "bench/pullprof",
		"bench/serveload", "bench/ssefloor",
	}},
}

// TestLayers: no package imports one of a higher layer.
func TestLayers(t *testing.T) {
	rank := map[string]int{}
	for i, l := range layers {
		for _, p := range l.pkgs {
			if _, dup := rank[p]; dup {
				t.Errorf("%s is placed twice", p)
			}
			rank[p] = i
		}
	}
	for _, p := range deptest.List(t, "", deptest.Module+"/...") {
		from, ok := rank[p.Rel()]
		if !ok {
			t.Errorf("%s has no layer: place it in layers (layers_test.go)", p.Rel())
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, deptest.Module+"/") {
				continue
			}
			to, ok := rank[deptest.Rel(imp)]
			if ok && to > from {
				t.Errorf("%s (%s) imports %s (%s), a higher layer", p.Rel(), layers[from].name, deptest.Rel(imp), layers[to].name)
			}
		}
	}
}

// cliImports are the packages the command line may import: the host, the
// API's types and client, the leaves it prints and parses (events, policy
// documents, prices), the template documents it parses and writes (and
// the readiness its sandbox commands wait for), the sandbox contract whose
// specs its sandbox commands build, and the sandbox commands it embeds.
// Everything else it reaches through the host.
var cliImports = []string{
	"internal/host", "internal/api", "internal/client", "internal/event", "internal/policy", "internal/price",
	"internal/sandbox", "internal/sandboxcli", "internal/template",
}

// TestCLIImports: the command line reaches the layers through the host
// (STYLE §1: only the host knows every package).
func TestCLIImports(t *testing.T) {
	for _, p := range deptest.List(t, "", deptest.Module+"/internal/cli") {
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, deptest.Module+"/") && !slices.Contains(cliImports, deptest.Rel(imp)) {
				t.Errorf("internal/cli imports %s: reach it through internal/host (or, for a leaf it prints, add it to cliImports with a reason)", deptest.Rel(imp))
			}
		}
	}
}
