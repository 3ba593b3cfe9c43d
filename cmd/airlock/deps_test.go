package main

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/deptest"
)

const self = "github.com/airlockrun/airlock/cmd/airlock"

// frontEndDeps are the packages outside the standard library the front end
// may link: the sandbox commands and what they run on. The policy engine,
// stores, model clients and telemetry stay in airlock-host; linking any of
// them would put their initialisation back on every sandbox's start.
var frontEndDeps = map[string]bool{
	self: true,
	"github.com/airlockrun/airlock/internal/sandboxcli":    true,
	"github.com/airlockrun/airlock/internal/sandbox":       true,
	"github.com/airlockrun/airlock/internal/sandbox/linux": true,
	// The warm path: sandbox run hands off to a sandbox daemon (the
	// client side is run; the daemon's pool is linked, not started).
	"github.com/airlockrun/airlock/internal/sandbox/handoff":      true,
	"github.com/airlockrun/airlock/internal/sandbox/pool":         true,
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup": true,
	"github.com/airlockrun/airlock/internal/sandbox/execconn":     true,
	"github.com/airlockrun/airlock/internal/execproto":            true,
	// The event vocabulary, a standard-library leaf: sandbox.Attachment's
	// hooks carry event payloads (about 60 KB, 0.02 ms of init).
	"github.com/airlockrun/airlock/internal/event":             true,
	"github.com/airlockrun/airlock/internal/executor/landlock": true,
	// A gvisor sandbox's cow workspace is checkpointed on the host with
	// the executor's own walk (executor.COWCheckpoints): the linker keeps
	// only that of the executor, and its init is a few error values (0.11
	// ms of GODEBUG=inittrace=1 at load 4, mostly first touches); seccomp
	// comes with it, static tables only.
	"github.com/airlockrun/airlock/internal/executor":         true,
	"github.com/airlockrun/airlock/internal/executor/seccomp": true,
	// The executor's clone that shares the front end's memory (linux).
	"github.com/airlockrun/airlock/internal/executor/vfork": true,
	"github.com/airlockrun/airlock/internal/supervisor":     true,
	// sandbox run --image: the image's root, read from the store's index
	// (standard library and the sandbox contract only; the store itself,
	// with its registry client, stays in airlock-host).
	"github.com/airlockrun/airlock/internal/imageroot": true,
	// The thin entry for a warm sandbox run (the airlock_thin tag, which
	// scripts/build-thin.sh builds with): assembly and a .syso, no Go code.
	"github.com/airlockrun/airlock/internal/thinentry": true,
	"github.com/pmezard/go-difflib/difflib":            true,
	"golang.org/x/sys/unix":                            true,
}

func TestFrontEndDeps(t *testing.T) {
	pkgs := deptest.List(t, "", "-deps", self)
	for _, p := range pkgs {
		if !p.Standard && !frontEndDeps[p.ImportPath] {
			t.Errorf("cmd/airlock links %s (imported by %s): the front end may link only the sandbox commands (frontEndDeps); run what needs more in airlock-host",
				p.ImportPath, strings.Join(deptest.Importers(pkgs, p.ImportPath), ", "))
		}
	}
}
