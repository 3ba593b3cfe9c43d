package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// Format is the shape of an API key string. Both carry the same 192
// random bits; they differ only in the prefix, which tells secret
// scanners and people what a leaked key is.
type Format string

const (
	// FormatAirlock keys are "airlock_" and 48 lowercase hex digits.
	FormatAirlock Format = "airlock"
	// FormatE2B keys are "e2b_" and 48 lowercase hex digits: the shape
	// the E2B Python SDK insists on (it refuses keys not matching
	// e2b_[0-9a-f]+), so E2B clients can use airlock unchanged.
	FormatE2B Format = "e2b"
)

// prefix returns the key prefix of f, or "" for an unknown format.
func (f Format) prefix() string {
	switch f {
	case FormatAirlock:
		return "airlock_"
	case FormatE2B:
		return "e2b_"
	}
	return ""
}

const (
	// keyRandom is the number of random bytes in a key: 192 bits, far
	// past guessing, so a plain SHA-256 of the key is a safe lookup key
	// (a slow password hash guards low-entropy secrets, not these).
	keyRandom = 24
	keyHex    = 2 * keyRandom
	// maxKeyLen is the longest well-formed key; anything longer is
	// refused before it is hashed.
	maxKeyLen = len("airlock_") + keyHex
	idRandom  = 8
	// touchEvery is how often Verify records a key's last use, at most.
	touchEvery = time.Minute
	// maxTouched is how many keys' last touches Keys remembers before it
	// forgets those older than touchEvery.
	maxTouched = 4096
)

// ErrUnauthenticated is the one error a caller of Verify shows the
// presenter of a key, whatever was wrong with it.
var ErrUnauthenticated = errors.New("auth: invalid API key")

// InvalidKeyError says why Verify refused a key, for the audit record.
// Callers answer the presenter with ErrUnauthenticated only: the reason
// tells whether a key exists. It never holds the key.
type InvalidKeyError struct {
	// Reason is "malformed", "unknown", "revoked" or ReasonTenantDeleted.
	Reason string
	// KeyID is the public id of a revoked key; "" otherwise.
	KeyID string
}

func (e *InvalidKeyError) Error() string {
	if e.KeyID != "" {
		return "auth: invalid API key (" + e.Reason + ", " + e.KeyID + ")"
	}
	return "auth: invalid API key (" + e.Reason + ")"
}

// ReasonTenantDeleted is the InvalidKeyError reason of a key whose
// tenant is being deleted: the key is refused from the moment the
// deletion begins, on every process sharing the store.
const ReasonTenantDeleted = "tenant deleted"

// TenantDeleted reports whether err refuses a key because its tenant is
// being deleted. Only a presenter of the real key gets this reason (the
// hash matched), so answering it tells no one anything new; it tells a
// client why its key stopped working.
func TenantDeleted(err error) bool {
	var ik *InvalidKeyError
	return errors.As(err, &ik) && ik.Reason == ReasonTenantDeleted
}

// Unwrap makes errors.Is(err, ErrUnauthenticated) hold.
func (e *InvalidKeyError) Unwrap() error { return ErrUnauthenticated }

// ParseKey returns the format of key when it is well formed: a known
// prefix and exactly 48 lowercase hex digits. Otherwise the error is an
// *InvalidKeyError with reason "malformed". It never quotes key.
func ParseKey(key string) (Format, error) {
	for _, f := range []Format{FormatAirlock, FormatE2B} {
		rest, ok := strings.CutPrefix(key, f.prefix())
		if !ok || len(rest) != keyHex {
			continue
		}
		for i := 0; i < len(rest); i++ {
			if c := rest[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
				return "", &InvalidKeyError{Reason: "malformed"}
			}
		}
		return f, nil
	}
	return "", &InvalidKeyError{Reason: "malformed"}
}

// ValidateScopes checks that every scope is one of Scopes, none twice,
// and at least one. The error wraps store.ErrInvalid.
func ValidateScopes(scopes []string) error {
	if len(scopes) == 0 {
		return fmt.Errorf("%w: an API key needs at least one scope (%s)", store.ErrInvalid, strings.Join(Scopes, ", "))
	}
	for i, s := range scopes {
		if !slices.Contains(Scopes, s) {
			return fmt.Errorf("%w: unknown scope %q: want one of %s", store.ErrInvalid, clip(s), strings.Join(Scopes, ", "))
		}
		if slices.Contains(scopes[:i], s) {
			return fmt.Errorf("%w: scope %s is given twice", store.ErrInvalid, s)
		}
	}
	return nil
}

// KeyStore is what Keys needs of the store; store.Keys satisfies it.
type KeyStore interface {
	CreateAPIKey(ctx context.Context, k store.APIKey) error
	APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error)
	TouchAPIKey(ctx context.Context, id string, at time.Time) error
}

// Keys issues and verifies tenants' API keys. It is safe for concurrent
// use.
type Keys struct {
	st  KeyStore
	now func() time.Time

	mu sync.Mutex
	// touched is guarded by mu: when Verify last recorded each key's use
	// (by key id), so a key in constant use writes once a minute, not on
	// every request.
	touched map[string]time.Time
}

