package e2b_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestEgressGVisor: an E2B sandbox of a template whose policy says
// sandbox.runtime: gvisor runs on gVisor, reaches the allowed host through
// the host's proxy with the credential injected, and is refused another.
func TestEgressGVisor(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("gvisor runtime: needs root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		t.Skip("gvisor runtime: runsc is not installed (scripts/ci-deps.sh installs it)")
	}
	h := newHarness(t, harnessOptions{trust: true})
	needCurl(t)
	h.putPolicy("alpha", "egress-gvisor", "sandbox:\n  runtime: gvisor\n"+h.upstream.egressPolicy())
	s := h.create("alpha", map[string]any{"templateID": "egress-gvisor"})
	port := h.upstream.port
	r := parseRun(t, h.stream(s, "process.Process/Start", bash(
		"uname -r; curl -sS --max-time 20 http://allowed.test:"+itoa(port)+"/ ; echo; "+
			"curl -sS --max-time 20 -o /dev/null -w 'denied:%{http_code}\\n' http://denied.test:"+itoa(port)+"/ ; "+
			"env | grep -c Zq7CANARY || true"), nil))
	if !strings.Contains(r.stdout, "hello from upstream allowed.test") || !strings.Contains(r.stdout, "denied:403") {
		t.Errorf("egress = %+v, want the allowed host reached and the other refused", r)
	}
	if strings.Contains(r.stdout, canary) || !strings.HasSuffix(r.stdout, "0\n") {
		t.Errorf("the sandbox saw the credential: %q", r.stdout)
	}
	if seen := h.upstream.seen(); len(seen) != 1 || seen[0] != "Bearer "+canary {
		t.Errorf("upstream saw Authorization %q, want the injected credential once", seen)
	}
	if host, _ := exec.Command("uname", "-r").Output(); strings.HasPrefix(r.stdout, string(host)) {
		t.Errorf("the sandbox runs on the host's kernel %s, want gVisor's", host)
	}
}
