package guard

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netnsEnv marks the inner run of this test binary, inside a fresh network
// namespace made by TestNetns with `unshare -n`. Tests that put listeners on
// addresses such as 169.254.169.254 or 10.0.0.1 run only there, so that no
// packet could leave the machine even if the guard were broken.
const netnsEnv = "AIRLOCK_GUARD_TEST_NETNS"

// Addresses the inner run creates inside its namespace. 8.8.4.4 stands in
// for a public address; it exists only in the namespace.
const (
	nsMetadata = "169.254.169.254"
	nsPrivate  = "10.0.0.1"
	nsCGNAT    = "100.64.0.1"
	nsPublic   = "8.8.4.4"
	nsULA      = "fd00::10"
)

// nsDev is the interface the namespace addresses are on, and nsIPv6 says
// whether nsULA could be added. Set by setupNetns.
var (
	nsDev  string
	nsIPv6 bool
)

func inNetns() bool { return os.Getenv(netnsEnv) == "1" }

func TestMain(m *testing.M) {
	if inNetns() {
		if err := setupNetns(); err != nil {
			fmt.Fprintln(os.Stderr, "guard test: set up network namespace:", err)
			os.Exit(1)
		}
	}
	os.Exit(m.Run())
}

// setupNetns brings up the namespace's addresses. It refuses to touch
// anything unless the namespace is fresh (only "lo"), so that a stray
// environment variable can never make it add addresses to the host.
func setupNetns() error {
	ifs, err := net.Interfaces()
	if err != nil {
		return err
	}
	if len(ifs) != 1 || ifs[0].Name != "lo" {
		return fmt.Errorf("%s is set but this is not a fresh network namespace (interfaces %v)", netnsEnv, ifs)
	}
	// In a fresh namespace an IPv6 connect now and then fails with
	// ENETUNREACH about a second after lo comes up; without duplicate
	// address detection that is rarer, and countingListener.count retries
	// the rest. The files are per namespace; without IPv6 they do not exist.
	for _, conf := range []string{"all", "default", "lo"} {
		_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+conf+"/accept_dad", []byte("0"), 0o644)
	}
	if err := ipCmd("link", "set", "lo", "up"); err != nil {
		return err
	}
	// A dummy interface is the natural home; kernels without the dummy
	// driver get the addresses on the namespace's own loopback instead.
	nsDev = "lo"
	if ipCmd("link", "add", "d0", "type", "dummy") == nil {
		if err := ipCmd("link", "set", "d0", "up"); err != nil {
			return err
		}
		nsDev = "d0"
	}
	for _, a := range []string{nsMetadata, nsPrivate, nsCGNAT, nsPublic} {
		if err := ipCmd("addr", "add", a+"/32", "dev", nsDev); err != nil {
			return err
		}
	}
	nsIPv6 = ipCmd("addr", "add", nsULA+"/128", "dev", nsDev, "nodad") == nil
	return nil
}

func ipCmd(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// requireNetns skips a test outside the namespace TestNetns creates.
func requireNetns(t *testing.T) {
	t.Helper()
	if !inNetns() {
		t.Skip("runs inside the network namespace that TestNetns creates")
	}
}

// TestNetns re-runs the TestInNetns* tests of this binary inside a fresh
// network namespace.
func TestNetns(t *testing.T) {
	if inNetns() {
		t.Skip("this is the inner run")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace (unshare -n)")
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("unshare (util-linux) is not installed")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("ip (iproute2) is not installed")
	}
	if out, err := exec.Command(unshare, "-n", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot create a network namespace here: %v: %s", err, out)
	}
	args := []string{"-n", os.Args[0], "-test.run=^TestInNetns", "-test.count=1", "-test.v"}
	cmd := exec.Command(unshare, args...)
	cmd.Env = append(os.Environ(), netnsEnv+"=1")
	out, err := cmd.CombinedOutput()
	t.Logf("inner run:\n%s", out)
	if err != nil {
		t.Fatalf("inner run in a network namespace: %v", err)
	}
	if strings.Contains(string(out), "no tests to run") || !strings.Contains(string(out), "--- PASS: TestInNetns") {
		t.Fatal("inner run ran no TestInNetns tests")
	}
	if strings.Contains(string(out), "--- SKIP: TestInNetns") {
		t.Fatal("inner run skipped tests")
	}
}
