package store

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// MaxPolicyNameLen is the longest policy name, in bytes.
const MaxPolicyNameLen = 64

// PolicyVersion is one version of a tenant's named policy. Versions are
// append-only: the store keeps every one, numbered 1, 2, 3... per tenant
// and name, and names each by the content hash of its document's bytes
// (Hash). What is shown as its hash, and what a run under it records, is
// its PolicyHash: the canonical hash of the document resolved, which the
// policy package computes (the store does not parse documents).
type PolicyVersion struct {
	Tenant string
	// Name is 1 to MaxPolicyNameLen bytes of a-z, 0-9, '.', '_' and '-',
	// starting with a letter or digit (see ValidatePolicyName).
	Name string
	// Version is assigned by the store: 1 for a name's first version,
	// then one more than the name's latest.
	Version int64
	// Hash is "sha256:" and the lowercase hex SHA-256 of Document's bytes
	// (DocumentHash): the version's identity, by which PutPolicy knows a
	// document that is the name's latest already. PutPolicy fills it when
	// empty and refuses any other.
	Hash string
	// PolicyHash is the canonical hash of the document resolved
	// (policy.Document.Hash: documents that differ only in form have
	// one): the policy's hash as people and runs see it. The caller that
	// stores a document gives it; it is empty for the versions stored
	// before the stores kept it (FillPolicyHashes computes those).
	PolicyHash string
	// Document is the policy document as given, byte for byte (not
	// redacted: the hash covers it), 1 to MaxPolicyLen bytes. Listings
	// (PolicyVersions, ListPolicies) leave it nil; GetPolicy returns it.
	Document []byte
	// Source says where the document came from (a file name, "policy
	// NAME v3"...), By who stored it: printable text of at most
	// MaxNoteLen and MaxNameLen bytes, redacted like ledger notes.
	Source string
	By     string
	// CreatedAt is set by the store when the version is first stored.
	CreatedAt time.Time
}

// DocumentHash is the content hash a policy version is named by: "sha256:"
// and the lowercase hex SHA-256 of doc's bytes.
func DocumentHash(doc []byte) string {
	sum := sha256.Sum256(doc)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ValidatePolicyName returns nil when name is a valid policy name: 1 to
// MaxPolicyNameLen bytes of a-z, 0-9, '.', '_' and '-', the first a letter
// or digit. The error wraps ErrInvalid.
func ValidatePolicyName(name string) error {
	ok := name != "" && len(name) <= MaxPolicyNameLen && alnum(name[0])
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = alnum(c) || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("%w: policy name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit",
			ErrInvalid, clip(name), MaxPolicyNameLen)
	}
	return nil
}

