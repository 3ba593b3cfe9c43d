package policy

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// decideExample has the three example rules, and rules for the
// order and fallback cases.
const decideExample = `
tools:
  rules:
    - when: external
      action: ask
      reason: external tools need a person
    - when: run.step > 40
      action: deny
      reason: too many steps for this policy
  run_command:
    rules:
      - when: args.command.matches("^git push")
        action: ask
        reason: pushing needs a person
      - when: args.command.startsWith("git ")
        action: allow
        reason: other git commands
      - when: args.command.contains("git")
        action: deny
        reason: never reached for git commands
  write_file:
    rules:
      - when: '!workspace_path(args.path).startsWith("src/")'
        action: deny
        reason: only src/ may be written
  read_file:
    default: ask
  search:
    enabled: false
  create_issue:
    external: true
  deploy:
    external: true
    default: deny
  typed:
    rules:
      - when: args.n > 2 && args.f < 1.5 && args.ok && args.list[1] == "b" && args.obj.k == 1
        action: ask
      - when: args.missing == 1
        action: allow
      - when: args.maybe == true
        action: allow
  who:
    rules:
      - when: run.tenant == "acme" && run.task.contains("deploy") && run.tokens > 1000 && run.elapsed_seconds >= 60 && sandbox.name == "build"
        action: ask
      - when: tool == "who" && sandbox.name == ""
        action: deny
        reason: host call
`

