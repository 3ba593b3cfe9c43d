package policy

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"slices"

	"go.yaml.in/yaml/v3"
)

// canonicalDocument is the shape Canonical writes: Document's sections in
// their order, without its compiled state.
type canonicalDocument struct {
	Sandbox   Sandbox   `yaml:"sandbox"`
	Network   Network   `yaml:"network"`
	Tools     Tools     `yaml:"tools"`
	Budgets   Budgets   `yaml:"budgets"`
	Approvals Approvals `yaml:"approvals"`
	Verify    Verify    `yaml:"verify"`
	Artifacts []string  `yaml:"artifacts"`
	Retries   Retries   `yaml:"retries"`
	// LLM is left out while it is all defaults (off, nothing listed), so
	// the hash of every document written before the section existed
	// stays the same.
	LLM LLM `yaml:"llm,omitempty"`
	// Secrets is left out while it is all defaults, for the same reason.
	Secrets *Secrets `yaml:"secrets,omitempty"`
	// Ports is left out while nothing is exposed and no limit set, for
	// the same reason.
	Ports *Ports `yaml:"ports,omitempty"`
	// Events is left out while it is all defaults, for the same reason.
	Events *Events `yaml:"events,omitempty"`
	// MCP is left out while it names no server, for the same reason.
	MCP *MCP `yaml:"mcp,omitempty"`
	// Retention is left out while it keeps everything, for the same
	// reason.
	Retention *Retention `yaml:"retention,omitempty"`
}

// Canonical returns the resolved document as YAML in one stable form:
// every section and every value that has a default written out (optional
// bounds that are off left out), keys in schema order, tools by name, the
// lists that are sets (approvers, verify.changed, verify.only_changed,
// artifacts, llm.models) sorted, the llm section left out while it is all
// defaults,
// sizes and durations in their shortest exact form, network hosts
// normalized, no comments. Parse(Canonical()) yields a document with the
// same Canonical form.
func (d *Document) Canonical() []byte {
	c := canonicalDocument{
		Sandbox: d.Sandbox, Network: d.Network, Tools: d.Tools, Budgets: d.Budgets,
		Approvals: d.Approvals, Verify: d.Verify, Artifacts: d.Artifacts, Retries: d.Retries,
		LLM: d.LLM,
	}
	if !d.Secrets.isZero() {
		sec := d.Secrets
		sec.Arguments = cmp.Or(sec.Arguments, Ask)
		sec.Results, sec.Task, sec.Patch = sec.Results.Or(SecretRedact), sec.Task.Or(SecretRedact), sec.Patch.Or(SecretRedact)
		sec.Allow, sec.Disable = sortedCopy(sec.Allow), sortedCopy(sec.Disable)
		c.Secrets = &sec
	}
	if !d.Ports.isZero() {
		ports := d.Ports
		ports.Expose = slices.Clone(ports.Expose)
		for i := range ports.Expose {
			ports.Expose[i].Access = ports.Expose[i].Access.or(AccessToken)
		}
		ports.MaxConnections = ports.Connections()
		c.Ports = &ports
	}
	if !d.Events.isZero() {
		ev := d.Events.Resolved()
		c.Events = &ev
	}
	if !d.MCP.isZero() {
		c.MCP = &d.MCP
	}
	if !d.Retention.isZero() {
		ret := d.Retention
		c.Retention = &ret
	}
	if c.Network.Default == "" {
		c.Network.Default = Deny
	}
	// These lists are sets: their order means nothing.
	c.Approvals.Approvers = sortedCopy(c.Approvals.Approvers)
	c.Verify.Changed = sortedCopy(c.Verify.Changed)
	c.Verify.OnlyChanged = sortedCopy(c.Verify.OnlyChanged)
	c.Artifacts = sortedCopy(c.Artifacts)
	c.LLM.Models = sortedCopy(c.LLM.Models)
	if c.LLM.Map == nil && !c.LLM.isZero() {
		c.LLM.Map = ModelMap{}
	}
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&c); err != nil {
		// Every field is a plain value or has a MarshalYAML that cannot
		// fail on valid input.
		panic("policy: canonical form: " + err.Error())
	}
	if err := enc.Close(); err != nil {
		panic("policy: canonical form: " + err.Error())
	}
	return b.Bytes()
}

func sortedCopy(s []string) []string {
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// Hash names the resolved document: "sha256:" and the hex SHA-256 of
// Canonical. Documents that differ only in key order, formatting, comments
// or values spelled out at their defaults have the same hash; any change of
// meaning changes it. It is the policy hash airlock shows everywhere (policy
// check, the stored versions, a run's record); the hash of a document's
// bytes only names a stored version.
func (d *Document) Hash() string {
	sum := sha256.Sum256(d.Canonical())
	return "sha256:" + hex.EncodeToString(sum[:])
}

// HashOf is the policy hash (Hash) of a policy document as given: of the
// built-in default (Default) when doc is empty, as a run without a
// document is held to it; an error when doc does not parse.
func HashOf(doc []byte) (string, error) {
	if len(doc) == 0 {
		return Default().Hash(), nil
	}
	d, err := Parse(doc)
	if err != nil {
		return "", err
	}
	return d.Hash(), nil
}
