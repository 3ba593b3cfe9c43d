package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// The policy credentials of store.Secrets, written once over Tx for both
// dialects.

const secretColumns = `tenant, name, hosts, created_ns, updated_ns, key_check, nonce, ciphertext`

// PutSecret implements store.Secrets.PutSecret in tx. On PostgreSQL two
// puts of different keys at once could each find the other's absent; a
// transaction-scoped advisory lock orders them. SQLite has one writer.
func (d Dialect) PutSecret(ctx context.Context, tx Tx, s store.SealedSecret) error {
	if d == Postgres {
		if err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(`+d.Param(1)+`)`, secretsLock); err != nil {
			return fmt.Errorf("secret: lock: %w", err)
		}
	}
	var other []byte
	err := d.queryOne(ctx, tx, `SELECT key_check FROM secrets WHERE key_check <> `+d.Param(1)+` LIMIT 1`, []any{s.KeyCheck}, &other)
	switch {
	case err == nil:
		return fmt.Errorf("secret %s: the store's secrets are sealed with another key: %w", store.Clip(s.Name), store.ErrConflict)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("secret: key check: %w", err)
	}
	hosts, err := json.Marshal(nonNil(s.Hosts))
	if err != nil {
		return fmt.Errorf("secret: hosts: %w", err)
	}
	if err := tx.Exec(ctx, `DELETE FROM secrets WHERE tenant = `+d.Param(1)+` AND name = `+d.Param(2), s.Tenant, s.Name); err != nil {
		return fmt.Errorf("secret: replace: %w", err)
	}
	q := `INSERT INTO secrets (` + secretColumns + `) VALUES (` + d.Param(1) + `, ` + d.Param(2) + `, ` + d.Param(3) + `, ` +
		d.Param(4) + `, ` + d.Param(5) + `, ` + d.Param(6) + `, ` + d.Param(7) + `, ` + d.Param(8) + `)`
	if err := tx.Exec(ctx, q, s.Tenant, s.Name, string(hosts), s.Created.UnixNano(), s.Updated.UnixNano(), s.KeyCheck, s.Nonce, s.Ciphertext); err != nil {
		return fmt.Errorf("secret: store: %w", err)
	}
	return nil
}

// secretsLock is the advisory lock key PutSecret holds on PostgreSQL
// ("secrets" in ASCII).
const secretsLock int64 = 0x73656372657473

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// SealedSecret implements store.Secrets.SealedSecret in tx.
func (d Dialect) SealedSecret(ctx context.Context, tx Tx, tenant, name string) (store.SealedSecret, error) {
	out, err := d.secrets(ctx, tx, `tenant = `+d.Param(1)+` AND name = `+d.Param(2), tenant, name)
	if err != nil {
		return store.SealedSecret{}, err
	}
	if len(out) == 0 {
		return store.SealedSecret{}, fmt.Errorf("secret %s: %w", store.Clip(name), store.ErrNotFound)
	}
	return out[0], nil
}

// ListSecrets implements store.Secrets.ListSecrets in tx.
func (d Dialect) ListSecrets(ctx context.Context, tx Tx, tenant string) ([]store.SealedSecret, error) {
	return d.secrets(ctx, tx, `tenant = `+d.Param(1), tenant)
}

func (d Dialect) secrets(ctx context.Context, tx Tx, cond string, args ...any) ([]store.SealedSecret, error) {
	var out []store.SealedSecret
	err := tx.Query(ctx, `SELECT `+secretColumns+` FROM secrets WHERE `+cond+` ORDER BY name`, args, func(scan func(...any) error) error {
		var (
			s                store.SealedSecret
			hosts            string
			created, updated int64
		)
		if err := scan(&s.Tenant, &s.Name, &hosts, &created, &updated, &s.KeyCheck, &s.Nonce, &s.Ciphertext); err != nil {
			return err
		}
		dec := json.NewDecoder(bytes.NewReader([]byte(hosts)))
		if err := dec.Decode(&s.Hosts); err != nil {
			return fmt.Errorf("secret %s: hosts: %w", store.Clip(s.Name), err)
		}
		if len(s.Hosts) == 0 {
			s.Hosts = nil
		}
		s.Created, s.Updated = time.Unix(0, created).UTC(), time.Unix(0, updated).UTC()
		out = append(out, s)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("secrets: %w", err)
	}
	return out, nil
}

// DeleteSecret implements store.Secrets.DeleteSecret in tx.
func (d Dialect) DeleteSecret(ctx context.Context, tx Tx, tenant, name string) error {
	var one int64
	err := d.queryOne(ctx, tx, `SELECT 1 FROM secrets WHERE tenant = `+d.Param(1)+` AND name = `+d.Param(2), []any{tenant, name}, &one)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("secret %s: %w", store.Clip(name), store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("secret: %w", err)
	}
	if err := tx.Exec(ctx, `DELETE FROM secrets WHERE tenant = `+d.Param(1)+` AND name = `+d.Param(2), tenant, name); err != nil {
		return fmt.Errorf("secret: delete: %w", err)
	}
	return nil
}
