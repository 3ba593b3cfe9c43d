package policy

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/default.canonical.yaml")

// TestCanonicalDefault pins the canonical form of the default policy: a
// change of it changes every policy hash, and must be deliberate.
func TestCanonicalDefault(t *testing.T) {
	golden := filepath.Join("testdata", "default.canonical.yaml")
	got := Default().Canonical()
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Default().Canonical() =\n%s\nwant (%s)\n%s", got, golden, want)
	}
	if h := Default().Hash(); !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(h) {
		t.Errorf("Hash() = %q", h)
	}
}

// TestHashSameMeaning: documents that differ in key order, formatting,
// comments, spelled-out defaults and host spelling have one hash.
func TestHashSameMeaning(t *testing.T) {
	base, err := Parse([]byte(fullExample))
	if err != nil {
		t.Fatal(err)
	}
	variants := map[string]string{
		"canonical":          string(base.Canonical()),
		"sections reordered": reorderSections(fullExample),
		"flow style and comments": `
# the same policy, written differently
retries: {sandbox: 0, model: 2}
artifacts: ["/workspace/report/*.html", coverage.out]
verify: {timeout: 1200s, only_changed: [go.sum, "src/**"], changed: [src/main.go], commands: ["go test ./..."]}
approvals: {on_timeout: allow, timeout: 300s, approvers: [bob, alice]}
budgets: {max_credits: 500, max_egress_bytes: 1024M, max_sandbox_cpu_seconds: 3600, max_wall_time: 60m, max_tokens: 2000000, max_steps: 80}
tools:
  search: {enabled: false}
  create_issue: {external: true, enabled: true}
  write_file:
    rules: [{action: deny, when: '!workspace_path(args.path).startsWith("src/")', reason: only src/ may be written}]
    default: allow
  run_command:
    rules:
      - reason: pushing needs a person
        action: ask
        when: args.command.matches("^git push")
    default: allow
  rules: [{when: external, action: ask, reason: external tools need a person}]
  external_default: ask
  default: deny
network: {allow: [{host: PROXY.golang.org.}], default: ask}
sandbox:
  require_hard_limits: false
  limits: {output: 16384K, ttl: 60m, command_timeout: 300s, disk: 1536M, cpus: 0.50, pids: 256, memory: 2048M}
  mounts: [{source: /srv/cache, target: /cache, mode: ro}, {source: /srv/out, target: /out, mode: rw}]
  workspace: {mode: ro, source: /srv/repo}
  rootfs: /var/lib/airlock/images/debian
`,
	}
	for name, src := range variants {
		doc, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%s: Parse: %v", name, err)
		}
		if doc.Hash() != base.Hash() {
			t.Errorf("%s: Hash() = %s, want %s\ncanonical:\n%s\nwant:\n%s", name, doc.Hash(), base.Hash(), doc.Canonical(), base.Canonical())
		}
	}
}

// reorderSections writes the top-level sections of src in reverse order.
func reorderSections(src string) string {
	var sections []string
	for _, line := range strings.Split(strings.TrimSpace(src), "\n") {
		if line != "" && line[0] != ' ' {
			sections = append(sections, "")
		}
		sections[len(sections)-1] += line + "\n"
	}
	var b strings.Builder
	for i := len(sections) - 1; i >= 0; i-- {
		b.WriteString(sections[i])
	}
	return b.String()
}

