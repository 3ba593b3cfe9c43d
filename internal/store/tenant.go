package store

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Limits on tenants and API keys.
const (
	// MaxTenantNameLen is the longest name a tenant is created with, in
	// bytes: a DNS label's length, so a tenant name fits a host name.
	MaxTenantNameLen = 63
	// MaxKeyNameLen is the longest label of an API key, in characters.
	MaxKeyNameLen = 100
	// MaxScopes is the most scopes one API key holds.
	MaxScopes = 16
	// MaxScopeLen is the longest scope name, in bytes.
	MaxScopeLen = 32
)

// APIKeyIDPrefix starts every API key's public id.
const APIKeyIDPrefix = "key_"

// apiKeyIDHex is the number of lowercase hex digits after APIKeyIDPrefix.
const apiKeyIDHex = 16

// Tenant owns runs, secrets, credits, policies and API keys; nothing
// crosses tenants. Tenants are created, never renamed or deleted, so a
// name once seen names the same tenant for good.
type Tenant struct {
	// Name is 1 to MaxTenantNameLen bytes of a-z, 0-9 and '-', starting
	// with a letter or digit (ValidateTenantName). event.LocalTenant is
	// the tenant of the command line's runs.
	Name string
	// CreatedAt is set by the store.
	CreatedAt time.Time
	// Deleting is when the tenant's deletion began (MarkTenantDeleting);
	// zero while it is not being deleted. From then on its API keys are
	// refused and no run of it is created.
	Deleting time.Time
}

// APIKey is the stored record of one API key of a tenant. The key itself
// is never stored: only its SHA-256, which is all Verify needs (a key is
// random and long, so the hash cannot be reversed or guessed, and a slow
// password hash would add nothing but latency).
type APIKey struct {
	// ID is the key's public id, APIKeyIDPrefix and 16 lowercase hex
	// digits: what listings show and what revocation names. It is not
	// the key, and knowing it grants nothing.
	ID     string
	Tenant string
	// Name is a label for people: at most MaxKeyNameLen printable
	// characters, redacted like ledger notes.
	Name string
	// Scopes are what the key may do: 1 to MaxScopes distinct names of
	// 1 to MaxScopeLen bytes of a-z, 0-9, ':', '_' and '-', starting with
	// a letter. The store checks their shape; which scopes exist is
	// package auth's to say (auth.Scopes).
	Scopes []string
	// Hash is the SHA-256 of the whole key string (sha256.Size bytes).
	Hash []byte
	// CreatedAt defaults to the store's clock when zero. LastUsedAt is
	// zero until the key is first used (TouchAPIKey), RevokedAt while the
	// key is live (RevokeAPIKey); both must be zero when it is created.
	CreatedAt, LastUsedAt, RevokedAt time.Time
	// TenantDeleting is, in a key read from the store, its tenant's
	// Deleting: non-zero once the tenant's deletion began, when the key
	// must be refused whatever it is. Never stored with the key.
	TenantDeleting time.Time
}

// Revoked reports whether the key has been revoked.
func (k APIKey) Revoked() bool { return !k.RevokedAt.IsZero() }

// ValidateTenantName returns nil when name is a name a tenant may be
// created with: 1 to MaxTenantNameLen bytes of a-z, 0-9 and '-', the first
// a letter or digit. The error wraps ErrInvalid.
func ValidateTenantName(name string) error {
	ok := name != "" && len(name) <= MaxTenantNameLen && alnum(name[0])
	for i := 0; ok && i < len(name); i++ {
		ok = alnum(name[i]) || name[i] == '-'
	}
	if !ok {
		return fmt.Errorf("%w: tenant name %q: want 1 to %d of a-z, 0-9 and '-', starting with a letter or digit",
			ErrInvalid, clip(name), MaxTenantNameLen)
	}
	return nil
}

// ValidateAPIKeyID returns nil when id has the shape of an API key's id:
// APIKeyIDPrefix and 16 lowercase hex digits. The error wraps ErrInvalid.
func ValidateAPIKeyID(id string) error {
	ok := len(id) == len(APIKeyIDPrefix)+apiKeyIDHex && strings.HasPrefix(id, APIKeyIDPrefix)
	for i := len(APIKeyIDPrefix); ok && i < len(id); i++ {
		ok = lowerHex(id[i])
	}
	if !ok {
		return fmt.Errorf("%w: API key id %q: want %s and %d lowercase hex digits", ErrInvalid, clip(id), APIKeyIDPrefix, apiKeyIDHex)
	}
	return nil
}

// ValidateKeyName checks an API key's label: at most MaxKeyNameLen
// printable characters. The error wraps ErrInvalid.
func ValidateKeyName(name string) error {
	if utf8.RuneCountInString(name) > MaxKeyNameLen || !printable(name) {
		return fmt.Errorf("%w: an API key's name must be printable text of at most %d characters", ErrInvalid, MaxKeyNameLen)
	}
	return nil
}

