package policy

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// A realistic fake token of each shape the tests use (never a real one).
var (
	fakeGitHubPAT = "ghp_" + "Zq7RkW2mXb9TcV4nLp8YsJ3dHf6GaQ1uEo5i"
	fakeAWSKey    = "AKIA" + "Z7QKXJ2RW5TLM3VN"
)

func TestDecideToolSecrets(t *testing.T) {
	cmd := func(c string) json.RawMessage {
		b, _ := json.Marshal(map[string]any{"command": c, "env": []string{"A=1"}})
		return b
	}
	withPAT := cmd("GH_TOKEN=" + fakeGitHubPAT + " gh api user")
	tests := []struct {
		name string
		doc  string
		req  ToolRequest
		want ToolDecision
	}{
		{
			"clean arguments keep the tools' decision", ``,
			ToolRequest{Tool: "run_command", Args: cmd("go test ./...")},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"a token in the arguments asks by default", ``,
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Ask, Rule: "secrets.arguments", Reason: "the arguments carry what looks like a secret (github-pat)", Secrets: []string{"github-pat"}},
		},
		{
			"found in a nested value", ``,
			ToolRequest{Tool: "write_file", Args: json.RawMessage(`{"path":"a.env","files":[{"content":"AWS_ACCESS_KEY_ID=` + fakeAWSKey + `"}]}`)},
			ToolDecision{Action: Ask, Rule: "secrets.arguments", Reason: "the arguments carry what looks like a secret (aws-access-token)", Secrets: []string{"aws-access-token"}},
		},
		{
			"secrets.arguments deny", "secrets:\n  arguments: deny\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Deny, Rule: "secrets.arguments", Reason: "the arguments carry what looks like a secret (github-pat)", Secrets: []string{"github-pat"}},
		},
		{
			"a secrets rule allows: the tools' decision stands", "secrets:\n  rules:\n    - when: tool == 'run_command' && secrets.all(s, s == 'github-pat')\n      action: allow\n      reason: the gh CLI needs it\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools", Secrets: []string{"github-pat"}},
		},
		{
			"a secrets rule cannot loosen a tools ask", "tools:\n  run_command:\n    default: ask\nsecrets:\n  rules:\n    - when: 'true'\n      action: allow\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Ask, Rule: "tools.run_command.default", Reason: "no rule matched; the tool's default", Secrets: []string{"github-pat"}},
		},
		{
			"a tools deny stays a deny", "tools:\n  run_command:\n    default: deny\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Deny, Rule: "tools.run_command.default", Reason: "no rule matched; the tool's default"},
		},
		{
			"tools rules see secrets", "tools:\n  rules:\n    - when: size(secrets) > 0 && tool == 'write_file'\n      action: deny\n      reason: no credentials in files\n",
			ToolRequest{Tool: "write_file", Args: json.RawMessage(`{"path":"x","content":"` + fakeGitHubPAT + `"}`)},
			ToolDecision{Action: Deny, Rule: "tools.rules[0]", Reason: "no credentials in files"},
		},
		{
			"allow pattern", "secrets:\n  allow: ['^ghp_Zq7R']\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"disabled rule", "secrets:\n  disable: [github-pat, generic-api-key]\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
		{
			"scanner off", "secrets:\n  off: true\n",
			ToolRequest{Tool: "run_command", Args: withPAT},
			ToolDecision{Action: Allow, Rule: "tools.default", Reason: "no rule matched; the default for tools"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := Default()
			if tt.doc != "" {
				var err error
				if doc, err = Parse([]byte(tt.doc)); err != nil {
					t.Fatal(err)
				}
			}
			if got := doc.DecideTool(tt.req); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("DecideTool = %+v\nwant         %+v", got, tt.want)
			}
		})
	}
}

func TestParseSecretsErrors(t *testing.T) {
	for _, tt := range []struct{ doc, want string }{
		{"secrets:\n  arguments: maybe\n", `secrets.arguments: "maybe" is not one of allow, deny, ask`},
		{"secrets:\n  results: drop\n", `secrets.results: "drop" is not an action`},
		{"secrets:\n  patch: refuse\n", `secrets.patch: "refuse" is not an action`},
		{"secrets:\n  allow: ['(']\n", `secrets.allow[0]: "(" does not compile`},
		{"secrets:\n  disable: [no-such-rule]\n", `secrets.disable[0]: no rule "no-such-rule"`},
		{"secrets:\n  rules:\n    - when: secrets\n      action: allow\n", `secrets.rules[0].when`},
		{"secrets:\n  redact: true\n", `field redact not found`},
	} {
		_, err := Parse([]byte(tt.doc))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Parse(%q) = %v, want an error with %q", tt.doc, err, tt.want)
		}
	}
}

// TestCanonicalSecrets: a document without a secrets section hashes as
// before the section existed; one with it writes its defaults out and
// round-trips.
func TestCanonicalSecrets(t *testing.T) {
	if strings.Contains(string(Default().Canonical()), "secrets") {
		t.Errorf("the default document's canonical form names secrets:\n%s", Default().Canonical())
	}
	doc, err := Parse([]byte("secrets:\n  task: refuse\n  disable: [jwt, generic-api-key]\n"))
	if err != nil {
		t.Fatal(err)
	}
	c := string(doc.Canonical())
	for _, want := range []string{"arguments: ask", "results: redact", "task: refuse", "patch: redact", "- generic-api-key\n    - jwt"} {
		if !strings.Contains(c, want) {
			t.Errorf("canonical form lacks %q:\n%s", want, c)
		}
	}
	again, err := Parse(doc.Canonical())
	if err != nil {
		t.Fatal(err)
	}
	if string(again.Canonical()) != c {
		t.Errorf("canonical form does not round-trip:\n%s\nthen\n%s", c, again.Canonical())
	}
}