// TestHashChangesWithMeaning: any change of meaning changes the hash.
func TestHashChangesWithMeaning(t *testing.T) {
	base, err := Parse([]byte(fullExample))
	if err != nil {
		t.Fatal(err)
	}
	changes := []struct{ old, new string }{
		{"rootfs: /var/lib/airlock/images/debian", "rootfs: /var/lib/airlock/images/alpine"},
		{"    mode: ro\n  mounts:", "    mode: cow\n  mounts:"},
		{"      target: /cache\n", "      target: /cache\n      mode: rw\n"},
		{"memory: 2G", "memory: 3G"},
		{"pids: 256", "pids: 257"},
		{"cpus: 0.5", "cpus: 0.25"},
		{"command_timeout: 5m", "command_timeout: 6m"},
		{"    ttl: 1h\n", ""},
		{"    output: 16M\n", ""},
		{"require_hard_limits: false", "require_hard_limits: true"},
		{"  default: ask\n  allow:", "  default: deny\n  allow:"},
		{"host: proxy.golang.org", "host: sum.golang.org"},
		{"  default: deny\n  external_default", "  default: allow\n  external_default"},
		{"external_default: ask", "external_default: deny"},
		{"    - when: external\n      action: ask", "    - when: external\n      action: deny"},
		{`args.command.matches("^git push")`, `args.command.matches("^git pull")`},
		{"reason: pushing needs a person", "reason: pushing needs two people"},
		{"  search:\n    enabled: false\n", ""},
		{"    enabled: false", "    enabled: true"},
		{"  create_issue:\n    external: true", "  create_issue:\n    external: false"},
		{"  run_command:\n    default: allow", "  run_command:\n    default: ask"},
		{"max_steps: 80", "max_steps: 81"},
		{"max_tokens: 2000000", "max_tokens: 2000001"},
		{"max_wall_time: 1h", "max_wall_time: 2h"},
		{"max_sandbox_cpu_seconds: 3600", "max_sandbox_cpu_seconds: 3601"},
		{"max_egress_bytes: 1G", "max_egress_bytes: 2G"},
		{"max_credits: 500", "max_credits: 501"},
		{"approvers: [alice, bob]", "approvers: [alice, carol]"},
		{"  timeout: 5m", "  timeout: 6m"},
		{"on_timeout: allow", "on_timeout: deny"},
		{`commands: ["go test ./..."]`, `commands: ["go test ./...", "go vet ./..."]`},
		{"changed: [src/main.go]", "changed: [src/lib.go]"},
		{`only_changed: ["src/**", "go.sum"]`, `only_changed: ["src/**"]`},
		{"  timeout: 20m", "  timeout: 21m"},
		{`artifacts: ["coverage.out", `, `artifacts: ["cover.out", `},
		{"  model: 2", "  model: 3"},
		{"  sandbox: 0", "  sandbox: 1"},
	}
	seen := map[string]string{base.Hash(): "base"}
	for _, c := range changes {
		if !strings.Contains(fullExample, c.old) {
			t.Fatalf("fullExample has no %q", c.old)
		}
		src := strings.Replace(fullExample, c.old, c.new, 1)
		doc, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("%q -> %q: Parse: %v", c.old, c.new, err)
		}
		h := doc.Hash()
		if prev, dup := seen[h]; dup {
			t.Errorf("%q -> %q: Hash() = %s, the same as %s", c.old, c.new, h, prev)
		}
		seen[h] = c.old + " -> " + c.new
	}
}

func TestCanonicalRoundTrip(t *testing.T) {
	for _, src := range []string{fullExample, decideExample, benchPolicy, issueExample, "{}"} {
		doc, err := Parse([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		again, err := Parse(doc.Canonical())
		if err != nil {
			t.Fatalf("Parse(Canonical()) of\n%s\n: %v", doc.Canonical(), err)
		}
		if !bytes.Equal(again.Canonical(), doc.Canonical()) {
			t.Errorf("canonical form is not a fixed point:\n%s\n%s", doc.Canonical(), again.Canonical())
		}
	}
}

// TestHashOf: the policy hash of a document as given. The same document in
// another form (whitespace, key order) has one hash; the built-in default,
// which a run without a document is held to, has a real one, not the
// SHA-256 of empty input.
func TestHashOf(t *testing.T) {
	const emptyInput = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	def, err := HashOf(nil)
	if err != nil || def != Default().Hash() || def == emptyInput {
		t.Fatalf("HashOf(nil) = %s, %v; want Default().Hash() %s, not the hash of empty input", def, err, Default().Hash())
	}
	for _, doc := range []string{"{}\n", "# nothing but\n{}\n", "budgets:\n  max_steps: 50\n"} {
		if h, err := HashOf([]byte(doc)); err != nil || h != def {
			t.Errorf("HashOf(%q) = %s, %v; want the default's %s", doc, h, err, def)
		}
	}
	a, err := HashOf([]byte("budgets:\n  max_steps: 7\nsandbox:\n  limits:\n    memory: 2G\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := HashOf([]byte("sandbox: {limits: {memory: 2048M}}   # the same\nbudgets: {max_steps: 7}\n"))
	if err != nil || a != b || a == def {
		t.Errorf("HashOf(the same document in two forms) = %s and %s, %v; want one hash, not the default's", a, b, err)
	}
	if _, err := HashOf([]byte("budgets: {max_steps: -1}\n")); err == nil {
		t.Error("HashOf(a bad document) = nil error")
	}
}
