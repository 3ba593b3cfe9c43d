package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// PolicyCmd is `airlock policy`: check a policy document, explain its
// decisions, and keep named policies with every version they had in the
// run store. check and explain need no root, sandbox or $AIRLOCK_HOME.
type PolicyCmd struct {
	Check    PolicyCheckCmd    `cmd:"" help:"Validate a policy document; print it resolved (every default filled in, canonical form) with its hash. Exit status 2 on a bad document."`
	Validate PolicyValidateCmd `cmd:"" help:"Like check, but against a server (AIRLOCK_URL) the server checks it, with its own rules (host resources); stores nothing."`
	Explain  PolicyExplainCmd  `cmd:"" help:"Show what a policy decides for one tool call, the rule that decides and why."`
	Put      PolicyPutCmd      `cmd:"" help:"Validate a policy document and store it as the next version of NAME (nothing changes when it is NAME's latest already)."`
	History  PolicyHistoryCmd  `cmd:"" help:"List the stored versions of NAME, newest first."`
	Show     PolicyShowCmd     `cmd:"" help:"Print a stored version's document: NAME (the latest), NAME@vN or NAME@HASHPREFIX."`
	Ls       PolicyLsCmd       `cmd:"" help:"List the stored policies, each at its latest version."`
	Scan     PolicyScanCmd     `cmd:"" help:"Find what looks like a credential in a text, as a run's secret scanner would (the rule and where, never the value). Exit status 1 when something is found."`
}

// PolicyCheckCmd is `airlock policy check FILE`.
type PolicyCheckCmd struct {
	File string `arg:"" help:"Policy document (YAML)." placeholder:"FILE"`
}

// Run prints "# hash: sha256:..." and then the canonical document, so the
// output is itself a policy document with the same hash.
func (c *PolicyCheckCmd) Run(env *Env) error {
	doc, err := loadPolicy(env, c.File)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "# hash: %s\n", doc.Hash())
	_, err = env.Stdout.Write(doc.Canonical())
	return err
}

// PolicyValidateCmd is `airlock policy validate FILE`.
type PolicyValidateCmd struct {
	File string `arg:"" help:"Policy document (YAML)." placeholder:"FILE"`
}

// Run prints what check prints: "# hash: sha256:..." and the canonical
// document, as this host or the server resolves it.
func (c *PolicyValidateCmd) Run(env *Env) error {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	canonical, hash, err := b.checkPolicy(env.Ctx, c.File)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "# hash: %s\n", hash)
	_, err = env.Stdout.Write(canonical)
	return err
}

// PolicyExplainCmd is `airlock policy explain FILE --tool NAME --args JSON`.
type PolicyExplainCmd struct {
	File     string        `arg:"" help:"Policy document (YAML)." placeholder:"FILE"`
	Tool     string        `required:"" help:"Name of the tool called." placeholder:"NAME"`
	Args     string        `default:"{}" help:"The call's arguments, a JSON object." placeholder:"JSON"`
	External bool          `help:"The tool is a host tool that changes the world outside the run."`
	Step     int64         `default:"1" help:"Step number of the call (run.step)."`
	Sandbox  string        `default:"main" help:"Sandbox the call targets (sandbox.name); empty for a host tool." placeholder:"NAME"`
	Tenant   string        `default:"${local_tenant}" help:"Tenant of the run (run.tenant)."`
	Task     string        `help:"Task of the run (run.task)."`
	Tokens   int64         `help:"Model tokens the run has used (run.tokens)."`
	Elapsed  time.Duration `help:"Active time the run has taken (run.elapsed_seconds), like 5m."`
	JSON     bool          `name:"json" help:"One JSON object: tool, decision, rule, reason, policy, known_tool, and warning when the tool is not one of airlock's."`
}

// explanation is the JSON form of policy explain.
type explanation struct {
	Tool     string `json:"tool"`
	Decision string `json:"decision"`
	Rule     string `json:"rule"`
	Reason   string `json:"reason"`
	Policy   string `json:"policy"`
	// KnownTool says whether airlock has a tool of that name; Warning
	// says what it means when it does not.
	KnownTool bool   `json:"known_tool"`
	Warning   string `json:"warning,omitempty"`
	// Secrets are the secret scanner's rules that found something in
	// the arguments.
	Secrets []string `json:"secrets,omitempty"`
}

// unknownToolWarning says what a decision on a tool airlock does not have
// means; "" for one of its tools.
func unknownToolWarning(tool string, d policy.ToolDecision) string {
	known := host.Tools()
	if slices.Contains(known, tool) {
		return ""
	}
	return fmt.Sprintf("airlock has no tool %q (its tools: %s): %q is what this policy would decide of a call to it, "+
		"but no such call runs in a run of airlock, whose model is told the tool is unknown", tool, strings.Join(known, ", "), d.Action)
}

