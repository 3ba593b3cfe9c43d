package scan_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	crand "crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/secret/scan"
)

// gen makes realistic fake credentials from a fixed seed: the corpus is the
// same on every run, and no real (or committed) token is needed.
type gen struct{ r *rand.Rand }

const (
	alnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	upnum  = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
	hexlow = "0123456789abcdef"
	b64url = alnum + "-_"
)

func (g gen) s(set string, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = set[g.r.IntN(len(set))]
	}
	return string(b)
}

func (g gen) jwt() string {
	h := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"HS256","typ":"JWT"}`))
	p := base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"sub":"%s","iat":1516239022}`, g.s(alnum, 12))))
	return h + "." + p + "." + g.s(b64url, 43)
}

func pemKey(t *testing.T) string {
	k, err := ecdsa.GenerateKey(elliptic.P256(), crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}))
}

// positive is a text carrying one credential, the rule expected to find
// it and the credential itself.
type positive struct {
	name, rule, text, secret string
}

func positives(t *testing.T) []positive {
	g := gen{rand.New(rand.NewPCG(42, 7))}
	var ps []positive
	add := func(name, rule, secret, format string) {
		ps = append(ps, positive{name: name, rule: rule, secret: secret, text: fmt.Sprintf(format, secret)})
	}
	add("aws access key id in an env line", "aws-access-token", "AKIA"+g.s(upnum, 16), "export AWS_ACCESS_KEY_ID=%s\n")
	add("aws key in a task", "aws-access-token", "ASIA"+g.s(upnum, 16), "Please deploy with key %s to staging.")
	add("aws secret key assignment", "generic-api-key", g.s(alnum+"/+", 40), "aws_secret_access_key = %s")
	add("gcp api key", "gcp-api-key", "AIza"+g.s(b64url, 35), `{"apiKey": "%s"}`)
	add("azure client secret", "azure-ad-client-secret", g.s(alnum, 3)+"8Q~"+g.s(alnum+"_~.-", 34), "AZURE_CLIENT_SECRET=%s")
	add("github classic pat", "github-pat", "ghp_"+g.s(alnum, 36), "git clone https://github.com/acme/app (token %s)")
	add("github fine-grained pat", "github-fine-grained-pat", "github_pat_"+g.s(alnum+"_", 82), "GH_TOKEN=%s gh pr create")
	add("github oauth", "github-oauth", "gho_"+g.s(alnum, 36), "token: %s")
	add("github app token", "github-app-token", "ghs_"+g.s(alnum, 36), "Authorization: token %s")
	add("gitlab pat", "gitlab-pat", "glpat-"+g.s(b64url, 20), "curl --header 'PRIVATE-TOKEN: %s' https://gitlab.example/api/v4/projects")
	add("slack bot token", "slack-bot-token", "xoxb-"+g.s("0123456789", 12)+"-"+g.s("0123456789", 13)+"-"+g.s(alnum, 24), "SLACK_TOKEN=%s")
	add("slack user token", "slack-user-token", "xoxp-"+g.s("0123456789", 12)+"-"+g.s("0123456789", 12)+"-"+g.s("0123456789", 13)+"-"+g.s(hexlow, 32), "slack: %s")
	add("slack webhook", "slack-webhook-url", "https://hooks.slack.com/services/T"+g.s(upnum, 10)+"/B"+g.s(upnum, 10)+"/"+g.s(alnum, 24), "post to %s")
	add("stripe live secret key", "stripe-access-token", "sk_live_"+g.s(alnum, 24), "stripe.api_key = '%s'")
	add("stripe restricted key", "stripe-access-token", "rk_live_"+g.s(alnum, 24), "STRIPE_KEY=%s")
	add("openai key", "openai-api-key", "sk-proj-"+g.s(b64url, 74)+"T3BlbkFJ"+g.s(b64url, 74), "OPENAI_API_KEY=%s")
	add("anthropic key", "anthropic-api-key", "sk-ant-api03-"+g.s(b64url, 93)+"AA", "x-api-key: %s")
	add("npm token", "npm-access-token", "npm_"+g.s(alnum, 36), "//registry.npmjs.org/:_authToken=%s")
	add("pypi upload token", "pypi-upload-token", "pypi-AgEIcHlwaS5vcmc"+g.s(b64url, 60), "password = %s")
	add("jwt in a header", "jwt", g.jwt(), "Authorization: Bearer %s")
	add("hugging face token", "huggingface-access-token", "hf_"+g.s("abcdefghijklmnopqrstuvwxyz", 34), "HF_TOKEN=%s")
	add("generic api key assignment", "generic-api-key", g.s(alnum, 32), `config.api_key = "%s"`)
	add("generic secret in yaml", "generic-api-key", g.s(alnum, 28), "client_secret: %s\n")
	add("postgres url with a password", "url-password", g.s(alnum, 16), "DATABASE_URL=postgres://app:%s@db.internal:5432/app")
	add("redis url with a password", "url-password", g.s(alnum, 20), "redis://default:%s@cache:6379/0")
	add("git remote with a password", "url-password", g.s(alnum, 18), "git remote add origin https://bob:%s@git.example.com/acme/app.git")
	key := pemKey(t)
	ps = append(ps, positive{name: "pem private key", rule: "private-key", text: "cat id_ecdsa\n" + key, secret: strings.TrimSpace(key)})
	return ps
}