func TestDecideTool(t *testing.T) {
	doc, err := Parse([]byte(decideExample))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	tests := []struct {
		name string
		req  ToolRequest
		want ToolDecision
	}{
		// Example: ask before run_command whose command matches ^git push.
		{
			"git push asks",
			ToolRequest{Tool: "run_command", Args: args(`{"command":"git push origin main"}`), Sandbox: "main"},
			ToolDecision{Action: Ask, Rule: "tools.run_command.rules[0]", Reason: "pushing needs a person"},
		},
		// First match wins: rule 1 allows before rule 2 could deny.
		{
			"first match wins",
			ToolRequest{Tool: "run_command", Args: args(`{"command":"git status"}`)},
			ToolDecision{Action: Allow, Rule: "tools.run_command.rules[1]", Reason: "other git commands"},
		},
		{
			"later rule",
			ToolRequest{Tool: "run_command", Args: args(`{"command":"echo git"}`)},
			ToolDecision{Action: Deny, Rule: "tools.run_command.rules[2]", Reason: "never reached for git commands"},
		},
		{
			"no rule: tools.default",
			ToolRequest{Tool: "run_command", Args: args(`{"command":"ls"}`)},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"push not at start",
			ToolRequest{Tool: "run_command", Args: args(`{"command":"echo; git push"}`)},
			ToolDecision{Action: Deny, Rule: "tools.run_command.rules[2]", Reason: "never reached for git commands"},
		},

		// Example: deny write_file outside src/.
		{
			"write in src",
			ToolRequest{Tool: "write_file", Args: args(`{"path":"src/a.go","content":"x"}`)},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"write in src absolute",
			ToolRequest{Tool: "write_file", Args: args(`{"path":"/workspace/src/x/a.go"}`)},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"write outside src",
			ToolRequest{Tool: "write_file", Args: args(`{"path":"README.md"}`)},
			ToolDecision{Action: Deny, Rule: "tools.write_file.rules[0]", Reason: "only src/ may be written"},
		},
		{
			"write escapes src",
			ToolRequest{Tool: "write_file", Args: args(`{"path":"src/../.git/config"}`)},
			ToolDecision{Action: Deny, Rule: "tools.write_file.rules[0]", Reason: "only src/ may be written"},
		},
		{
			"write outside workspace",
			ToolRequest{Tool: "write_file", Args: args(`{"path":"/workspace/../etc/src/x"}`)},
			ToolDecision{Action: Deny, Rule: "tools.write_file.rules[0]", Reason: "only src/ may be written"},
		},
		{
			"write src itself",
			ToolRequest{Tool: "write_file", Args: args(`{"path":"src"}`)},
			ToolDecision{Action: Deny, Rule: "tools.write_file.rules[0]", Reason: "only src/ may be written"},
		},

		// Example: ask for any external tool (the global rule), by the
		// document's mark or the engine's.
		{
			"external by document",
			ToolRequest{Tool: "create_issue", Args: args(`{}`)},
			ToolDecision{Action: Ask, Rule: "tools.rules[0]", Reason: "external tools need a person"},
		},
		{
			"external by request",
			ToolRequest{Tool: "http_post", External: true},
			ToolDecision{Action: Ask, Rule: "tools.rules[0]", Reason: "external tools need a person"},
		},
		{
			"tool rules before global rules",
			ToolRequest{Tool: "run_command", External: true, Args: args(`{"command":"git log"}`)},
			ToolDecision{Action: Allow, Rule: "tools.run_command.rules[1]", Reason: "other git commands"},
		},
		{
			"global rule",
			ToolRequest{Tool: "list_dir", Run: RunInfo{Step: 41}},
			ToolDecision{Action: Deny, Rule: "tools.rules[1]", Reason: "too many steps for this policy"},
		},
		{
			"global rule not matching",
			ToolRequest{Tool: "list_dir", Run: RunInfo{Step: 40}},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},

		// Defaults and switches.
		{
			"tool default",
			ToolRequest{Tool: "read_file", Args: args(`{"path":"a"}`)},
			ToolDecision{Action: Ask, Rule: "tools.read_file.default", Reason: "no rule matched; the tool's default"},
		},
		{
			"disabled",
			ToolRequest{Tool: "search", Args: args(`{"pattern":"x"}`)},
			ToolDecision{Action: Deny, Rule: "tools.search.enabled", Reason: ReasonDisabled},
		},

		// Typed arguments and run facts.
		{
			"typed args",
			ToolRequest{Tool: "typed", Args: args(`{"n":3,"f":1.25,"ok":true,"list":["a","b"],"obj":{"k":1}}`)},
			ToolDecision{Action: Ask, Rule: "tools.typed.rules[0]", Reason: "matched: args.n > 2 && args.f < 1.5 && args.ok && args.list[1] == \"b\" && args.obj.k == 1"},
		},
		{
			"int compares with double",
			ToolRequest{Tool: "typed", Args: args(`{"n":2.5,"f":1,"ok":true,"list":["a","b"],"obj":{"k":1.0}}`)},
			ToolDecision{Action: Ask, Rule: "tools.typed.rules[0]", Reason: "matched: args.n > 2 && args.f < 1.5 && args.ok && args.list[1] == \"b\" && args.obj.k == 1"},
		},
		{
			"run and sandbox",
			ToolRequest{Tool: "who", Sandbox: "build", Run: RunInfo{Tenant: "acme", Task: "deploy it", Tokens: 5000, ElapsedSeconds: 60}},
			// The condition as reason is shortened.
			ToolDecision{Action: Ask, Rule: "tools.who.rules[0]", Reason: "matched: run.tenant == \"acme\" && run.task.contains(\"deploy\") && run.tokens > 1000 && run...."},
		},
		{
			"host call",
			ToolRequest{Tool: "who", Run: RunInfo{Tenant: "acme"}},
			ToolDecision{Action: Deny, Rule: "tools.who.rules[1]", Reason: "host call"},
		},

		// A rule that cannot be evaluated denies (fail closed), even when a
		// later rule would allow.
		{
			"missing argument",
			ToolRequest{Tool: "run_command", Args: args(`{"cmd":"git push"}`)},
			ToolDecision{Action: Deny, Rule: "tools.run_command.rules[0]", Reason: "policy: the rule failed: no such key: command"},
		},
		{
			"argument of the wrong type",
			ToolRequest{Tool: "run_command", Args: args(`{"command":["git","push"]}`)},
			ToolDecision{Action: Deny, Rule: "tools.run_command.rules[0]", Reason: "policy: the rule failed: no such overload"},
		},
		{
			"not an object",
			ToolRequest{Tool: "write_file", Args: args(`"{\"path\": \"/etc/passwd\"}"`)},
			ToolDecision{Action: Deny, Rule: "tools.write_file.rules[0]", Reason: "policy: the rule failed: no such key: path"},
		},
		{
			"no arguments",
			ToolRequest{Tool: "write_file"},
			ToolDecision{Action: Deny, Rule: "tools.write_file.rules[0]", Reason: "policy: the rule failed: no such key: path"},
		},
		{
			"a bool argument",
			ToolRequest{Tool: "typed", Args: args(`{"n":0,"missing":2,"maybe":true}`)},
			ToolDecision{Action: Allow, Rule: "tools.typed.rules[2]", Reason: "matched: args.maybe == true"},
		},
		{
			"not a bool argument",
			ToolRequest{Tool: "typed", Args: args(`{"n":0,"missing":2,"maybe":"yes"}`)},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := doc.DecideTool(tt.req); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecideTool(%s %s) =\n%+v\nwant\n%+v", tt.req.Tool, tt.req.Args, got, tt.want)
			}
		})
	}
}

