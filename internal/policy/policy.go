// Package policy holds the policy document of a run and the pure decisions
// made from it. The document says what a run may do: the sandbox it gets
// (base filesystem, workspace, mounts, resource limits), the network
// destinations the egress proxy lets it reach and the credentials the proxy
// injects, which tools the model may call and when each needs an approval,
// the run's budgets, who approves and for how long an approval waits, the
// completion checks, the artifacts kept, how often a failed model call or a
// lost sandbox is retried, and which models the sandboxes may call through
// the LLM gateway, how often and for how much, and which of a sandbox's
// ports clients may reach.
//
// A document is strict YAML: unknown keys, wrong types and impossible values
// are errors that name their line and give a hint. Parse fills every value
// the document leaves out from Default, so a parsed Document is the resolved
// policy; Canonical writes it in one stable form and Hash names it by the
// SHA-256 of that form, so two files that mean the same thing have the same
// hash and any change of meaning changes it.
//
// Invariants: the package does no I/O except Load, keeps no state beyond the
// document (and the tool rules compiled from it), and imports nothing else
// from airlock but the hostname leaf, so it is cheap to test and fuzz. Decisions fail closed:
// anything not allowed by a rule is denied (or, with default ask, held for
// approval), and a tool rule that cannot be evaluated denies. Host names are
// compared only in the form hostname.Normalize returns; Validate rewrites rule
// hosts to that form and callers pass normalized hosts to Decide.
//
// Importers: the egress proxy (internal/egress), the LLM gateway
// (internal/gateway), the run engine's policy hook (internal/engine), the
// APIs (internal/server, internal/e2b, internal/mcp), the run's MCP clients
// (internal/mcpclient: a server's settings), host wiring that loads the
// document (internal/host), the command line (internal/cli), template
// documents' limits (internal/template), the check of what sandboxes report
// (internal/report), the code interpreter's built-in template's readiness
// timeout (internal/interp), the port relay's bounds (internal/portproxy),
// and bench/egressbench.
package policy

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"go.yaml.in/yaml/v3"
)

// MaxSize is the largest policy document Parse accepts, in bytes.
const MaxSize = 1 << 20

// Document is a resolved policy document: what the file said, with every
// value it left out filled from Default. Parse, Load and Default return
// documents ready for every decision. A Document must not be copied, and
// must not be changed once DecideTool has been called (the tool rules are
// compiled once and kept).
type Document struct {
	// Sandbox is the execution environment of the run's sandboxes.
	Sandbox Sandbox `yaml:"sandbox"`
	// Network is what the sandboxes may reach through the egress proxy.
	Network Network `yaml:"network"`
	// Tools says which tools the model may call, and when.
	Tools Tools `yaml:"tools"`
	// Budgets end the run when spent.
	Budgets Budgets `yaml:"budgets"`
	// Approvals say who answers an "ask" and how long it waits.
	Approvals Approvals `yaml:"approvals"`
	// Verify are the completion checks, run after the model is done and
	// independent of what it says.
	Verify Verify `yaml:"verify"`
	// Artifacts are globs of workspace files kept after verification
	// (relative to /workspace, or absolute under it; "dir/**" matches
	// everything below dir).
	Artifacts []string `yaml:"artifacts"`
	// Retries bound automatic retries.
	Retries Retries `yaml:"retries"`
	// LLM is what the LLM gateway lets the run's sandboxes call (off by
	// default).
	LLM LLM `yaml:"llm"`
	// Secrets says what happens to credentials the host was never given
	// that show up in a task, a call's arguments, a result or a patch.
	Secrets Secrets `yaml:"secrets"`
	// Ports says which of a sandbox's ports clients may reach, who may,
	// and how much (nothing by default).
	Ports Ports `yaml:"ports"`
	// Events bounds what sandboxes report through their event channel.
	Events Events `yaml:"events"`
	// MCP names the MCP servers whose tools the model may call (none by
	// default).
	MCP MCP `yaml:"mcp"`
	// Retention says how long the run's content is kept after it ended
	// (forever by default; a tenant's rule may be shorter).
	Retention Retention `yaml:"retention"`

	compiled atomic.Pointer[toolPolicy]
}

// Default returns the built-in policy: what a document that says nothing
// means. It is strict: no network at all, host tools marked external are
// denied (tools.external_default: deny) while the built-in sandbox tools and
// finish are allowed, hard limits of 1G memory, 512 pids, 1 CPU and 1G disk
// are required, a command runs at most 10 minutes, and a run gets 50 steps
// and 30 minutes. An approval waits 15 minutes and is then denied.
func Default() *Document {
	return &Document{
		Sandbox: Sandbox{
			Workspace: Workspace{Mode: WorkspaceCOW},
			Limits: Limits{
				Memory: 1 << 30, Pids: 512, CPUs: 1, Disk: 1 << 30,
				CommandTimeout: Duration(10 * time.Minute),
			},
			RequireHardLimits: true,
		},
		Tools:     Tools{Default: Allow, ExternalDefault: Deny, MCPDefault: Deny},
		Budgets:   Budgets{MaxSteps: 50, MaxWallTime: Duration(30 * time.Minute)},
		Approvals: Approvals{Timeout: Duration(15 * time.Minute), OnTimeout: Deny},
		Verify:    Verify{Timeout: Duration(10 * time.Minute)},
		Retries:   Retries{Model: 4, Sandbox: 1, Recovery: 3},
	}
}