// negatives are texts an agent's tools produce every day that hold
// nothing secret: hashes, ids, encoded images, lock files, placeholders.
func negatives() []string {
	g := gen{rand.New(rand.NewPCG(9, 9))}
	png := base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), []byte(g.s(alnum, 300))...))
	return []string{
		"sha256:" + g.s(hexlow, 64),
		"commit " + g.s(hexlow, 40) + "\nAuthor: A <a@example.com>\n\n    fix the parser",
		"uuid " + "3f2b8c1e-9d4a-4b7e-8f1a-2c3d4e5f6a7b",
		`"integrity": "sha512-` + base64.StdEncoding.EncodeToString([]byte(g.s(alnum, 64))) + `"`,
		"golang.org/x/sys v0.30.0 h1:" + base64.StdEncoding.EncodeToString([]byte(g.s(alnum, 32))),
		`<img src="data:image/png;base64,` + png + `">`,
		"image@sha256:" + hex.EncodeToString([]byte(g.s(alnum, 32))),
		"postgres://app:${PGPASSWORD}@db:5432/app",
		"postgres://app@db:5432/app?sslmode=disable",
		"https://user:password@example.com/ (a placeholder in the docs)",
		"mysql://root:****@localhost/test",
		"password: ********",
		"Set API_KEY to your key, e.g. export API_KEY=<your key here>",
		"the token is refreshed every hour; keys rotate weekly",
		"func validateToken(token string) error { return nil }",
		"apiKey := os.Getenv(\"API_KEY\")",
		"secret = None  # filled in at deploy time",
		"pod/web-7d9f8b6c5d-x2k4q   1/1   Running",
		"https://github.com/acme/app/blob/" + g.s(hexlow, 40) + "/main.go#L12",
		"ok  \tgithub.com/acme/app/internal/parser\t0.412s\tcoverage: 81.3% of statements",
		"AKIAIOSFODNN7EXAMPLE is the key AWS's documentation uses",
		"token_count: 1234567890",
		"-----BEGIN CERTIFICATE-----\n" + base64.StdEncoding.EncodeToString([]byte(g.s(alnum, 300))) + "\n-----END CERTIFICATE-----",
		"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + g.s(alnum, 43) + " bob@laptop",
		"go 1.26.8 (linux/amd64), module version v0.0.0-20250218142911-aa4b98e5adaa",
	}
}