func alnum(c byte) bool { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') }

// PolicyRef selects one version of a named policy (GetPolicy): the latest
// (both fields zero), a version number, or the newest version whose hash
// starts with a prefix.
type PolicyRef struct {
	// Version, when not 0, is the version number.
	Version int64
	// HashPrefix, when not "", is "sha256:" and 8 to 64 lowercase hex
	// digits.
	HashPrefix string
}

// String is the reference as ParsePolicyRef reads it.
func (r PolicyRef) String() string {
	switch {
	case r.Version != 0:
		return "v" + strconv.FormatInt(r.Version, 10)
	case r.HashPrefix != "":
		return r.HashPrefix
	}
	return "latest"
}

// minHashPrefix is the fewest hex digits a hash prefix may have: short
// enough to type, long enough that two versions of one name rarely share it.
const minHashPrefix = 8

// ParsePolicyRef reads GetPolicy's selector: "" for the latest version,
// "vN" for version N (N >= 1), or a hash prefix of 8 to 64 hex digits,
// with or without "sha256:" (upper case is read as lower). The error wraps
// ErrInvalid.
func ParsePolicyRef(ref string) (PolicyRef, error) {
	if ref == "" {
		return PolicyRef{}, nil
	}
	if n, ok := strings.CutPrefix(ref, "v"); ok {
		v, err := strconv.ParseInt(n, 10, 64)
		if err != nil || v < 1 || n[0] == '+' {
			return PolicyRef{}, fmt.Errorf("%w: policy version %q: want vN with N at least 1, like v2", ErrInvalid, clip(ref))
		}
		return PolicyRef{Version: v}, nil
	}
	h := strings.ToLower(ref)
	h = strings.TrimPrefix(h, "sha256:")
	ok := len(h) >= minHashPrefix && len(h) <= 64
	for i := 0; ok && i < len(h); i++ {
		ok = (h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')
	}
	if !ok {
		return PolicyRef{}, fmt.Errorf("%w: policy version %q: want vN or %d to 64 hex digits of its hash", ErrInvalid, clip(ref), minHashPrefix)
	}
	return PolicyRef{HashPrefix: "sha256:" + h}, nil
}

// PreparePolicy is for implementations of Store: it validates v for
// PutPolicy and returns it as it must be stored, Hash filled when empty,
// Source and By redacted, CreatedAt set to now (in UTC). The store assigns
// Version inside its write transaction. Errors wrap ErrInvalid and never
// quote the document.
func PreparePolicy(v PolicyVersion, now time.Time, red Redactor) (PolicyVersion, error) {
	if err := validTenant(v.Tenant); err != nil {
		return v, err
	}
	if err := ValidatePolicyName(v.Name); err != nil {
		return v, err
	}
	sum := DocumentHash(v.Document)
	switch {
	case v.Version != 0:
		return v, fmt.Errorf("%w: policy %s: version is set; the store assigns it", ErrInvalid, v.Name)
	case len(v.Document) == 0:
		return v, fmt.Errorf("%w: policy %s: the document is empty", ErrInvalid, v.Name)
	case len(v.Document) > MaxPolicyLen:
		return v, fmt.Errorf("%w: policy %s: the document is %d bytes, limit %d", ErrInvalid, v.Name, len(v.Document), MaxPolicyLen)
	case v.Hash != "" && v.Hash != sum:
		return v, fmt.Errorf("%w: policy %s: hash %q is not the document's (%s)", ErrInvalid, v.Name, clip(v.Hash), sum)
	case v.PolicyHash != "" && !validHash(v.PolicyHash):
		return v, fmt.Errorf("%w: policy %s: policy hash %q: want sha256: and 64 lowercase hex digits", ErrInvalid, v.Name, clip(v.PolicyHash))
	case len(v.Source) > MaxNoteLen || !printable(v.Source):
		return v, fmt.Errorf("%w: policy %s: source is not printable text of at most %d bytes", ErrInvalid, v.Name, MaxNoteLen)
	case len(v.By) > MaxNameLen || !printable(v.By):
		return v, fmt.Errorf("%w: policy %s: by is not printable text of at most %d bytes", ErrInvalid, v.Name, MaxNameLen)
	}
	if red == nil {
		red = NoRedaction
	}
	v.Hash = sum
	v.Source = string(red.Bytes([]byte(v.Source)))
	v.By = string(red.Bytes([]byte(v.By)))
	v.CreatedAt = now.UTC()
	return v, nil
}

// PolicyWrite is what PutPolicy must write, as DecidePolicy says.
type PolicyWrite int

// What PutPolicy writes.
const (
	// PolicyKeep: nothing; the name's latest version has the document.
	PolicyKeep PolicyWrite = iota
	// PolicyFill: the latest version has the document but no policy hash
	// (it was stored before the stores kept one): set it to the new one.
	PolicyFill
	// PolicyInsert: a new version of the name.
	PolicyInsert
)

// DecidePolicy is for implementations of Store: given v (PreparePolicy's)
// and its name's latest version (found false when the name has none),
// read under the lock that serializes the name's puts, it returns the
// version PutPolicy returns and what it must write to store it: v as the
// next version, or the latest when it has v's document (with v's policy
// hash, when it had none).
func DecidePolicy(v, latest PolicyVersion, found bool) (PolicyVersion, PolicyWrite) {
	switch {
	case !found:
		v.Version = 1
		return v, PolicyInsert
	case latest.Hash != v.Hash:
		v.Version = latest.Version + 1
		return v, PolicyInsert
	case latest.PolicyHash == "" && v.PolicyHash != "":
		latest.PolicyHash = v.PolicyHash
		return latest, PolicyFill
	}
	return latest, PolicyKeep
}

// ValidatePolicyQuery is for implementations of Store: it checks the
// tenant and name of a policy read (and ref, for GetPolicy; pass "" for
// the others) and returns the parsed ref. Errors wrap ErrInvalid.
func ValidatePolicyQuery(tenant, name, ref string) (PolicyRef, error) {
	if err := validTenant(tenant); err != nil {
		return PolicyRef{}, err
	}
	if err := ValidatePolicyName(name); err != nil {
		return PolicyRef{}, err
	}
	return ParsePolicyRef(ref)
}

// AmbiguousPolicyRef is for implementations of Store: the error of a hash
// prefix that matches versions with different hashes.
func AmbiguousPolicyRef(name string, ref PolicyRef) error {
	return fmt.Errorf("%w: policy %s: %s matches more than one hash; give more digits", ErrInvalid, name, ref)
}

// PolicyNotFound is for implementations of Store: the error of a name
// without versions, or without the version ref selects. It wraps
// ErrNotFound.
func PolicyNotFound(name string, ref PolicyRef) error {
	if ref == (PolicyRef{}) {
		return fmt.Errorf("no policy %s: %w", name, ErrNotFound)
	}
	return fmt.Errorf("policy %s has no version %s: %w", name, ref, ErrNotFound)
}

// validHash reports whether h is "sha256:" and 64 lowercase hex digits.
func validHash(h string) bool {
	x, ok := strings.CutPrefix(h, "sha256:")
	ok = ok && len(x) == 64
	for i := 0; ok && i < len(x); i++ {
		ok = (x[i] >= '0' && x[i] <= '9') || (x[i] >= 'a' && x[i] <= 'f')
	}
	return ok
}

// FillPolicyHashes sets the PolicyHash of each version in vs that has
// none (stored before the stores kept it): document reads the version's
// document and hash hashes it (policy.HashOf). A version whose document
// cannot be read or hashed now (the rules changed since) keeps its
// document's Hash, the only hash it has.
func FillPolicyHashes(vs []PolicyVersion, document func(PolicyVersion) ([]byte, error), hash func([]byte) (string, error)) {
	for i := range vs {
		v := &vs[i]
		if v.PolicyHash != "" {
			continue
		}
		v.PolicyHash = v.Hash
		doc := v.Document
		if doc == nil {
			var err error
			if doc, err = document(*v); err != nil {
				continue
			}
		}
		if h, err := hash(doc); err == nil {
			v.PolicyHash = h
		}
	}
}