// rawDocument is the first, strict pass over a document: the network
// section decodes as it always has (by the YAML library, strictly), the
// other sections are kept as nodes for the second pass.
type rawDocument struct {
	Sandbox   yaml.Node `yaml:"sandbox"`
	Network   Network   `yaml:"network"`
	Tools     yaml.Node `yaml:"tools"`
	Budgets   yaml.Node `yaml:"budgets"`
	Approvals yaml.Node `yaml:"approvals"`
	Verify    yaml.Node `yaml:"verify"`
	Artifacts yaml.Node `yaml:"artifacts"`
	Retries   yaml.Node `yaml:"retries"`
	LLM       yaml.Node `yaml:"llm"`
	Secrets   yaml.Node `yaml:"secrets"`
	Ports     yaml.Node `yaml:"ports"`
	Events    yaml.Node `yaml:"events"`
	MCP       yaml.Node `yaml:"mcp"`
	Retention yaml.Node `yaml:"retention"`
}

// Parse decodes a YAML policy document strictly and validates it. Unknown
// and duplicate keys, wrong types, impossible values, tool rules that do
// not compile to a bool or cost too much, and a second YAML document are
// errors; Parse reports every one it finds, each an *Error with its line
// and, where it helps, a hint, joined with errors.Join. Documents larger
// than MaxSize and empty documents are refused. Values the document leaves
// out are filled from Default.
func Parse(data []byte) (*Document, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("policy: document is %d bytes, limit is %d", len(data), MaxSize)
	}
	var root yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&root); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("policy: empty document")
		}
		return nil, joinErrors(newIndex(&root).fromYAML(err))
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("policy: more than one YAML document")
	}
	ix := newIndex(&root)

	// The YAML library goes on after a type error (an unknown key, a
	// value of the wrong type): what it could decode is in raw, and the
	// rest of the document is still checked, so that every problem is
	// reported at once.
	p := &problems{ix: ix}
	var raw rawDocument
	strict := yaml.NewDecoder(bytes.NewReader(data))
	strict.KnownFields(true)
	if err := strict.Decode(&raw); err != nil {
		var te *yaml.TypeError
		if !errors.As(err, &te) {
			return nil, joinErrors(ix.fromYAML(err))
		}
		p.errs = append(p.errs, ix.fromYAML(err)...)
	}

	doc := Default()
	doc.Network = raw.Network
	var d decoder
	for _, s := range []struct {
		name string
		node *yaml.Node
		dst  any
	}{
		{"sandbox", &raw.Sandbox, &doc.Sandbox},
		{"tools", &raw.Tools, &doc.Tools},
		{"budgets", &raw.Budgets, &doc.Budgets},
		{"approvals", &raw.Approvals, &doc.Approvals},
		{"verify", &raw.Verify, &doc.Verify},
		{"artifacts", &raw.Artifacts, &doc.Artifacts},
		{"retries", &raw.Retries, &doc.Retries},
		{"llm", &raw.LLM, &doc.LLM},
		{"secrets", &raw.Secrets, &doc.Secrets},
		{"ports", &raw.Ports, &doc.Ports},
		{"events", &raw.Events, &doc.Events},
		{"mcp", &raw.MCP, &doc.MCP},
		{"retention", &raw.Retention, &doc.Retention},
	} {
		if s.node.Kind != 0 {
			d.decode(s.node, s.name, reflect.ValueOf(s.dst).Elem())
		}
	}
	// A value that did not decode kept its default, which validates: the
	// checks below report only problems of their own.
	p.errs = append(p.errs, d.errs...)
	if err := doc.Network.Validate(); err != nil {
		for _, e := range unjoin(err) {
			var fe *fieldError
			if errors.As(e, &fe) {
				p.errs = append(p.errs, &Error{Line: ix.line(fe.field), Field: fe.field, Msg: fe.msg})
			} else {
				p.errs = append(p.errs, &Error{Msg: e.Error()})
			}
		}
	}
	doc.validate(p)
	tp := compileTools(doc, p)
	compileEventRules(p, doc.Events.Rules)
	if len(p.errs) > 0 {
		return nil, joinErrors(p.errs)
	}
	doc.compiled.Store(tp)
	return doc, nil
}

// Load reads and parses the policy document at path. Every *Error it
// returns names the file.
func Load(path string) (*Document, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("policy: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSize+1))
	if err != nil {
		return nil, fmt.Errorf("policy: read %s: %w", path, err)
	}
	doc, err := Parse(data)
	if err != nil {
		located := false
		for _, e := range unjoin(err) {
			var pe *Error
			if errors.As(e, &pe) {
				pe.File, located = path, true
			}
		}
		if located {
			return nil, err
		}
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}

// joinErrors sorts errs by line (errors without a line first), keeps the
// first maxErrors and joins them.
func joinErrors(errs []*Error) error {
	slices.SortStableFunc(errs, func(a, b *Error) int { return cmp.Compare(a.Line, b.Line) })
	out := make([]error, 0, min(len(errs), maxErrors)+1)
	for i, e := range errs {
		if i == maxErrors {
			out = append(out, fmt.Errorf("policy: %d more problems", len(errs)-maxErrors))
			break
		}
		out = append(out, e)
	}
	return errors.Join(out...)
}

// Problems returns the located problems an error of Parse or Load holds,
// in order, as copies a caller may change (to drop a line that means
// nothing to its reader, say); none for another error.
func Problems(err error) []*Error {
	var out []*Error
	for _, e := range unjoin(err) {
		var pe *Error
		if errors.As(e, &pe) {
			c := *pe
			out = append(out, &c)
		}
	}
	return out
}

// unjoin returns the errors errors.Join put together, or err alone.
func unjoin(err error) []error {
	var j interface{ Unwrap() []error }
	if errors.As(err, &j) {
		return j.Unwrap()
	}
	return []error{err}
}