// TestCorpus holds the scanner to every positive (found, by the expected
// rule, covering the whole credential) and every near miss (nothing found),
// and reports the corpus's precision and recall.
func TestCorpus(t *testing.T) {
	s, err := scan.New(scan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var tp, fp, fn int
	for _, p := range positives(t) {
		t.Run(p.name, func(t *testing.T) {
			fs := s.Scan(p.text)
			hit := false
			for _, f := range fs {
				got := p.text[f.Start:f.End]
				if f.Rule == p.rule && strings.Contains(p.secret, got) && len(got) >= len(p.secret)/2 {
					hit = true
					tp++
				} else {
					fp++
					t.Errorf("finding %s %q is not the planted %s", f.Rule, got, p.rule)
				}
			}
			if !hit {
				fn++
				t.Errorf("rule %s did not find %q in %q (findings %+v)", p.rule, p.secret, p.text, fs)
			}
			red, _ := s.Redact(p.text)
			if strings.Contains(red, p.secret) || !strings.Contains(red, scan.Marker(p.rule)) {
				t.Errorf("Redact left %q", red)
			}
		})
	}
	for i, n := range negatives() {
		if fs := s.Scan(n); len(fs) > 0 {
			fp += len(fs)
			for _, f := range fs {
				t.Errorf("near miss %d: %s found %q in %q", i, f.Rule, n[f.Start:f.End], n)
			}
		}
	}
	t.Logf("corpus: %d positives, %d near misses; precision %.3f, recall %.3f (%d rules)",
		len(positives(t)), len(negatives()), float64(tp)/float64(max(tp+fp, 1)), float64(tp)/float64(max(tp+fn, 1)), len(s.Rules()))
}

func TestOptions(t *testing.T) {
	key := "ghp_" + strings.Repeat("aB3x", 9)
	s, err := scan.New(scan.Options{Disable: []string{"github-pat"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range s.Scan("token " + key) {
		if f.Rule == "github-pat" {
			t.Errorf("a disabled rule still found %+v", f)
		}
	}
	s, err = scan.New(scan.Options{Allow: []string{`^ghp_(aB3x)+$`}})
	if err != nil {
		t.Fatal(err)
	}
	if fs := s.Scan("GH_TOKEN=" + key); len(fs) != 0 {
		t.Errorf("an allowed value was found: %+v", fs)
	}
	const token = "ghp_Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i"
	for _, o := range []scan.Options{{Disable: []string{"no-such-rule"}}, {Allow: []string{"("}}} {
		if _, err := scan.New(o); err == nil {
			t.Errorf("New(%+v) took a bad option", o)
		}
		// What New refuses, NewOrDefault scans with every default rule.
		if fs := scan.NewOrDefault(o).Scan("GITHUB_TOKEN=" + token); len(fs) != 1 || fs[0].Rule != "github-pat" {
			t.Errorf("NewOrDefault(%+v) found %+v, want the github-pat rule's finding", o, fs)
		}
	}
	if fs := scan.NewOrDefault(scan.Options{Disable: []string{"github-pat"}}).Scan("GITHUB_TOKEN=" + token); slices.ContainsFunc(fs, func(f scan.Finding) bool { return f.Rule == "github-pat" }) {
		t.Errorf("NewOrDefault ignored options New takes: %+v", fs)
	}
}

// FuzzScan: any text scans without a panic, findings are ordered, within
// the text and disjoint, and Redact removes every finding's bytes.
func FuzzScan(f *testing.F) {
	f.Add("export AWS_ACCESS_KEY_ID=AKIAZ7QKXJ2RW5TLM3VN")
	f.Add("postgres://u:p4ssW0rdXy@h/db")
	f.Add("-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----")
	f.Add("\n\n\x00\xff api_key=\"" + strings.Repeat("zQ9", 12) + "\"")
	s, err := scan.New(scan.Options{})
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, text string) {
		fs := s.Scan(text)
		end := 0
		for _, x := range fs {
			if x.Start < end || x.End <= x.Start || x.End > len(text) {
				t.Fatalf("bad finding %+v in %q", x, text)
			}
			end = x.End
		}
		red, rfs := s.Redact(text)
		if len(rfs) != len(fs) {
			t.Fatalf("Redact found %d, Scan %d", len(rfs), len(fs))
		}
		if len(fs) == 0 && red != text {
			t.Fatalf("Redact changed a text without findings")
		}
	})
}

func BenchmarkNew(b *testing.B) {
	for b.Loop() {
		if _, err := scan.New(scan.Options{}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScan: a 32 KiB tool result (the engine's default cap) of
// ordinary build output with one token in it.
func BenchmarkScan(b *testing.B) {
	s, err := scan.New(scan.Options{})
	if err != nil {
		b.Fatal(err)
	}
	var sb strings.Builder
	for sb.Len() < 32<<10 {
		sb.WriteString("ok  \tgithub.com/acme/app/internal/parser\t0.412s\tcoverage: 81.3% of statements\n")
	}
	sb.WriteString("GITHUB_TOKEN=ghp_Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i\n")
	text := sb.String()
	b.SetBytes(int64(len(text)))
	for b.Loop() {
		if len(s.Scan(text)) != 1 {
			b.Fatal("want one finding")
		}
	}
}

// TestFarAndLong: a rule runs around its keywords, not over the whole
// text; a token far into a long text and a 4096-bit RSA key (a match of
// several KiB) are still found whole.
func TestFarAndLong(t *testing.T) {
	s, err := scan.New(scan.Options{})
	if err != nil {
		t.Fatal(err)
	}
	k, err := rsa.GenerateKey(crand.Reader, 4096)
	if err != nil {
		t.Fatal(err)
	}
	key := string(pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(k)}))
	filler := strings.Repeat("ok  \tgithub.com/acme/app/internal/parser\t0.412s\tcoverage: 81.3% of statements\n", 1000)
	text := filler + "export AWS_ACCESS_KEY_ID=AKIAZ7QKXJ2RW5TLM3VN\n" + filler + key + filler
	fs := s.Scan(text)
	var got []string
	for _, f := range fs {
		got = append(got, f.Rule+"="+text[f.Start:f.End])
	}
	want := []string{"aws-access-token=AKIAZ7QKXJ2RW5TLM3VN", "private-key=" + strings.TrimSpace(key)}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("findings:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