// NewKeys returns Keys on st, reading time from now (time.Now if nil).
func NewKeys(st KeyStore, now func() time.Time) *Keys {
	if now == nil {
		now = time.Now
	}
	return &Keys{st: st, now: now, touched: make(map[string]time.Time)}
}

// Create makes a new API key for tenant, labelled name, holding scopes
// (ValidateScopes; kept in the order of Scopes), in format f, and stores
// its hash. It returns the key, which exists nowhere else and cannot be
// recovered, and the stored record. Bad input (an unknown format or
// scope, a malformed tenant or name) gives an error wrapping
// store.ErrInvalid, a tenant that does not exist store.ErrNotFound; no
// error holds the key.
func (k *Keys) Create(ctx context.Context, tenant, name string, scopes []string, f Format) (string, store.APIKey, error) {
	prefix := f.prefix()
	if prefix == "" {
		return "", store.APIKey{}, fmt.Errorf("auth: create API key: %w: unknown key format %q", store.ErrInvalid, clip(string(f)))
	}
	if err := ValidateScopes(scopes); err != nil {
		return "", store.APIKey{}, fmt.Errorf("auth: create API key: %w", err)
	}
	var ordered []string
	for _, s := range Scopes {
		if slices.Contains(scopes, s) {
			ordered = append(ordered, s)
		}
	}
	b := make([]byte, keyRandom+idRandom)
	if _, err := rand.Read(b); err != nil {
		return "", store.APIKey{}, fmt.Errorf("auth: create API key: %w", err)
	}
	key := prefix + hex.EncodeToString(b[:keyRandom])
	sum := sha256.Sum256([]byte(key))
	meta := store.APIKey{
		ID:        store.APIKeyIDPrefix + hex.EncodeToString(b[keyRandom:]),
		Tenant:    tenant,
		Name:      name,
		Scopes:    ordered,
		Hash:      sum[:],
		CreatedAt: k.now().UTC(),
	}
	if err := k.st.CreateAPIKey(ctx, meta); err != nil {
		return "", store.APIKey{}, fmt.Errorf("auth: create API key: %w", err)
	}
	return key, meta, nil
}

// Verify returns the principal key stands for. A malformed, unknown or
// revoked key, or one whose tenant is being deleted, gives an *InvalidKeyError, which matches ErrUnauthenticated;
// a store that fails gives an error that does not (the caller answers
// "unavailable", not "unauthenticated"). It records the key's use at most
// once a minute per key (per Keys), best effort: a failed record does not
// fail the call, and the next call tries again.
func (k *Keys) Verify(ctx context.Context, key string) (Principal, error) {
	// Checked before hashing: a huge header costs nothing.
	if _, err := ParseKey(key); err != nil {
		return Principal{}, err
	}
	sum := sha256.Sum256([]byte(key))
	meta, err := k.st.APIKeyByHash(ctx, sum[:])
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Principal{}, &InvalidKeyError{Reason: "unknown"}
	case err != nil:
		return Principal{}, fmt.Errorf("auth: verify API key: %w", err)
	}
	// The store found the row by an index on the hash, which tells a
	// timing observer nothing about any key (it would have to invert
	// SHA-256 to aim); this compare is the constant-time check that the
	// row is the key's.
	if subtle.ConstantTimeCompare(meta.Hash, sum[:]) != 1 {
		return Principal{}, &InvalidKeyError{Reason: "unknown"}
	}
	if meta.Revoked() {
		return Principal{}, &InvalidKeyError{Reason: "revoked", KeyID: meta.ID}
	}
	if !meta.TenantDeleting.IsZero() {
		return Principal{}, &InvalidKeyError{Reason: ReasonTenantDeleted, KeyID: meta.ID}
	}
	k.touch(ctx, meta.ID)
	return Principal{Tenant: meta.Tenant, KeyID: meta.ID, Scopes: slices.Clone(meta.Scopes)}, nil
}

// touch records key id's use unless Keys did within touchEvery.
func (k *Keys) touch(ctx context.Context, id string) {
	now := k.now()
	k.mu.Lock()
	last, ok := k.touched[id]
	if ok && now.Sub(last) < touchEvery && !now.Before(last) {
		k.mu.Unlock()
		return
	}
	if len(k.touched) >= maxTouched {
		for kid, t := range k.touched {
			if now.Sub(t) >= touchEvery {
				delete(k.touched, kid)
			}
		}
	}
	// Claimed before the write, so concurrent requests of one key write
	// once.
	k.touched[id] = now
	k.mu.Unlock()
	if err := k.st.TouchAPIKey(ctx, id, now); err != nil {
		k.mu.Lock()
		if k.touched[id].Equal(now) {
			if ok {
				k.touched[id] = last
			} else {
				delete(k.touched, id)
			}
		}
		k.mu.Unlock()
	}
}

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	const limit = 40
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
