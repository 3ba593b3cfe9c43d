package policy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fullExample uses every section of the document.
const fullExample = `
sandbox:
  rootfs: /var/lib/airlock/images/debian
  workspace:
    source: /srv/repo
    mode: ro
  mounts:
    - source: /srv/cache
      target: /cache
    - source: /srv/out
      target: /out
      mode: rw
  limits:
    memory: 2G
    pids: 256
    cpus: 0.5
    disk: 1.5G
    command_timeout: 5m
    ttl: 1h
    output: 16M
  require_hard_limits: false
network:
  default: ask
  allow:
    - host: proxy.golang.org
tools:
  default: deny
  external_default: ask
  rules:
    - when: external
      action: ask
      reason: external tools need a person
  run_command:
    default: allow
    rules:
      - when: args.command.matches("^git push")
        action: ask
        reason: pushing needs a person
  write_file:
    default: allow
    rules:
      - when: '!workspace_path(args.path).startsWith("src/")'
        action: deny
        reason: only src/ may be written
  create_issue:
    external: true
  search:
    enabled: false
budgets:
  max_steps: 80
  max_tokens: 2000000
  max_wall_time: 1h
  max_sandbox_cpu_seconds: 3600
  max_egress_bytes: 1G
  max_credits: 500
approvals:
  approvers: [alice, bob]
  timeout: 5m
  on_timeout: allow
verify:
  commands: ["go test ./..."]
  changed: [src/main.go]
  only_changed: ["src/**", "go.sum"]
  timeout: 20m
artifacts: ["coverage.out", "/workspace/report/*.html"]
retries:
  model: 2
  sandbox: 0
`

