package e2b_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
)

// limitsScript drives the SDK (the module in argv[1]) past both planes'
// rate limits and prints the error classes it raised.
const limitsScript = `
const { Sandbox, RateLimitError } = require(process.argv[1]);
const name = (e) => e instanceof RateLimitError ? "RateLimitError" : (e && e.constructor && e.constructor.name) + ": " + e;
(async () => {
  const out = {};
  const sbx = await Sandbox.create();                      // the key's first call
  for (let i = 0; i < 4 && !out.data; i++) {
    try { await sbx.files.exists("/workspace"); } catch (e) { out.data = name(e); }
  }
  try { await Sandbox.list().nextItems(); } catch (e) { out.list = name(e); } // its second
  try { await Sandbox.list().nextItems(); } catch (e) { out.api = name(e); }  // over
  console.log(JSON.stringify(out));
})().catch((e) => { console.error(e); process.exit(1); });
`

// sdkRateLimits is TestSDK's check that the SDK (in dir's node_modules)
// raises RateLimitError for a 429 of either plane: the control plane's
// after it gave up waiting (its Retry-After is past the request's
// timeout), the data plane's resource_exhausted at once.
func sdkRateLimits(t *testing.T, node, dir string) {
	// A token every 1000 s: the SDK's retry would wait past its timeout,
	// so it answers at once.
	h := newHarness(t, harnessOptions{config: e2b.Config{APIRate: 0.001, APIBurst: 2, SandboxRate: 0.001, SandboxBurst: 2}})
	var got map[string]string
	h.runNode(t, node, 2*time.Minute, "alpha", &got, "-e", limitsScript, filepath.Join(dir, "node_modules", "e2b"))
	if got["list"] != "" || got["api"] != "RateLimitError" || got["data"] != "RateLimitError" {
		t.Errorf("SDK errors = %v, want the second list call to pass and RateLimitError for the third and on the data plane", got)
	}
}
