package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// CreateTenant implements store.Store.
func (s *Store) CreateTenant(ctx context.Context, name string) (store.Tenant, error) {
	if err := s.check("create tenant", nil); err != nil {
		return store.Tenant{}, err
	}
	tn, err := store.PrepareTenant(name, s.now())
	if err != nil {
		return store.Tenant{}, fmt.Errorf("sqlite: create tenant: %w", err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO tenants (name, created_ns) VALUES (?, ?) ON CONFLICT DO NOTHING`,
			tn.Name, tn.CreatedAt.UnixNano())
		if err != nil {
			return err
		}
		return oneRow(res, store.ErrExists)
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("sqlite: create tenant %s: %w", name, err)
	}
	return tn, nil
}

// oneRow returns nil when res changed (or matched) a row, and none when
// it did not.
func oneRow(res sql.Result, none error) error {
	n, err := res.RowsAffected()
	switch {
	case err != nil:
		return err
	case n == 0:
		return none
	}
	return nil
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, name string) (store.Tenant, error) {
	if err := s.check("get tenant", store.ValidateTenantName(name)); err != nil {
		return store.Tenant{}, err
	}
	tn, err := sqlrow.ScanTenant(s.r.QueryRowContext(ctx, `SELECT `+sqlrow.TenantColumns+` FROM tenants WHERE name = ?`, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.TenantNotFound(name)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("sqlite: get tenant: %w", err)
	}
	return tn, nil
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	if err := s.check("list tenants", nil); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanTenant, `SELECT `+sqlrow.TenantColumns+` FROM tenants ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list tenants: %w", err)
	}
	return out, nil
}

// MarkTenantDeleting implements store.Store.
func (s *Store) MarkTenantDeleting(ctx context.Context, name string) (store.Tenant, error) {
	if err := s.check("mark tenant deleting", store.ValidateTenantName(name)); err != nil {
		return store.Tenant{}, err
	}
	var tn store.Tenant
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE tenants SET deleting_ns = COALESCE(deleting_ns, ?) WHERE name = ?`, s.now().UTC().UnixNano(), name)
		if err != nil {
			return err
		}
		if err := oneRow(res, store.TenantNotFound(name)); err != nil {
			return err
		}
		tn, err = sqlrow.ScanTenant(tx.QueryRowContext(ctx, `SELECT `+sqlrow.TenantColumns+` FROM tenants WHERE name = ?`, name))
		return err
	})
	if err != nil {
		return store.Tenant{}, fmt.Errorf("sqlite: mark tenant %s deleting: %w", name, err)
	}
	return tn, nil
}

// tenantDeleting returns store.TenantDeletingError when tenant's
// deletion began, read in tx (a write transaction: SQLite has one writer,
// so no mark can land between this read and the caller's insert).
func tenantDeleting(ctx context.Context, tx *sql.Tx, tenant string) error {
	var deleting sql.NullInt64
	err := tx.QueryRowContext(ctx, `SELECT deleting_ns FROM tenants WHERE name = ?`, tenant).Scan(&deleting)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil // a run's tenant need not be one of the API's (the CLI's own)
	case err != nil:
		return err
	case deleting.Valid:
		return store.TenantDeletingError(tenant)
	}
	return nil
}

// CreateAPIKey implements store.Store.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if err := s.check("create API key", nil); err != nil {
		return err
	}
	k, err := store.PrepareAPIKey(k, s.now(), s.red)
	if err != nil {
		return fmt.Errorf("sqlite: create API key: %w", err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var deleting sql.NullInt64
		switch err := tx.QueryRowContext(ctx, `SELECT deleting_ns FROM tenants WHERE name = ?`, k.Tenant).Scan(&deleting); {
		case errors.Is(err, sql.ErrNoRows):
			return store.TenantNotFound(k.Tenant)
		case err != nil:
			return err
		case deleting.Valid:
			return store.TenantDeletingError(k.Tenant)
		}
		// DO NOTHING on either unique key: the id, or the hash.
		res, err := tx.ExecContext(ctx, `INSERT INTO api_keys (`+sqlrow.APIKeyColumns+`) VALUES (?, ?, ?, ?, ?, ?, NULL, NULL)
			ON CONFLICT DO NOTHING`,
			k.ID, k.Tenant, k.Name, store.JoinScopes(k.Scopes), k.Hash, k.CreatedAt.UnixNano())
		if err != nil {
			return err
		}
		return oneRow(res, fmt.Errorf("the id or the key's hash is taken: %w", store.ErrExists))
	})
	if err != nil {
		return fmt.Errorf("sqlite: tenant %s: create API key %s: %w", k.Tenant, k.ID, err)
	}
	return nil
}

// APIKeyByHash implements store.Store.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	if err := s.check("find API key", store.ValidateAPIKeyHash(hash)); err != nil {
		return store.APIKey{}, err
	}
	if err := ctx.Err(); err != nil {
		return store.APIKey{}, fmt.Errorf("sqlite: find API key: %w", err)
	}
	// A point lookup on every request: not worth the driver's goroutine
	// that would watch a cancellable ctx (see write).
	k, err := sqlrow.ScanAPIKey(s.stmtAPIKey.QueryRowContext(context.WithoutCancel(ctx), hash))
	if errors.Is(err, sql.ErrNoRows) {
		err = fmt.Errorf("no API key with that hash: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("sqlite: find API key: %w", err)
	}
	return k, nil
}

// ListAPIKeys implements store.Store.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]store.APIKey, error) {
	if err := s.check("list API keys", store.ValidateTenantName(tenant)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanAPIKey, `SELECT `+sqlrow.APIKeyRead+` FROM api_keys WHERE tenant = ? ORDER BY created_ns, id`, tenant)
	if err == nil && len(out) == 0 {
		// Tenants are never deleted: one that exists now existed when
		// the keys were read.
		var one int
		err = s.r.QueryRowContext(ctx, `SELECT 1 FROM tenants WHERE name = ?`, tenant).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			err = store.TenantNotFound(tenant)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: list API keys: %w", tenant, err)
	}
	return out, nil
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, tenant, id string) error {
	if err := s.check("revoke API key", cmp.Or(store.ValidateTenantName(tenant), store.ValidateAPIKeyID(id))); err != nil {
		return err
	}
	now := s.now().UTC()
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		// COALESCE keeps the first revocation; the row still counts as
		// changed, so 0 rows means no such key of this tenant.
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_ns = COALESCE(revoked_ns, ?) WHERE id = ? AND tenant = ?`,
			now.UnixNano(), id, tenant)
		if err != nil {
			return err
		}
		if err := oneRow(res, store.APIKeyNotFound(id)); err != nil {
			return err
		}
		// Its web UI sessions end with it (store.UISessions).
		return schema.SQLite.DeleteKeyUISessions(ctx, schemaTx{tx}, tenant, id)
	})
	if err != nil {
		return fmt.Errorf("sqlite: tenant %s: revoke API key: %w", tenant, err)
	}
	return nil
}

// TouchAPIKey implements store.Store.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	if err := s.check("touch API key", store.ValidateTouch(id, at)); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		ns := at.UnixNano()
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_ns = ?
			WHERE id = ? AND (last_used_ns IS NULL OR last_used_ns < ?)`, ns, id, ns)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM api_keys WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return store.APIKeyNotFound(id)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: touch API key: %w", err)
	}
	return nil
}
