package e2e

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// auditRecord is the part of an egress audit record the test reads.
type auditRecord struct {
	Tenant, Run, Sandbox string
	Decision, Reason     string
	Method, Host         string
	Port                 int
	Status               int
	Inspected            bool
	Credential           string
}

// TestCredentialInjection: a secret stored with `airlock secrets set` and
// bound by policy to echo.test reaches that HTTPS upstream (which has its own
// CA) as a header, while inside the sandbox, for its ordinary user and for
// its root, nothing holds it: not the environment, not any process's
// environment or command line, not a file, not the upstream's echo of it
// (in body and header). The audit log records allowed and denied requests
// with the sandbox's id, and nothing under $AIRLOCK_HOME holds the secret in
// clear text.
func TestCredentialInjection(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	needTool(t, "curl")
	const prefix = "e2e-tok-"
	token := prefix + rand.Text()
	// Paths of this run's requests: the upstream is shared, also by the
	// repetitions of -count.
	at := "/inject-" + strings.ToLower(rand.Text()[:8])

	set := h.airlock(t, token, "secrets", "set", "e2e_token")
	if set.code != 0 {
		t.Fatalf("secrets set failed\n%s", set)
	}
	ls := h.airlock(t, "", "secrets", "ls")
	if ls.code != 0 || !strings.Contains(ls.stdout, "e2e_token") {
		t.Fatalf("secrets ls does not list e2e_token\n%s", ls)
	}
	for _, r := range []result{set, ls} {
		if strings.Contains(r.stdout+r.stderr, token) {
			t.Errorf("airlock %s printed the secret", strings.Join(r.args, " "))
		}
	}
	pol := h.writePolicy(t, up.policy(policyOptions{credentials: fmt.Sprintf(
		"    - host: %s\n      secret: e2e_token\n      header: Authorization\n      value: \"Bearer {{secret}}\"\n", echoName)}))

	e := up.echo.port
	script := fmt.Sprintf(`
echo "== curl"
curl -sS --fail -D /tmp/headers https://%[1]s:%[2]d%[4]s-curl && cat /tmp/headers
echo "== forged"
curl -sS --fail -H 'Authorization: Bearer forged-by-sandbox' https://%[1]s:%[2]d%[4]s-forged
echo "== denied"
curl -sS -o /dev/null -w 'connect %%{http_connect}\n' https://%[3]s:%[2]d%[4]s-denied
`, echoName, e, deniedName, at)
	var wantOut []string
	if sandboxTool("python3") != "" {
		script += fmt.Sprintf(`
echo "== python"
python3 -c 'import urllib.request as u; r = u.urlopen("https://%s:%d%s-python"); print(r.read().decode()); print("python X-Echo-Auth:", r.headers["X-Echo-Auth"])'
`, echoName, e, at)
		wantOut = append(wantOut, "python X-Echo-Auth: Bearer [redacted]")
	}
	// Look everywhere the sandbox can: for any string with the token's
	// prefix (the script cannot name the token itself without handing it
	// in), and dump whatever could hold it.
	script += fmt.Sprintf(`
echo "== env"; env
echo "== proc"
for p in /proc/[0-9]*; do
  echo "$p"; tr '\0' '\n' < $p/environ; tr '\0' ' ' < $p/cmdline; echo
done 2>&1
echo "== files"
grep -rsaF -e %s /etc /tmp /workspace /home /run 2>&1
echo "== end"
`, prefix)

	var runs []result
	t.Run("sandbox", func(t *testing.T) {
		for _, user := range []string{"", "root"} {
			name := "sandbox user"
			flags := []string{"--policy", pol}
			if user != "" {
				name = "sandbox root"
				flags = append(flags, "--user", user)
			}
			r := h.sandbox(t, flags, script)
			runs = append(runs, r)
			t.Run(name, func(t *testing.T) {
				if r.code != 0 || !strings.Contains(r.stdout, "== end") {
					t.Fatalf("script did not finish\n%s", r)
				}
				for _, want := range append([]string{
					"auth=Bearer [redacted]\n", // the echoed body
					"X-Echo-Auth: Bearer [redacted]",
					"path=" + at + "-forged\n",
					"connect 403",
				}, wantOut...) {
					if !strings.Contains(r.stdout, want) {
						t.Errorf("stdout lacks %q\n%s", want, r)
					}
				}
				if strings.Contains(r.stdout+r.stderr, token) {
					t.Errorf("the secret is visible inside the sandbox\n%s", r)
				}
				if strings.Contains(r.stdout, "auth=Bearer forged") {
					t.Errorf("the upstream got the sandbox's own Authorization header\n%s", r)
				}
			})
		}
	})

	// The upstream got the real credential, also where the sandbox sent
	// its own Authorization header.
	got := 0
	for _, s := range up.echo.requests() {
		if !strings.HasPrefix(s.Path, at+"-") {
			continue
		}
		got++
		if s.Auth != "Bearer "+token {
			t.Errorf("upstream got %s %s with Authorization %q, want the injected credential", s.Method, s.Path, s.Auth)
		}
		if s.SNI != echoName {
			t.Errorf("upstream got %s over TLS for %q, want %q", s.Path, s.SNI, echoName)
		}
	}
	if want := 2 * (2 + len(wantOut)); got != want {
		t.Errorf("upstream got %d injected requests, want %d", got, want)
	}
	up.echo.neverSaw(t, at+"-denied")

	checkAudit(t, filepath.Join(h.dir, "audit", "egress.jsonl"), token, len(runs))

	// Nothing under $AIRLOCK_HOME holds the secret in clear text: not the
	// store, the audit log, the policy or what the sandboxes left.
	err := filepath.WalkDir(h.dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(token)) {
			t.Errorf("%s holds the secret in clear text", path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkAudit checks the audit log of runs sandbox runs that each made the
// injected requests and one denied one.
func checkAudit(t *testing.T, path, token string, runs int) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(token)) {
		t.Errorf("audit log holds the secret:\n%s", raw)
	}
	type seenBy struct{ injected, denied int }
	bySandbox := map[string]*seenBy{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		var rec auditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			t.Fatalf("audit line %q: %v", sc.Text(), err)
		}
		if rec.Tenant == "" || rec.Run == "" || !strings.HasPrefix(rec.Sandbox, "sb-") {
			t.Errorf("audit record without the sandbox's identity: %s", sc.Text())
			continue
		}
		s := bySandbox[rec.Sandbox]
		if s == nil {
			s = &seenBy{}
			bySandbox[rec.Sandbox] = s
		}
		switch {
		case rec.Decision == "allowed" && rec.Host == echoName && rec.Method == "GET":
			if rec.Credential != "e2e_token" || !rec.Inspected || rec.Status != 200 {
				t.Errorf("allowed request record = %s, want credential e2e_token, inspected, status 200", sc.Text())
			}
			s.injected++
		case rec.Decision == "denied" && rec.Host == deniedName:
			if rec.Reason != "policy:no_rule" || rec.Method != "CONNECT" {
				t.Errorf("denied request record = %s, want a CONNECT refused for policy:no_rule", sc.Text())
			}
			s.denied++
		}
	}
	if len(bySandbox) != runs {
		t.Errorf("audit log names %d sandboxes, want %d (one per run):\n%s", len(bySandbox), runs, raw)
	}
	for id, s := range bySandbox {
		if s.injected == 0 || s.denied != 1 {
			t.Errorf("sandbox %s: %d injected and %d denied records, want some and 1:\n%s", id, s.injected, s.denied, raw)
		}
	}
}
