// Package policy holds the policy document and the pure decisions made from
// it. Today the document has one part, network: which destinations the
// egress proxy lets a sandbox reach, which names are pinned to which
// addresses, and which credentials the proxy injects where.
//
// Invariants: the package does no I/O except Load, keeps no state beyond the
// document, and imports nothing else from airlock, so it is cheap to test and
// fuzz. Decisions fail closed: anything not allowed by a rule is denied (or,
// with default ask, held for approval). Host names are compared only in the
// form NormalizeHost returns; Validate rewrites rule hosts to that form and
// callers pass normalized hosts to Decide.
//
// Importers: the egress proxy and its address guard, and the host wiring that
// loads the document.
package policy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"go.yaml.in/yaml/v3"
)

// MaxSize is the largest policy document Parse accepts, in bytes.
const MaxSize = 1 << 20

// Document is the policy document. Only `network` exists yet; a later issue
// adds more keys and must keep this schema. Unknown keys are an error
// (strict), with the YAML line number.
type Document struct {
	Network Network `yaml:"network"`
}

// Parse decodes a YAML policy document strictly (unknown keys, duplicate
// keys, wrong types and a second document are errors, with line numbers) and
// validates it; see Network.Validate. Documents larger than MaxSize and empty
// documents are refused.
func Parse(data []byte) (*Document, error) {
	if len(data) > MaxSize {
		return nil, fmt.Errorf("policy: document is %d bytes, limit is %d", len(data), MaxSize)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var doc Document
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("policy: empty document")
		}
		return nil, fmt.Errorf("policy: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, errors.New("policy: more than one YAML document")
	}
	if err := doc.Network.Validate(); err != nil {
		return nil, err
	}
	return &doc, nil
}

// Load reads and parses the policy document at path.
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
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return doc, nil
}
