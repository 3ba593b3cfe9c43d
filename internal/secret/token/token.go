// Package token issues and verifies scoped run tokens: opaque random
// strings a sandbox presents to host endpoints (the LLM gateway, host
// tools). A token is bound to a tenant, run, sandbox and purpose, expires,
// and is revoked when its run or sandbox ends.
//
// Invariants: the Store holds only SHA-256 hashes of tokens, never a token;
// errors never contain a token; a token presented over another sandbox's
// socket, for another purpose, after expiry or after revocation is refused.
// Only host-side packages (host wiring, gateway, egress) import it.
package token

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// Prefix starts every token, so a leaked token is recognisable (secret
// scanners, log redaction).
const Prefix = "alk_"

// MaxTTL caps the lifetime of a token.
const MaxTTL = 24 * time.Hour

const (
	rawSize = 32
	// tokenLen is the length of a well-formed token string.
	tokenLen = len(Prefix) + 43 // base64url without padding of 32 bytes
)

// ErrInvalid is the one error Verify returns for every refused token.
var ErrInvalid = errors.New("token: invalid")

// InvalidError says why a token was refused, for the audit record. Callers
// answer the presenter with the bare ErrInvalid; the reason may reveal that
// a token exists elsewhere. It never holds the token.
type InvalidError struct {
	// Reason is one of "malformed", "unknown", "expired", "revoked",
	// "tenant_mismatch", "run_mismatch", "sandbox_mismatch",
	// "purpose_mismatch".
	Reason string
}

func (e *InvalidError) Error() string { return "token: invalid (" + e.Reason + ")" }

// Unwrap makes errors.Is(err, ErrInvalid) hold.
func (e *InvalidError) Unwrap() error { return ErrInvalid }

// Scope is what a token is bound to.
type Scope struct {
	Tenant, Run, Sandbox, Purpose string
}

// Store issues tokens and verifies them. It keeps tokens in memory only, as
// SHA-256 hashes; it is safe for concurrent use.
type Store struct {
	now func() time.Time

	mu sync.Mutex
	// entries is guarded by mu, keyed by the SHA-256 of the token string.
	entries map[[sha256.Size]byte]*entry
}

type entry struct {
	hash    [sha256.Size]byte
	scope   Scope
	expires time.Time
	// revoked entries stay until they expire, so that Verify can tell the
	// audit record "revoked" rather than "unknown".
	revoked bool
}

// NewStore returns an empty Store reading time from now (time.Now if nil).
func NewStore(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, entries: make(map[[sha256.Size]byte]*entry)}
}

// Issue returns a new token for scope, valid for ttl (capped at MaxTTL).
// Every field of scope must be set.
func (s *Store) Issue(scope Scope, ttl time.Duration) (string, error) {
	if scope.Tenant == "" || scope.Run == "" || scope.Sandbox == "" || scope.Purpose == "" {
		return "", errors.New("token: issue: tenant, run, sandbox and purpose are all required")
	}
	if ttl <= 0 {
		return "", fmt.Errorf("token: issue: ttl %v is not positive", ttl)
	}
	ttl = min(ttl, MaxTTL)
	raw := make([]byte, rawSize)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("token: issue: %w", err)
	}
	tok := Prefix + base64.RawURLEncoding.EncodeToString(raw)
	h := sha256.Sum256([]byte(tok))
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.pruneLocked(now)
	s.entries[h] = &entry{hash: h, scope: scope, expires: now.Add(ttl)}
	return tok, nil
}

// wellFormed reports whether tok has the shape Issue produces.
func wellFormed(tok string) bool {
	if len(tok) != tokenLen || !strings.HasPrefix(tok, Prefix) {
		return false
	}
	raw, err := base64.RawURLEncoding.Strict().DecodeString(tok[len(Prefix):])
	return err == nil && len(raw) == rawSize
}

// Verify checks tok and that it was presented over the socket of on: the
// token's tenant, sandbox and purpose must equal on's, and its run too when
// on.Run is set. It returns the token's scope, or an *InvalidError wrapping
// ErrInvalid. An expired token is forgotten.
func (s *Store) Verify(tok string, on Scope) (Scope, error) {
	if !wellFormed(tok) {
		return Scope{}, &InvalidError{Reason: "malformed"}
	}
	h := sha256.Sum256([]byte(tok))
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.entries[h]
	// The map lookup is on a hash of the token, which tells a timing
	// observer nothing about any valid token; the compare below is the
	// constant-time check of the token itself.
	if !ok || subtle.ConstantTimeCompare(e.hash[:], h[:]) != 1 {
		return Scope{}, &InvalidError{Reason: "unknown"}
	}
	now := s.now()
	if !now.Before(e.expires) {
		delete(s.entries, h)
		return Scope{}, &InvalidError{Reason: "expired"}
	}
	switch {
	case e.revoked:
		return Scope{}, &InvalidError{Reason: "revoked"}
	case e.scope.Tenant != on.Tenant:
		return Scope{}, &InvalidError{Reason: "tenant_mismatch"}
	case e.scope.Sandbox != on.Sandbox:
		return Scope{}, &InvalidError{Reason: "sandbox_mismatch"}
	case on.Run != "" && e.scope.Run != on.Run:
		return Scope{}, &InvalidError{Reason: "run_mismatch"}
	case e.scope.Purpose != on.Purpose:
		return Scope{}, &InvalidError{Reason: "purpose_mismatch"}
	}
	return e.scope, nil
}

// RevokeRun revokes every live token of tenant's run and returns how many.
func (s *Store) RevokeRun(tenant, run string) int {
	return s.revoke(func(sc Scope) bool { return sc.Tenant == tenant && sc.Run == run })
}

// RevokeSandbox revokes every live token of tenant's sandbox and returns
// how many.
func (s *Store) RevokeSandbox(tenant, sandbox string) int {
	return s.revoke(func(sc Scope) bool { return sc.Tenant == tenant && sc.Sandbox == sandbox })
}

func (s *Store) revoke(match func(Scope) bool) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pruneLocked(s.now())
	n := 0
	for _, e := range s.entries {
		if !e.revoked && match(e.scope) {
			e.revoked = true
			n++
		}
	}
	return n
}

// pruneLocked forgets expired tokens, revoked or not.
// Preconditions: s.mu is held.
func (s *Store) pruneLocked(now time.Time) {
	for h, e := range s.entries {
		if !now.Before(e.expires) {
			delete(s.entries, h)
		}
	}
}