// Run prints the decision, the rule and the reason, one per line, or one
// JSON object. A tool that is not one of airlock's gets a warning on
// stderr (and in the JSON): its decision is what the policy would say, of
// a call no run makes. The exit status is 0 for any decision.
func (c *PolicyExplainCmd) Run(env *Env) error {
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(c.Args), &obj); err != nil || obj == nil {
		return usageError{Err: errors.New(`--args: want a JSON object, like '{"command": "ls"}'`)}
	}
	var compact bytes.Buffer
	if err := json.Compact(&compact, []byte(c.Args)); err != nil {
		return usageError{Err: fmt.Errorf("--args: %w", err)}
	}
	if c.Step < 1 || c.Tokens < 0 || c.Elapsed < 0 {
		return usageError{Err: errors.New("--step must be at least 1; --tokens and --elapsed must not be negative")}
	}
	doc, err := loadPolicy(env, c.File)
	if err != nil {
		return err
	}
	d := doc.DecideTool(policy.ToolRequest{
		Tool: c.Tool, Args: compact.Bytes(), External: c.External, Sandbox: c.Sandbox,
		Run: policy.RunInfo{Tenant: c.Tenant, Task: c.Task, Step: c.Step, Tokens: c.Tokens, ElapsedSeconds: int64(c.Elapsed / time.Second)},
	})
	warning := unknownToolWarning(c.Tool, d)
	if warning != "" {
		fmt.Fprintf(env.Stderr, "airlock: warning: %s\n", warning)
	}
	if c.JSON {
		return json.NewEncoder(env.Stdout).Encode(explanation{
			Tool: c.Tool, Decision: string(d.Action), Rule: d.Rule, Reason: d.Reason,
			Policy: doc.Hash(), KnownTool: warning == "", Warning: warning, Secrets: d.Secrets,
		})
	}
	fmt.Fprintf(env.Stdout, "decision: %s\nrule:     %s\nreason:   %s\npolicy:   %s\n", d.Action, d.Rule, d.Reason, doc.Hash())
	if len(d.Secrets) > 0 {
		fmt.Fprintf(env.Stdout, "secrets:  %s\n", strings.Join(d.Secrets, ", "))
	}
	return nil
}

// PolicyScanCmd is `airlock policy scan [FILE]`.
type PolicyScanCmd struct {
	File   string `arg:"" optional:"" help:"Text to scan (default: standard input)." placeholder:"FILE"`
	Policy string `help:"Policy document whose secrets section (allow, disable, off) adjusts the scanner." placeholder:"FILE"`
	Rules  bool   `help:"List the scanner's rule ids instead (with --policy: those it uses)."`
	JSON   bool   `name:"json" help:"JSON lines: {rule, line, column} per finding, or {rule} per rule with --rules."`
}

// scanFinding is the JSON form of one finding of policy scan.
type scanFinding struct {
	Rule   string `json:"rule"`
	Line   int    `json:"line,omitempty"`
	Column int    `json:"column,omitempty"`
}

// Run prints each finding as LINE:COLUMN RULE, never the value; exit
// status 1 when there is one, so that a script can gate on it.
func (c *PolicyScanCmd) Run(env *Env) error {
	doc := policy.Default()
	if c.Policy != "" {
		var err error
		if doc, err = loadPolicy(env, c.Policy); err != nil {
			return err
		}
	}
	sc := doc.Scanner()
	if sc == nil {
		return usageError{Err: fmt.Errorf("%s: secrets.off: the scanner is off", c.Policy)}
	}
	if c.Rules {
		var out []scanFinding
		for _, id := range sc.Rules() {
			if !c.JSON {
				fmt.Fprintln(env.Stdout, id)
			}
			out = append(out, scanFinding{Rule: id})
		}
		if c.JSON {
			return sandboxcli.WriteJSON(env.Stdout, out...)
		}
		return nil
	}
	r := env.Stdin
	if c.File != "" && c.File != "-" {
		f, err := os.Open(c.File)
		if err != nil {
			return usageError{Err: err}
		}
		defer f.Close()
		r = f
	}
	const maxScan = 64 << 20
	b, err := io.ReadAll(io.LimitReader(r, maxScan+1))
	if err != nil {
		return fmt.Errorf("read the text: %w", err)
	}
	if len(b) > maxScan {
		return usageError{Err: fmt.Errorf("the text is larger than %d MiB: scan it in parts", maxScan>>20)}
	}
	text := string(b)
	var out []scanFinding
	for _, f := range sc.Scan(text) {
		line := strings.Count(text[:f.Start], "\n") + 1
		col := f.Start - strings.LastIndexByte(text[:f.Start], '\n')
		out = append(out, scanFinding{Rule: f.Rule, Line: line, Column: col})
		if !c.JSON {
			fmt.Fprintf(env.Stdout, "%d:%d %s\n", line, col, f.Rule)
		}
	}
	if c.JSON {
		if err := sandboxcli.WriteJSON(env.Stdout, out...); err != nil {
			return err
		}
	}
	if len(out) > 0 {
		return exitCode(1)
	}
	return nil
}

// loadPolicy loads a policy document; a bad one has its problems printed,
// one per line, and gives exit status 2, like a file that cannot be read
// (readPolicyFile).
func loadPolicy(env *Env, path string) (*policy.Document, error) {
	doc, err := readPolicyFile(path)
	var file *fs.PathError
	switch {
	case errors.As(err, &file):
		return nil, usageError{Err: err}
	case err != nil:
		fmt.Fprintln(env.Stderr, err)
		return nil, exitCode(2)
	}
	return doc, nil
}

// readPolicyFile is policy.Load, but a file that cannot be opened or read
// is the *fs.PathError that says which and why, without the policy
// package's prefix: it is not a problem of the document.
func readPolicyFile(path string) (*policy.Document, error) {
	doc, err := policy.Load(path)
	if file := (*fs.PathError)(nil); errors.As(err, &file) {
		return nil, file
	}
	return doc, err
}