func args(s string) json.RawMessage { return json.RawMessage(s) }

func TestDecideToolExternalDefaults(t *testing.T) {
	for _, tt := range []struct {
		doc  string
		req  ToolRequest
		want ToolDecision
	}{
		{
			"{}",
			ToolRequest{Tool: "create_issue", External: true},
			ToolDecision{Action: Deny, Rule: "tools.external_default", Reason: "no rule matched; the default for external tools"},
		},
		{
			"tools: {external_default: ask}",
			ToolRequest{Tool: "create_issue", External: true},
			ToolDecision{Action: Ask, Rule: "tools.external_default", Reason: "no rule matched; the default for external tools"},
		},
		{
			"tools: {create_issue: {external: true}}",
			ToolRequest{Tool: "create_issue"},
			ToolDecision{Action: Deny, Rule: "tools.external_default", Reason: "no rule matched; the default for external tools"},
		},
		// The document cannot make a tool the engine calls external
		// non-external: either mark makes the call external.
		{
			"tools: {create_issue: {external: false}}",
			ToolRequest{Tool: "create_issue", External: true},
			ToolDecision{Action: Deny, Rule: "tools.external_default", Reason: "no rule matched; the default for external tools"},
		},
		{
			"tools: {create_issue: {default: allow}}",
			ToolRequest{Tool: "create_issue", External: true},
			ToolDecision{Action: Allow, Rule: "tools.create_issue.default", Reason: "no rule matched; the tool's default"},
		},
		{
			"tools: {default: deny}",
			ToolRequest{Tool: "run_command"},
			ToolDecision{Action: Deny, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"tools: {default: deny, finish: {default: allow}}",
			ToolRequest{Tool: "finish"},
			ToolDecision{Action: Allow, Rule: "tools.finish.default", Reason: "no rule matched; the tool's default"},
		},
		{
			"tools: {run_command: {enabled: false, default: allow}}",
			ToolRequest{Tool: "run_command"},
			ToolDecision{Action: Deny, Rule: "tools.run_command.enabled", Reason: ReasonDisabled},
		},
		{
			"tools: {rules: [{when: 'true', action: deny}], run_command: {enabled: true}}",
			ToolRequest{Tool: "run_command"},
			ToolDecision{Action: Deny, Rule: "tools.rules[0]", Reason: "matched: true"},
		},
	} {
		doc, err := Parse([]byte(tt.doc))
		if err != nil {
			t.Fatalf("Parse(%q): %v", tt.doc, err)
		}
		if got := doc.DecideTool(tt.req); !reflect.DeepEqual(got, tt.want) {
			t.Errorf("%s: DecideTool(%+v) = %+v, want %+v", tt.doc, tt.req, got, tt.want)
		}
	}
}

func TestToolEnabled(t *testing.T) {
	doc, err := Parse([]byte("tools: {search: {enabled: false}, run_command: {default: ask}}"))
	if err != nil {
		t.Fatal(err)
	}
	for tool, want := range map[string]bool{"search": false, "run_command": true, "unknown": true} {
		if got := doc.ToolEnabled(tool); got != want {
			t.Errorf("ToolEnabled(%q) = %v, want %v", tool, got, want)
		}
	}
}

// TestRuleErrors: a rule that does not type-check, is not a bool or may
// cost too much is an error at load, with the line of the rule.
func TestRuleErrors(t *testing.T) {
	tests := []struct {
		name, when string
		want       string
	}{
		{
			"syntax", `args.command.matches("x"`,
			`policy: tools.run_command.rules[0].when: column 25: Syntax error: missing ')' at '<EOF>'`,
		},
		{
			"undeclared", `nope == 1`,
			`policy: tools.run_command.rules[0].when: column 1: undeclared reference to 'nope'`,
		},
		{
			"unknown field", `run.stepp > 1`,
			`policy: tools.run_command.rules[0].when: column 4: undefined field 'stepp'`,
		},
		{
			"overload", `args.command.matches(1)`,
			`policy: tools.run_command.rules[0].when: column 21: found no matching overload for 'matches' applied to 'dyn.(int)'`,
		},
		{
			"types", `tool + 1 == "x"`,
			`policy: tools.run_command.rules[0].when: column 6: found no matching overload for '_+_' applied to '(string, int)'`,
		},
		{
			"not bool", `run.step + 1`,
			`policy: tools.run_command.rules[0].when: the condition is of type int, want bool`,
		},
		{
			"string", `tool`,
			`policy: tools.run_command.rules[0].when: the condition is of type string, want bool`,
		},
		{
			"an argument", `args.command`,
			`policy: tools.run_command.rules[0].when: the condition is an argument's value, of a type known only at the call (dyn), want bool`,
		},
		{
			"an argument by index", `args["force"]`,
			`policy: tools.run_command.rules[0].when: the condition is an argument's value, of a type known only at the call (dyn), want bool`,
		},
		{
			"a choice of arguments", `run.step > 1 ? args.a : args.b`,
			`policy: tools.run_command.rules[0].when: the condition is an argument's value, of a type known only at the call (dyn), want bool`,
		},
		{
			"workspace_path of int", `workspace_path(1) == "a"`,
			`policy: tools.run_command.rules[0].when: column 15: found no matching overload for 'workspace_path' applied to '(int)'`,
		},
		{
			"no now", `now() > 1`,
			`policy: tools.run_command.rules[0].when: column 4: undeclared reference to 'now'`,
		},
		{
			"static cost", `args.a.all(x, args.a.all(y, args.a.all(z, x == y)))`,
			`policy: tools.run_command.rules[0].when: the condition may cost up to `,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := fmt.Sprintf("tools:\n  run_command:\n    default: allow\n    rules:\n      - when: %s\n        action: deny\n", yamlQuote(tt.when))
			_, err := Parse([]byte(doc))
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("Parse(when: %s) = %v\nwant an error starting %q", tt.when, err, tt.want)
			}
			if !strings.Contains(err.Error(), " (line 5; hint: ") {
				t.Errorf("error %q has no line or no hint", err)
			}
		})
	}
}

func yamlQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// TestRuleErrorLineInBlock: an error on the third line of a multi-line rule
// names that line of the file.
func TestRuleErrorLineInBlock(t *testing.T) {
	doc := "tools:\n  rules:\n    - when: |\n        tool == 'a' &&\n          run.step > 1 &&\n          nope\n      action: deny\n"
	_, err := Parse([]byte(doc))
	want := "policy: tools.rules[0].when: column 3: undeclared reference to 'nope' (line 6; hint: "
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("Parse = %v, want %q", err, want)
	}
}

func TestRuleCostLimit(t *testing.T) {
	// Statically too costly: refused at load, with the estimate.
	_, err := Parse([]byte("tools:\n  rules:\n    - when: 'args.a.exists(x, args.a.exists(y, x == y))'\n      action: allow\n"))
	if err == nil || !strings.Contains(err.Error(), "more than the limit of 1000000") || !strings.Contains(err.Error(), "(line 3; hint:") {
		t.Fatalf("Parse(nested loops) = %v, want a cost error on line 3", err)
	}
	// Under the estimate for arguments of assumedSize, too costly on a
	// huge argument: the call is denied, and a later allow rule is not
	// reached.
	doc, err := Parse([]byte(`
tools:
  run_command:
    rules:
      - when: args.command.matches("^(a|b)*c[a-z]+[0-9]+(x|y|z)+$")
        action: ask
      - when: "true"
        action: allow
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	small := doc.DecideTool(ToolRequest{Tool: "run_command", Args: args(`{"command":"ababcq1x"}`)})
	if small.Action != Ask {
		t.Errorf("DecideTool(small) = %+v, want ask", small)
	}
	huge, _ := json.Marshal(map[string]string{"command": strings.Repeat("ab", 1<<20)})
	got := doc.DecideTool(ToolRequest{Tool: "run_command", Args: huge})
	want := ToolDecision{Action: Deny, Rule: "tools.run_command.rules[0]", Reason: ReasonCostLimit}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("DecideTool(2 MiB command) = %+v, want %+v", got, want)
	}
}

// TestDecideToolDeterministic: comprehensions over the arguments see their
// keys in one order, so a rule decides the same way every time.
func TestDecideToolDeterministic(t *testing.T) {
	doc, err := Parse([]byte(`
tools:
  rules:
    - when: args.map(k, k)[0] == "a" && args.obj.map(k, k) == ["x", "y", "z"]
      action: allow
    - when: "true"
      action: deny
`))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	for i := 0; i < 200; i++ {
		got := doc.DecideTool(ToolRequest{Tool: "t", Args: args(`{"d":1,"c":2,"b":3,"a":4,"obj":{"z":1,"y":2,"x":3}}`)})
		if got.Action != Allow {
			t.Fatalf("DecideTool #%d = %+v, want allow", i, got)
		}
	}
}

func TestDecideToolConcurrent(t *testing.T) {
	doc, err := Parse([]byte(decideExample))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				cmd := "git push"
				want := Ask
				if i%2 == 1 {
					cmd, want = "git status", Allow
				}
				if got := doc.DecideTool(ToolRequest{Tool: "run_command", Args: args(`{"command":"` + cmd + `"}`)}); got.Action != want {
					t.Errorf("DecideTool(%q) = %+v, want %s", cmd, got, want)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestDecideToolBuiltByHand: a Document not from Parse compiles on first
// use, concurrently, and one whose rules do not compile denies everything.
func TestDecideToolBuiltByHand(t *testing.T) {
	good := Default()
	good.Tools.ByName = map[string]ToolConfig{"run_command": {Enabled: true, Rules: []ToolRule{{When: `args.command == "x"`, Action: Deny}}}}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got := good.DecideTool(ToolRequest{Tool: "run_command", Args: args(`{"command":"x"}`)}); got.Action != Deny || got.Rule != "tools.run_command.rules[0]" {
				t.Errorf("DecideTool = %+v, want deny by rule 0", got)
			}
		}()
	}
	wg.Wait()

	bad := Default()
	bad.Tools.Rules = []ToolRule{{When: "1 +", Action: Allow}}
	want := ToolDecision{Action: Deny, Rule: "tools", Reason: "policy: the tools section is invalid"}
	if got := bad.DecideTool(ToolRequest{Tool: "finish"}); !reflect.DeepEqual(got, want) {
		t.Errorf("DecideTool on a bad document = %+v, want %+v", got, want)
	}
	var zero Document
	if got := zero.DecideTool(ToolRequest{Tool: "finish"}); !reflect.DeepEqual(got, want) {
		t.Errorf("DecideTool on a zero Document = %+v, want %+v (no defaults: invalid)", got, want)
	}
}

// benchPolicy has ten rules for run_command, of the kinds a policy has.
const benchPolicy = `
tools:
  rules:
    - when: external
      action: ask
    - when: run.step > 45
      action: deny
  run_command:
    rules:
      - when: args.command.matches("^git push")
        action: ask
      - when: args.command.matches("^(curl|wget) ")
        action: deny
      - when: args.command.contains("rm -rf /")
        action: deny
      - when: args.command.startsWith("sudo ")
        action: deny
      - when: has(args.timeout_seconds) && args.timeout_seconds > 1800
        action: ask
      - when: args.command.lowerAscii().contains("docker")
        action: deny
      - when: run.tokens > 1000000
        action: ask
      - when: sandbox.name != "main" && args.command.startsWith("make deploy")
        action: ask
`

// BenchmarkDecideTool: one decision that goes through all ten rules to the
// default, the worst case of this policy.
func BenchmarkDecideTool(b *testing.B) {
	doc, err := Parse([]byte(benchPolicy))
	if err != nil {
		b.Fatal(err)
	}
	req := ToolRequest{
		Tool: "run_command", Args: args(`{"command":"go test -race -count=1 ./internal/... 2>&1 | tail -50","timeout_seconds":600}`),
		Run: RunInfo{Tenant: "acme", Task: "fix the flaky test", Step: 12, Tokens: 48000, ElapsedSeconds: 300}, Sandbox: "main",
	}
	if got := doc.DecideTool(req); got.Rule != "tools.default" {
		b.Fatalf("DecideTool = %+v, want the default after all ten rules", got)
	}
	b.ReportAllocs()
	for b.Loop() {
		doc.DecideTool(req)
	}
}
