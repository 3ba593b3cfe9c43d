package store

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// SealedSecret is one policy credential as the store keeps it: sealed by
// the secret package (AES-256-GCM under a key the store never sees, its
// additional data binding Tenant, Name and Hosts), with the check of the
// key that sealed it. The store holds no value in clear and cannot open
// one; it keeps what it is given.
type SealedSecret struct {
	Tenant, Name string
	// Hosts are the normalized host patterns the value is bound to.
	Hosts            []string
	Created, Updated time.Time
	// KeyCheck identifies the key that sealed the value (derived from it
	// apart from the sealing key): every secret of a store is sealed
	// under one key.
	KeyCheck, Nonce, Ciphertext []byte
}

// Secrets keeps the policy credentials (the secret package's Store) where
// every server on the store finds them: a credential added through one
// replica is injected by the egress proxy of any other.
type Secrets interface {
	// PutSecret stores s, replacing tenant's secret of that name. When
	// a stored secret carries another KeyCheck, nothing is stored and
	// the error wraps ErrConflict: one store, one key.
	PutSecret(ctx context.Context, s SealedSecret) error
	// SealedSecret returns tenant's secret name; ErrNotFound if none.
	SealedSecret(ctx context.Context, tenant, name string) (SealedSecret, error)
	// ListSecrets returns tenant's secrets sorted by name.
	ListSecrets(ctx context.Context, tenant string) ([]SealedSecret, error)
	// DeleteSecret deletes tenant's secret name; ErrNotFound if none.
	DeleteSecret(ctx context.Context, tenant, name string) error
}

// Bounds of a SealedSecret the stores check (the secret package's own,
// with room: a value of at most 64 KiB sealed with a 16-byte tag).
const (
	maxSealedBytes = 64<<10 + 16
	maxSecretHosts = 1024
)

// CheckSealedSecret refuses a secret a store must not keep.
func CheckSealedSecret(s SealedSecret) error {
	switch {
	case ValidateTenant(s.Tenant) != nil:
		return fmt.Errorf("%w: secret: tenant %q", ErrInvalid, clip(s.Tenant))
	case s.Name == "" || len(s.Name) > 128:
		return fmt.Errorf("%w: secret: name %q", ErrInvalid, clip(s.Name))
	case len(s.KeyCheck) == 0 || len(s.KeyCheck) > 64 || len(s.Nonce) == 0 || len(s.Nonce) > 64:
		return fmt.Errorf("%w: secret %s: key check and nonce required", ErrInvalid, clip(s.Name))
	case len(s.Ciphertext) == 0 || len(s.Ciphertext) > maxSealedBytes:
		return fmt.Errorf("%w: secret %s: ciphertext of %d bytes", ErrInvalid, clip(s.Name), len(s.Ciphertext))
	case len(s.Hosts) > maxSecretHosts || slices.Contains(s.Hosts, ""):
		return fmt.Errorf("%w: secret %s: hosts", ErrInvalid, clip(s.Name))
	case s.Created.IsZero() || s.Updated.Before(s.Created):
		return fmt.Errorf("%w: secret %s: want created <= updated", ErrInvalid, clip(s.Name))
	}
	return nil
}