func TestParseFullExample(t *testing.T) {
	doc, err := Parse([]byte(fullExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	want := Sandbox{
		RootFS:    "/var/lib/airlock/images/debian",
		Workspace: Workspace{Source: "/srv/repo", Mode: WorkspaceRO},
		Mounts:    []Mount{{Source: "/srv/cache", Target: "/cache", Mode: MountRO}, {Source: "/srv/out", Target: "/out", Mode: MountRW}},
		Limits: Limits{
			Memory: 2 << 30, Pids: 256, CPUs: 0.5, Disk: 1536 << 20, CommandTimeout: Duration(5 * time.Minute),
			TTL: Duration(time.Hour), Output: 16 << 20,
		},
	}
	if !reflect.DeepEqual(doc.Sandbox, want) {
		t.Errorf("Sandbox = %+v\nwant %+v", doc.Sandbox, want)
	}
	if doc.Network.Default != Ask || len(doc.Network.Allow) != 1 {
		t.Errorf("Network = %+v", doc.Network)
	}
	if doc.Tools.Default != Deny || doc.Tools.ExternalDefault != Ask || len(doc.Tools.Rules) != 1 || len(doc.Tools.ByName) != 4 {
		t.Errorf("Tools = %+v", doc.Tools)
	}
	if c := doc.Tools.ByName["search"]; c.Enabled {
		t.Errorf("tools.search = %+v, want disabled", c)
	}
	if c := doc.Tools.ByName["create_issue"]; !c.Enabled || !c.External {
		t.Errorf("tools.create_issue = %+v, want enabled and external", c)
	}
	wantBudgets := Budgets{MaxSteps: 80, MaxTokens: 2_000_000, MaxWallTime: Duration(time.Hour), MaxSandboxCPUSeconds: 3600, MaxEgressBytes: 1 << 30, MaxCredits: 500}
	if doc.Budgets != wantBudgets {
		t.Errorf("Budgets = %+v, want %+v", doc.Budgets, wantBudgets)
	}
	wantApprovals := Approvals{Approvers: []string{"alice", "bob"}, Timeout: Duration(5 * time.Minute), OnTimeout: Allow}
	if !reflect.DeepEqual(doc.Approvals, wantApprovals) {
		t.Errorf("Approvals = %+v, want %+v", doc.Approvals, wantApprovals)
	}
	wantVerify := Verify{Commands: []string{"go test ./..."}, Changed: []string{"src/main.go"}, OnlyChanged: []string{"src/**", "go.sum"}, Timeout: Duration(20 * time.Minute)}
	if !reflect.DeepEqual(doc.Verify, wantVerify) {
		t.Errorf("Verify = %+v, want %+v", doc.Verify, wantVerify)
	}
	if !reflect.DeepEqual(doc.Artifacts, []string{"coverage.out", "/workspace/report/*.html"}) {
		t.Errorf("Artifacts = %q", doc.Artifacts)
	}
	if doc.Retries != (Retries{Model: 2, Sandbox: 0, Recovery: 3}) {
		t.Errorf("Retries = %+v", doc.Retries)
	}
}

func TestDefault(t *testing.T) {
	d := Default()
	l := d.Sandbox.Limits
	if l.Memory != 1<<30 || l.Pids != 512 || l.CPUs != 1 || l.Disk != 1<<30 || l.CommandTimeout != Duration(10*time.Minute) || !d.Sandbox.RequireHardLimits {
		t.Errorf("Default limits = %+v", d.Sandbox)
	}
	if d.Budgets.MaxSteps != 50 || d.Budgets.MaxWallTime != Duration(30*time.Minute) {
		t.Errorf("Default budgets = %+v", d.Budgets)
	}
	if got := d.Network.Decide(Request{Host: "example.com", Port: 443}); got.Verdict != Deny {
		t.Errorf("Default network decides %+v, want deny", got)
	}
	if got := d.DecideTool(ToolRequest{Tool: "create_issue", External: true}); got.Action != Deny {
		t.Errorf("Default external tool: %+v, want deny", got)
	}
	for _, tool := range []string{"run_command", "read_file", "write_file", "edit_file", "list_dir", "search", "finish"} {
		if got := d.DecideTool(ToolRequest{Tool: tool, Args: []byte(`{}`)}); got.Action != Allow {
			t.Errorf("Default %s: %+v, want allow", tool, got)
		}
	}
	if d.Approvals.Timeout != Duration(15*time.Minute) || d.Approvals.OnTimeout != Deny {
		t.Errorf("Default approvals = %+v", d.Approvals)
	}
	// A document that says nothing is the default.
	for _, src := range []string{"{}\n", "network:\n", "sandbox: {}\ntools: {}\nbudgets:\n"} {
		doc, err := Parse([]byte(src))
		if err != nil {
			t.Fatalf("Parse(%q): %v", src, err)
		}
		if doc.Hash() != d.Hash() {
			t.Errorf("Parse(%q).Hash() = %s, Default().Hash() = %s\n%s", src, doc.Hash(), d.Hash(), doc.Canonical())
		}
	}
	// Default passes its own validation.
	if _, err := Parse(d.Canonical()); err != nil {
		t.Errorf("Parse(Default().Canonical()): %v", err)
	}
}

// TestParseDocumentErrors has one case per problem a document can have
// outside network: the exact message, its line and its hint.
func TestParseDocumentErrors(t *testing.T) {
	tests := []struct {
		name, doc string
		want      string // one of the errors, exactly
	}{
		// Structure.
		{
			"unknown section", "sandbx: {}\n",
			"policy: field sandbx not found (line 1; hint: did you mean sandbox? known keys: sandbox, network, tools, budgets, approvals, verify, artifacts, retries, llm, secrets, ports, events, mcp, retention)",
		},
		{
			"unknown key", "sandbox:\n  limits:\n    memroy: 1G\n",
			"policy: sandbox.limits: field memroy not found (line 3; hint: did you mean memory? known keys: memory, pids, cpus, disk, command_timeout, ttl, output)",
		},
		{
			"unknown key no guess", "budgets:\n  steps_max_total: 1\n",
			"policy: budgets: field steps_max_total not found (line 2; hint: known keys: max_steps, max_tokens, max_wall_time, max_sandbox_cpu_seconds, max_egress_bytes, max_credits)",
		},
		{
			"unknown rule key", "tools:\n  rules:\n    - when: 'true'\n      action: ask\n      reasons: x\n",
			"policy: tools.rules[0]: field reasons not found (line 5; hint: did you mean reason? known keys: when, action, reason)",
		},
		{
			"duplicate key", "budgets:\n  max_steps: 1\n  max_steps: 2\n",
			`policy: budgets: mapping key "max_steps" already defined at line 2 (line 3)`,
		},
		{
			"duplicate tool", "tools:\n  run_command: {}\n  run_command: {}\n",
			`policy: tools: mapping key "run_command" already defined at line 2 (line 3)`,
		},
		{
			"merge key", "x: &x {max_steps: 3}\n",
			"policy: field x not found (line 1; hint: known keys: sandbox, network, tools, budgets, approvals, verify, artifacts, retries, llm, secrets, ports, events, mcp, retention)",
		},
		{
			"merge key in section", "budgets:\n  <<: {max_steps: 3}\n",
			"policy: budgets: merge keys (<<) are not supported here (line 2; hint: write the keys out)",
		},
		{
			"unknown runtime", "sandbox:\n  runtime: kata\n",
			`policy: sandbox.runtime: "kata" is not one of native, gvisor (line 2; hint: native isolates with namespaces, seccomp and Landlock on the host's kernel; gvisor runs the sandbox on gVisor's kernel (runsc))`,
		},
		{
			"section not a mapping", "sandbox: [a]\n",
			"policy: sandbox: want a mapping, got a list (line 1; hint: known keys: rootfs, image, workspace, mounts, limits, require_hard_limits, runtime, root, sudo, static_read_only)",
		},
		{
			"unknown root", "sandbox:\n  root: rw\n",
			`policy: sandbox.root: "rw" is not one of read-only, writable (line 2; hint: read-only lets commands write only to /workspace, home and /tmp; writable lets them write anywhere, into the sandbox's own layer)`,
		},
		{
			"list not a list", "artifacts: a.txt\n",
			`policy: artifacts: want a list, got the string "a.txt" (line 1; hint: write a list, like [a, b] or one "- item" per line)`,
		},
		{
			"string not a string", "sandbox:\n  rootfs: 12\n",
			"policy: sandbox.rootfs: want a string, got the number 12 (line 2; hint: quote it if it is meant as text)",
		},
		{
			"bool not a bool", "sandbox:\n  require_hard_limits: no\n",
			`policy: sandbox.require_hard_limits: want true or false, got the string "no" (line 2; hint: write true or false)`,
		},
		{
			"int not an int", "sandbox:\n  limits:\n    pids: many\n",
			`policy: sandbox.limits.pids: want a whole number, got the string "many" (line 3; hint: write a whole number, like 10)`,
		},
		{
			"int overflow", "budgets:\n  max_tokens: 99999999999999999999\n",
			"policy: budgets.max_tokens: want a whole number, got the number 99999999999999999999 (line 2; hint: write a whole number, like 10)",
		},
		{
			"float not a number", "sandbox:\n  limits:\n    cpus: two\n",
			`policy: sandbox.limits.cpus: want a number, got the string "two" (line 3; hint: write a number, like 1 or 0.5)`,
		},
		{
			"size", "sandbox:\n  limits:\n    memory: 12Q\n",
			`policy: sandbox.limits.memory: "12Q" is not a size (line 3; hint: write bytes as an integer, or a number with a K, M, G or T suffix, like 512M or 1G)`,
		},
		{
			"size negative", "budgets:\n  max_egress_bytes: -1\n",
			"policy: budgets.max_egress_bytes: -1 is not a size (line 2; hint: write bytes as an integer, or a number with a K, M, G or T suffix, like 512M or 1G)",
		},
		{
			"size a list", "sandbox:\n  limits:\n    disk: [1]\n",
			"policy: sandbox.limits.disk: want a size, got a list (line 3; hint: write bytes as an integer, or a number with a K, M, G or T suffix, like 512M or 1G)",
		},
		{
			"duration no unit", "sandbox:\n  limits:\n    command_timeout: 600\n",
			"policy: sandbox.limits.command_timeout: 600 has no unit (line 3; hint: write a number with a unit, like 90s, 10m or 1h30m)",
		},
		{
			"duration bad", "approvals:\n  timeout: soon\n",
			`policy: approvals.timeout: "soon" is not a duration (line 2; hint: write a number with a unit, like 90s, 10m or 1h30m)`,
		},
		{
			"duration negative", "verify:\n  timeout: -1m\n",
			`policy: verify.timeout: "-1m" is negative (line 2; hint: a duration must not be negative)`,
		},
		{
			"binary not a string", "sandbox:\n  rootfs: !!binary L3g=\n",
			`policy: sandbox.rootfs: want a string, got L3g= (line 2; hint: quote it if it is meant as text)`,
		},

		// sandbox
		{
			"image and rootfs", "sandbox:\n  rootfs: /x\n  image: debian:12\n",
			`policy: sandbox.image: given with sandbox.rootfs (line 3; hint: a sandbox's root is an image or a root filesystem, not both)`,
		},
		{
			"image not a reference", "sandbox:\n  image: 'debian 12'\n",
			`policy: sandbox.image: "debian 12" is not an image reference (line 2; hint: NAME[:TAG], NAME@sha256:HEX or sha256:HEX of an image in the host's store (airlock image ls))`,
		},
		{
			"rootfs relative", "sandbox:\n  rootfs: images/debian\n",
			`policy: sandbox.rootfs: "images/debian" is not an absolute path (line 2; hint: an absolute host path of an unpacked root filesystem, or empty for the host's system directories)`,
		},
		{
			"workspace relative", "sandbox:\n  workspace:\n    source: .\n",
			`policy: sandbox.workspace.source: "." is not an absolute path (line 3; hint: an absolute host directory, or empty for an empty workspace)`,
		},
		{
			"workspace mode", "sandbox:\n  workspace:\n    mode: overlay\n",
			`policy: sandbox.workspace.mode: "overlay" is not one of cow, ro, rw (line 3; hint: cow keeps the host copy unchanged, ro shows it read-only, rw lets changes reach it)`,
		},
		{
			"mount source", "sandbox:\n  mounts:\n    - source: cache\n      target: /cache\n",
			`policy: sandbox.mounts[0].source: "cache" is not an absolute path (line 3; hint: an absolute host path)`,
		},
		{
			"mount target unclean", "sandbox:\n  mounts:\n    - source: /c\n      target: /a/../cache\n",
			`policy: sandbox.mounts[0].target: "/a/../cache" is not a clean absolute path (line 4; hint: a clean absolute path inside the sandbox, like /data)`,
		},
		{
			"mount target reserved", "sandbox:\n  mounts:\n    - source: /c\n      target: /proc/x\n",
			"policy: sandbox.mounts[0].target: /proc is reserved for the sandbox's own machinery (line 4; hint: mount somewhere else, like /mnt/data)",
		},
		{
			"mount target twice", "sandbox:\n  mounts:\n    - {source: /a, target: /m}\n    - {source: /b, target: /m}\n",
			"policy: sandbox.mounts[1].target: /m is mounted already by sandbox.mounts[0] (line 4)",
		},
		{
			"mount mode", "sandbox:\n  mounts:\n    - {source: /a, target: /m, mode: write}\n",
			`policy: sandbox.mounts[0].mode: "write" is not one of ro, rw (line 3; hint: ro (the default) or rw)`,
		},
		{
			"memory small", "sandbox:\n  limits:\n    memory: 1M\n",
			"policy: sandbox.limits.memory: 1M is below 4M, too little to start a sandbox (line 3; hint: this limit cannot be turned off; set a larger value)",
		},
		{
			"memory off", "sandbox:\n  limits:\n    memory: 0\n",
			"policy: sandbox.limits.memory: 0 is below 4M, too little to start a sandbox (line 3; hint: this limit cannot be turned off; set a larger value)",
		},
		{
			"pids", "sandbox:\n  limits:\n    pids: 0\n",
			"policy: sandbox.limits.pids: 0 out of range 4-4194304 (line 3; hint: this limit cannot be turned off; set a larger value)",
		},
		{
			"cpus", "sandbox:\n  limits:\n    cpus: 0\n",
			"policy: sandbox.limits.cpus: 0 out of range 0.01-1024 (line 3; hint: a number of CPUs, like 0.5 or 2)",
		},
		{
			"disk", "sandbox:\n  limits:\n    disk: 1K\n",
			"policy: sandbox.limits.disk: 1K is below 1M (line 3; hint: this limit cannot be turned off; set a larger value)",
		},
		{
			"command timeout", "sandbox:\n  limits:\n    command_timeout: 0s\n",
			"policy: sandbox.limits.command_timeout: must be longer than 0 (line 3; hint: this limit cannot be turned off; set a larger value)",
		},

		// tools
		{
			"tools default", "tools:\n  default: maybe\n",
			`policy: tools.default: "maybe" is not one of allow, deny, ask (line 2; hint: allow, deny or ask)`,
		},
		{
			"tools default empty", "tools:\n  default: ''\n",
			"policy: tools.default: empty (line 2; hint: allow, deny or ask)",
		},
		{
			"tools external_default", "tools:\n  external_default: yes please\n",
			`policy: tools.external_default: "yes please" is not one of allow, deny, ask (line 2; hint: allow, deny or ask)`,
		},
		{
			"tool default", "tools:\n  run_command:\n    default: permit\n",
			`policy: tools.run_command.default: "permit" is not one of allow, deny, ask (line 3; hint: allow, deny or ask)`,
		},
		{
			"misspelt reserved key", "tools:\n  defualt: allow\n",
			`policy: tools.defualt: want the settings of tool defualt, got the string "allow" (line 2; hint: did you mean default? a tool's settings are enabled, default, external and rules)`,
		},
		{
			"tool name", "tools:\n  \"run command\": {}\n",
			`policy: tools.run command: "run command" is not a tool name (line 2; hint: a tool name: letters, digits and _ . : -, at most 128)`,
		},
		{
			"tool unknown key", "tools:\n  run_command:\n    enable: false\n",
			"policy: tools.run_command: field enable not found (line 3; hint: did you mean enabled? known keys: enabled, default, external, rules)",
		},
		{
			"rule no when", "tools:\n  run_command:\n    rules:\n      - action: deny\n",
			`policy: tools.run_command.rules[0].when: missing (line 4; hint: a CEL condition, like args.command.matches("^git push"); write "true" for a rule that always matches)`,
		},
		{
			"rule no action", "tools:\n  rules:\n    - when: 'true'\n",
			"policy: tools.rules[0].action: missing (line 3; hint: allow, deny or ask)",
		},
		{
			"rule action", "tools:\n  rules:\n    - when: 'true'\n      action: block\n",
			`policy: tools.rules[0].action: "block" is not one of allow, deny, ask (line 4; hint: allow, deny or ask)`,
		},
		{
			"rule reason", "tools:\n  rules:\n    - when: 'true'\n      action: deny\n      reason: \"a\\nb\"\n",
			"policy: tools.rules[0].reason: too long or contains control characters (line 5; hint: one line of at most 1024 bytes)",
		},
		{
			"rule when too long", "tools:\n  rules:\n    - when: '" + strings.Repeat("true && ", 600) + "true'\n      action: deny\n",
			"policy: tools.rules[0].when: 4804 bytes, at most 4096 (line 3; hint: split the rule in several)",
		},

		// budgets
		{
			"max_steps", "budgets:\n  max_steps: 0\n",
			"policy: budgets.max_steps: 0 out of range 1-10000 (line 2; hint: a run needs a step budget)",
		},
		{
			"max_wall_time", "budgets:\n  max_wall_time: 0s\n",
			"policy: budgets.max_wall_time: must be longer than 0 (line 2; hint: a run needs a time budget; set a larger value)",
		},
		{
			"max_tokens", "budgets:\n  max_tokens: -5\n",
			"policy: budgets.max_tokens: -5 is negative (line 2; hint: 0 or leaving it out means no bound)",
		},
		{
			"max_credits", "budgets:\n  max_credits: -1\n",
			"policy: budgets.max_credits: -1 is negative (line 2; hint: 0 or leaving it out means no bound)",
		},
		{
			"max_sandbox_cpu_seconds", "budgets:\n  max_sandbox_cpu_seconds: -1\n",
			"policy: budgets.max_sandbox_cpu_seconds: -1 is negative (line 2; hint: 0 or leaving it out means no bound)",
		},

		// approvals
		{
			"approver empty", "approvals:\n  approvers: [alice, ' ']\n",
			`policy: approvals.approvers[1]: " " is not a user name (line 2; hint: a user name of 1 to 128 printable characters)`,
		},
		{
			"approver twice", "approvals:\n  approvers:\n    - alice\n    - alice\n",
			"policy: approvals.approvers[1]: alice is listed twice (line 4)",
		},
		{
			"approvals timeout", "approvals:\n  timeout: 0s\n",
			"policy: approvals.timeout: must be longer than 0 (line 2; hint: how long an approval waits, like 15m)",
		},
		{
			"on_timeout ask", "approvals:\n  on_timeout: ask\n",
			`policy: approvals.on_timeout: "ask" is not one of deny, allow (line 2; hint: what an unanswered approval becomes: deny (the default) or allow)`,
		},

		// verify and artifacts
		{
			"verify command empty", "verify:\n  commands: ['go test ./...', '  ']\n",
			"policy: verify.commands[1]: empty or contains NUL (line 2)",
		},
		{
			"verify changed outside", "verify:\n  changed:\n    - ../etc/passwd\n",
			`policy: verify.changed[0]: "../etc/passwd" is not a path inside /workspace (line 3; hint: a path relative to /workspace, or absolute under it)`,
		},
		{
			"verify changed root", "verify:\n  changed: [/workspace]\n",
			`policy: verify.changed[0]: "/workspace" is not a path inside /workspace (line 2; hint: a path relative to /workspace, or absolute under it)`,
		},
		{
			"verify glob", "verify:\n  only_changed: ['src/[a']\n",
			`policy: verify.only_changed[0]: "src/[a" is not a valid glob (line 2; hint: a path.Match pattern relative to /workspace, like "src/*.go" or "docs/**")`,
		},
		{
			"verify timeout", "verify:\n  timeout: 0s\n",
			"policy: verify.timeout: must be longer than 0 (line 2; hint: how long each check command may run, like 10m)",
		},
		{
			"artifact glob", "artifacts:\n  - ok.txt\n  - 'bad[x'\n",
			`policy: artifacts[1]: "bad[x" is not a valid glob (line 3; hint: a path.Match pattern relative to /workspace, like "src/*.go" or "docs/**")`,
		},
		{
			"artifact outside", "artifacts:\n  - ../../etc/passwd\n",
			`policy: artifacts[0]: "../../etc/passwd" is outside /workspace (it has a .. element) (line 2; hint: a path.Match pattern relative to /workspace, like "src/*.go" or "docs/**")`,
		},
		{
			"artifact absolute", "artifacts: ['/etc/*']\n",
			`policy: artifacts[0]: "/etc/*" is outside /workspace (line 1; hint: a path.Match pattern relative to /workspace, like "src/*.go" or "docs/**")`,
		},
		{
			"verify glob outside", "verify:\n  only_changed: ['/workspace/../x']\n",
			`policy: verify.only_changed[0]: "/workspace/../x" is outside /workspace (it has a .. element) (line 2; hint: a path.Match pattern relative to /workspace, like "src/*.go" or "docs/**")`,
		},
		{
			"too many artifacts", "artifacts: [" + strings.Repeat("a,", 64) + "a]\n",
			"policy: artifacts: 65 entries, at most 64 (line 1)",
		},

		// retries
		{
			"retries", "retries:\n  model: 11\n",
			"policy: retries.model: 11 out of range 0-10 (line 2; hint: 0 turns retries off)",
		},
		{
			"retries negative", "retries:\n  sandbox: -1\n",
			"policy: retries.sandbox: -1 out of range 0-10 (line 2; hint: 0 turns retries off)",
		},
		{
			"retries recovery", "retries:\n  recovery: 11\n",
			"policy: retries.recovery: 11 out of range 0-10 (line 2; hint: 0 turns retries off)",
		},

		// network keeps its messages and gains lines.
		{
			"network value", "network:\n  allow:\n    - host: a.example\n      ports: [99999]\n",
			"policy: network.allow[0].ports[0]: 99999 out of range 1-65535 (line 4)",
		},
		{
			"network unknown key", "network:\n  alow: []\n",
			"policy: network: field alow not found (line 2; hint: did you mean allow? known keys: default, allow, resolve, upstream_ca, credentials)",
		},
		{
			"network rule unknown key", "network:\n  allow:\n    - host: a.example\n      port: [443]\n",
			"policy: network.allow[0]: field port not found (line 4; hint: did you mean ports? known keys: host, cidr, ports, methods, paths)",
		},
		{
			"not a mapping", "- a\n- b\n",
			"policy: the document must be a mapping of sections (line 1; hint: known keys: sandbox, network, tools, budgets, approvals, verify, artifacts, retries, llm, secrets, ports, events, mcp, retention)",
		},
		{
			"syntax", "sandbox:\n  rootfs: /x\n   mounts: []\n",
			`policy: mapping values are not allowed in this context (line 3; hint: this is not valid YAML: check the indentation, and quote values that contain ": " or start with a special character)`,
		},
		{
			"tab", "sandbox:\n\trootfs: /x\n",
			`policy: found character that cannot start any token (line 2; hint: this is not valid YAML: check the indentation, and quote values that contain ": " or start with a special character)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc, err := Parse([]byte(tt.doc))
			if err == nil {
				t.Fatalf("Parse = %s, want error %q", doc.Canonical(), tt.want)
			}
			if !hasLine(err, tt.want) {
				t.Fatalf("Parse error:\n%v\nwant a line %q", err, tt.want)
			}
		})
	}
}

func hasLine(err error, want string) bool {
	for _, line := range strings.Split(err.Error(), "\n") {
		if line == want {
			return true
		}
	}
	return false
}

func TestParseReportsEveryProblem(t *testing.T) {
	doc := "sandbox:\n  limits:\n    pids: 0\n    cpus: 0\nbudgets:\n  max_steps: 0\nnetwork:\n  default: allow\n"
	_, err := Parse([]byte(doc))
	if err == nil {
		t.Fatal("Parse = nil error")
	}
	var lines []int
	for _, e := range unjoin(err) {
		var pe *Error
		if !errors.As(e, &pe) {
			t.Fatalf("error %v is not an *Error", e)
		}
		lines = append(lines, pe.Line)
	}
	if want := []int{3, 4, 6, 8}; !reflect.DeepEqual(lines, want) {
		t.Errorf("error lines = %v, want %v (sorted, one per problem):\n%v", lines, want, err)
	}
}

func TestParseErrorCap(t *testing.T) {
	doc := "approvals:\n  approvers: [" + strings.Repeat("' ', ", 80) + "' ']\n"
	_, err := Parse([]byte(doc))
	if err == nil || strings.Count(err.Error(), "\n") != maxErrors || !strings.Contains(err.Error(), "policy: 31 more problems") {
		t.Errorf("Parse error has %d lines, want %d and a count of the rest:\n%v", strings.Count(err.Error(), "\n")+1, maxErrors+1, err)
	}
}

func TestParseAliases(t *testing.T) {
	// Aliases work, within a bound.
	doc := "tools:\n  run_command: &ask\n    default: ask\n  write_file: *ask\n"
	d, err := Parse([]byte(doc))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if d.Tools.ByName["write_file"].Default != Ask {
		t.Errorf("alias: tools.write_file = %+v", d.Tools.ByName["write_file"])
	}
	// The schema has no recursive types, but one anchored list can be
	// referenced many times; the decoder stops counting at a bound.
	var b strings.Builder
	b.WriteString("tools:\n  t0:\n    rules: &r [" + strings.Repeat("{when: 'true', action: allow}, ", 2000) + "{when: 'true', action: allow}]\n")
	for i := 1; i < 300; i++ {
		fmt.Fprintf(&b, "  t%d: {rules: *r}\n", i)
	}
	_, err = Parse([]byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "the document expands to too many values") {
		t.Errorf("Parse(alias bomb) = %v, want too many values", err)
	}
}

func TestLoadNamesFileAndLine(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policy.yaml")
	if err := os.WriteFile(path, []byte("sandbox:\n  limits:\n    memory: lots\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(path)
	want := path + `:3: policy: sandbox.limits.memory: "lots" is not a size (hint: write bytes as an integer, or a number with a K, M, G or T suffix, like 512M or 1G)`
	if err == nil || err.Error() != want {
		t.Errorf("Load = %v\nwant %s", err, want)
	}
	var pe *Error
	if !errors.As(err, &pe) || pe.File != path || pe.Line != 3 || pe.Field != "sandbox.limits.memory" {
		t.Errorf("Load error = %#v", pe)
	}
}

func TestSize(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want Size
		out  string
	}{
		{"512M", 512 << 20, "512M"},
		{"1G", 1 << 30, "1G"},
		{"1GiB", 1 << 30, "1G"},
		{"1.5G", 1536 << 20, "1536M"},
		{"100", 100, "100"},
		{"2k", 2048, "2K"},
		{"1T", 1 << 40, "1T"},
		{"0", 0, "0"},
		{"1025", 1025, "1025"},
	} {
		got, err := ParseSize(tt.in)
		if err != nil || got != tt.want || got.String() != tt.out {
			t.Errorf("ParseSize(%q) = %d (%s), %v; want %d (%s)", tt.in, got, got, err, tt.want, tt.out)
		}
	}
	for _, bad := range []string{"", "M", "-1K", "1X", "1e400", "NaNK", "9999999T"} {
		if got, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) = %d, want error", bad, got)
		}
	}
}

func TestDurationString(t *testing.T) {
	for _, tt := range []struct {
		d    time.Duration
		want string
	}{
		{10 * time.Minute, "10m"},
		{time.Hour, "1h"},
		{90 * time.Minute, "1h30m"},
		{90 * time.Second, "1m30s"},
		{time.Hour + time.Second, "1h0m1s"},
		{0, "0s"},
		{1500 * time.Millisecond, "1.5s"},
	} {
		if got := Duration(tt.d).String(); got != tt.want {
			t.Errorf("Duration(%v).String() = %q, want %q", tt.d, got, tt.want)
		}
		if back, err := time.ParseDuration(Duration(tt.d).String()); err != nil || back != tt.d {
			t.Errorf("Duration(%v) does not round trip: %v, %v", tt.d, back, err)
		}
	}
}

func TestWorkspacePath(t *testing.T) {
	for _, tt := range []struct {
		in, want string
		ok       bool
	}{
		{"src/a.go", "src/a.go", true},
		{"./src//a.go", "src/a.go", true},
		{"/workspace/src/a.go", "src/a.go", true},
		{"/workspace/src/../../etc/passwd", "/etc/passwd", false},
		{"/workspace", ".", true},
		{"/workspace/", ".", true},
		{"", ".", true},
		{"src/../../x", "../x", false},
		{"..", "..", false},
		{"/workspacex/a", "/workspacex/a", false},
		{"/etc/passwd", "/etc/passwd", false},
	} {
		got, ok := WorkspacePath(tt.in)
		if got != tt.want || ok != tt.ok {
			t.Errorf("WorkspacePath(%q) = %q, %v; want %q, %v", tt.in, got, ok, tt.want, tt.ok)
		}
	}
}

// TestWorkspaceGlob: the one check of workspace globs that policy
// documents, run requests and the command line share.
func TestWorkspaceGlob(t *testing.T) {
	for _, tt := range []struct {
		in, want, err string
	}{
		{"src/*.go", "src/*.go", ""},
		{"docs/**", "docs/**", ""},
		{"/workspace/out/*.txt", "out/*.txt", ""},
		{"report.txt", "report.txt", ""},
		{"*", "*", ""},
		{"../../etc/passwd", "", "outside /workspace"},
		{"/etc/*", "", "outside /workspace"},
		{"/etc/passwd", "", "outside /workspace"},
		{"/workspace/../etc/*", "", "outside /workspace"},
		{"src/../../x", "", "outside /workspace"},
		{"src/..", "", "outside /workspace"},
		{"/workspacex/a", "", "outside /workspace"},
		{"/workspace", "", "the workspace itself"},
		{"/workspace/", "", "the workspace itself"},
		{"bad[x", "", "not a valid glob"},
		{"", "", "empty"},
		{"  ", "", "empty"},
		{"a\x00b", "", "NUL"},
	} {
		got, err := WorkspaceGlob(tt.in)
		switch {
		case tt.err == "" && (err != nil || got != tt.want):
			t.Errorf("WorkspaceGlob(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("WorkspaceGlob(%q) = %q, %v; want an error saying %q", tt.in, got, err, tt.err)
		}
	}
}

func TestMayDecide(t *testing.T) {
	for _, tt := range []struct {
		approvers, names []string
		want             bool
	}{
		{nil, []string{"alice"}, true},
		{nil, nil, true},
		{[]string{"alice"}, []string{"alice"}, true},
		{[]string{"alice"}, []string{"bob", "uid 1000"}, false},
		{[]string{"uid 1000"}, []string{"", "uid 1000"}, true},
		{[]string{"alice"}, []string{""}, false},
		{[]string{"key_01"}, []string{"key_02"}, false},
	} {
		if got := (Approvals{Approvers: tt.approvers}).MayDecide(tt.names...); got != tt.want {
			t.Errorf("Approvals{%q}.MayDecide(%q) = %t, want %t", tt.approvers, tt.names, got, tt.want)
		}
	}
}

// TestSandboxImage: an image reference parses and is kept in the
// canonical form; a document without one has the canonical form it had
// before images existed (no image key), so its hash is unchanged.
func TestSandboxImage(t *testing.T) {
	const pin = "registry.example/team/app@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	d, err := Parse([]byte("sandbox:\n  image: " + pin + "\n"))
	if err != nil {
		t.Fatalf("Parse = %v", err)
	}
	if d.Sandbox.Image != pin || !strings.Contains(string(d.Canonical()), "image: "+pin+"\n") {
		t.Errorf("image %q, canonical form:\n%s", d.Sandbox.Image, d.Canonical())
	}
	if strings.Contains(string(Default().Canonical()), "image:") {
		t.Errorf("the default's canonical form names an image:\n%s", Default().Canonical())
	}
}

// TestParseStaticReadOnly: sandbox.static_read_only is kept, in the
// document and its canonical form, and a document without it keeps its
// canonical form of before the field.
func TestParseStaticReadOnly(t *testing.T) {
	doc, err := Parse([]byte("sandbox:\n  static_read_only: true\n"))
	if err != nil || !doc.Sandbox.StaticReadOnly {
		t.Fatalf("Parse(static_read_only: true) = %+v, %v", doc, err)
	}
	if !bytes.Contains(doc.Canonical(), []byte("static_read_only: true")) {
		t.Errorf("Canonical() does not keep static_read_only:\n%s", doc.Canonical())
	}
	if bytes.Contains(Default().Canonical(), []byte("static_read_only")) {
		t.Errorf("the default document's canonical form names static_read_only:\n%s", Default().Canonical())
	}
}

// TestParseRuntime: sandbox.runtime names the runtime, and a document
// that names none keeps its canonical form (and hash) of before the field.
func TestParseRuntime(t *testing.T) {
	for _, r := range []string{RuntimeNative, RuntimeGVisor} {
		doc, err := Parse([]byte("sandbox:\n  runtime: " + r + "\n"))
		if err != nil {
			t.Fatalf("Parse(runtime: %s) = %v", r, err)
		}
		if doc.Sandbox.Runtime != r {
			t.Errorf("Parse(runtime: %s).Sandbox.Runtime = %q", r, doc.Sandbox.Runtime)
		}
		if !bytes.Contains(doc.Canonical(), []byte("runtime: "+r)) {
			t.Errorf("Canonical() of runtime %s does not keep it:\n%s", r, doc.Canonical())
		}
	}
	if bytes.Contains(Default().Canonical(), []byte("runtime")) {
		t.Errorf("the default document's canonical form names a runtime:\n%s", Default().Canonical())
	}
}