// ValidateScopes checks the shape of an API key's scopes (see
// APIKey.Scopes). The error wraps ErrInvalid.
func ValidateScopes(scopes []string) error {
	if len(scopes) == 0 || len(scopes) > MaxScopes {
		return fmt.Errorf("%w: an API key needs 1 to %d scopes, got %d", ErrInvalid, MaxScopes, len(scopes))
	}
	for i, s := range scopes {
		ok := s != "" && len(s) <= MaxScopeLen && s[0] >= 'a' && s[0] <= 'z'
		for j := 0; ok && j < len(s); j++ {
			ok = alnum(s[j]) || s[j] == ':' || s[j] == '_' || s[j] == '-'
		}
		if !ok {
			return fmt.Errorf("%w: scope %q: want 1 to %d of a-z, 0-9, ':', '_' and '-', starting with a letter", ErrInvalid, clip(s), MaxScopeLen)
		}
		for _, t := range scopes[:i] {
			if s == t {
				return fmt.Errorf("%w: scope %s is given twice", ErrInvalid, s)
			}
		}
	}
	return nil
}

// ValidateAPIKeyHash checks that h has the length of a SHA-256. The error
// wraps ErrInvalid.
func ValidateAPIKeyHash(h []byte) error {
	if len(h) != sha256.Size {
		return fmt.Errorf("%w: an API key hash is %d bytes, not %d", ErrInvalid, len(h), sha256.Size)
	}
	return nil
}

// PrepareTenant is for implementations of Store: it validates name for
// CreateTenant and returns the tenant as it must be stored, CreatedAt now
// (in UTC). Errors wrap ErrInvalid.
func PrepareTenant(name string, now time.Time) (Tenant, error) {
	if err := ValidateTenantName(name); err != nil {
		return Tenant{}, err
	}
	return Tenant{Name: name, CreatedAt: now.UTC()}, nil
}

// PrepareAPIKey is for implementations of Store: it validates k for
// CreateAPIKey and returns it as it must be stored: Name redacted, Scopes
// and Hash copied, CreatedAt defaulted to now (all in UTC). That the
// tenant exists is checked inside the write transaction. Errors wrap
// ErrInvalid and never quote the hash.
func PrepareAPIKey(k APIKey, now time.Time, red Redactor) (APIKey, error) {
	if err := ValidateAPIKeyID(k.ID); err != nil {
		return k, err
	}
	if err := ValidateTenantName(k.Tenant); err != nil {
		return k, fmt.Errorf("API key %s: %w", k.ID, err)
	}
	if err := ValidateScopes(k.Scopes); err != nil {
		return k, fmt.Errorf("API key %s: %w", k.ID, err)
	}
	if err := ValidateAPIKeyHash(k.Hash); err != nil {
		return k, fmt.Errorf("API key %s: %w", k.ID, err)
	}
	if err := ValidateKeyName(k.Name); err != nil {
		return k, fmt.Errorf("API key %s: %w", k.ID, err)
	}
	if !k.LastUsedAt.IsZero() || !k.RevokedAt.IsZero() {
		return k, fmt.Errorf("%w: API key %s: a new key has no last use and is not revoked", ErrInvalid, k.ID)
	}
	if k.CreatedAt.IsZero() {
		k.CreatedAt = now
	}
	if !nanoTime(k.CreatedAt) {
		return k, fmt.Errorf("%w: API key %s: creation time out of range", ErrInvalid, k.ID)
	}
	if red == nil {
		red = NoRedaction
	}
	k.Name = string(red.Bytes([]byte(k.Name)))
	k.Scopes = append([]string(nil), k.Scopes...)
	k.Hash = append([]byte(nil), k.Hash...)
	k.CreatedAt = k.CreatedAt.UTC()
	return k, nil
}

// ValidateTouch is for implementations of Store: it checks the arguments
// of TouchAPIKey. Errors wrap ErrInvalid.
func ValidateTouch(id string, at time.Time) error {
	if err := ValidateAPIKeyID(id); err != nil {
		return err
	}
	if at.IsZero() || !nanoTime(at) {
		return fmt.Errorf("%w: API key %s: last use time is zero or out of range", ErrInvalid, id)
	}
	return nil
}

// JoinScopes is for implementations of Store: the one column a key's
// scopes are stored in, space-separated (a scope holds no space).
func JoinScopes(scopes []string) string { return strings.Join(scopes, " ") }

// SplitScopes is for implementations of Store: the scopes of a column
// JoinScopes wrote.
func SplitScopes(col string) []string { return strings.Fields(col) }

// TenantNotFound is for implementations of Store: the error of a tenant
// that does not exist. It wraps ErrNotFound.
func TenantNotFound(name string) error {
	return fmt.Errorf("no tenant %s: %w", name, ErrNotFound)
}

// TenantDeletingError is for implementations of Store: the error of a
// write for a tenant whose deletion began (a run, an API key). It wraps
// ErrConflict.
func TenantDeletingError(name string) error {
	return fmt.Errorf("%w: tenant %s is being deleted", ErrConflict, name)
}

// APIKeyNotFound is for implementations of Store: the error of a key id
// that does not exist, or is another tenant's (the two must look the
// same). It wraps ErrNotFound.
func APIKeyNotFound(id string) error {
	return fmt.Errorf("no API key %s: %w", id, ErrNotFound)
}

// nanoTime reports whether t survives being stored as nanoseconds since
// 1970 (years 1678 to 2262).
func nanoTime(t time.Time) bool { return time.Unix(0, t.UnixNano()).Equal(t) }

func lowerHex(c byte) bool { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') }
