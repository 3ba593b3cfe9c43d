package postgres

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// oneRow returns nil when tag says a row was changed (or matched), and
// none when not.
func oneRow(tag pgconn.CommandTag, none error) error {
	if tag.RowsAffected() == 0 {
		return none
	}
	return nil
}

// CreateTenant implements store.Store. ON CONFLICT makes two processes
// creating one name at once see one success and one ErrExists.
func (s *Store) CreateTenant(ctx context.Context, name string) (store.Tenant, error) {
	if err := s.check("create tenant", nil); err != nil {
		return store.Tenant{}, err
	}
	tn, err := store.PrepareTenant(name, s.now())
	if err != nil {
		return store.Tenant{}, fmt.Errorf("postgres: create tenant: %w", err)
	}
	tag, err := s.pool.Exec(ctx, `INSERT INTO tenants (name, created_ns) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
		tn.Name, tn.CreatedAt.UnixNano())
	if err == nil {
		err = oneRow(tag, store.ErrExists)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("postgres: create tenant %s: %w", name, err)
	}
	return tn, nil
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, name string) (store.Tenant, error) {
	if err := s.check("get tenant", store.ValidateTenantName(name)); err != nil {
		return store.Tenant{}, err
	}
	tn, err := sqlrow.ScanTenant(s.pool.QueryRow(ctx, `SELECT `+sqlrow.TenantColumns+` FROM tenants WHERE name = $1`, name))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.TenantNotFound(name)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("postgres: get tenant: %w", err)
	}
	return tn, nil
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	if err := s.check("list tenants", nil); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanTenant, `SELECT `+sqlrow.TenantColumns+` FROM tenants ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: list tenants: %w", err)
	}
	return out, nil
}

// MarkTenantDeleting implements store.Store. The UPDATE takes the
// tenant's row lock, which insertRun and CreateAPIKey share (FOR SHARE)
// while they check the mark: a run created at the same moment either
// commits before the mark (and the deletion sees it) or sees the mark.
func (s *Store) MarkTenantDeleting(ctx context.Context, name string) (store.Tenant, error) {
	if err := s.check("mark tenant deleting", store.ValidateTenantName(name)); err != nil {
		return store.Tenant{}, err
	}
	tn, err := sqlrow.ScanTenant(s.pool.QueryRow(ctx, `UPDATE tenants SET deleting_ns = COALESCE(deleting_ns, $1) WHERE name = $2
		RETURNING `+sqlrow.TenantColumns, s.now().UTC().UnixNano(), name))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.TenantNotFound(name)
	}
	if err != nil {
		return store.Tenant{}, fmt.Errorf("postgres: mark tenant %s deleting: %w", name, err)
	}
	return tn, nil
}

// tenantDeleting returns store.TenantDeletingError when tenant's deletion
// began, read in tx under a share lock of the tenant's row (see
// MarkTenantDeleting). found says whether the tenant exists.
func tenantDeleting(ctx context.Context, tx pgx.Tx, tenant string) (found bool, err error) {
	var deleting *int64
	err = tx.QueryRow(ctx, `SELECT deleting_ns FROM tenants WHERE name = $1 FOR SHARE`, tenant).Scan(&deleting)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, err
	case deleting != nil:
		return true, store.TenantDeletingError(tenant)
	}
	return true, nil
}

// CreateAPIKey implements store.Store. Tenants are never deleted, so one
// found in the transaction is still there at its commit (the foreign key
// would refuse the key otherwise); ON CONFLICT turns a taken id or hash
// into ErrExists, also when another process took it a moment before.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	if err := s.check("create API key", nil); err != nil {
		return err
	}
	k, err := store.PrepareAPIKey(k, s.now(), s.red)
	if err != nil {
		return fmt.Errorf("postgres: create API key: %w", err)
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		switch found, err := tenantDeleting(ctx, tx, k.Tenant); {
		case err != nil:
			return err
		case !found:
			return store.TenantNotFound(k.Tenant)
		}
		tag, err := tx.Exec(ctx, `INSERT INTO api_keys (`+sqlrow.APIKeyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, NULL, NULL)
			ON CONFLICT DO NOTHING`,
			k.ID, k.Tenant, k.Name, store.JoinScopes(k.Scopes), k.Hash, k.CreatedAt.UnixNano())
		if err != nil {
			return err
		}
		return oneRow(tag, fmt.Errorf("the id or the key's hash is taken: %w", store.ErrExists))
	})
	if err != nil {
		return fmt.Errorf("postgres: tenant %s: create API key %s: %w", k.Tenant, k.ID, err)
	}
	return nil
}

// APIKeyByHash implements store.Store.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	if err := s.check("find API key", store.ValidateAPIKeyHash(hash)); err != nil {
		return store.APIKey{}, err
	}
	k, err := sqlrow.ScanAPIKey(s.pool.QueryRow(ctx, `SELECT `+sqlrow.APIKeyRead+` FROM api_keys WHERE hash = $1`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
		err = fmt.Errorf("no API key with that hash: %w", store.ErrNotFound)
	}
	if err != nil {
		return store.APIKey{}, fmt.Errorf("postgres: find API key: %w", err)
	}
	return k, nil
}

// ListAPIKeys implements store.Store.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]store.APIKey, error) {
	if err := s.check("list API keys", store.ValidateTenantName(tenant)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanAPIKey, `SELECT `+sqlrow.APIKeyRead+` FROM api_keys WHERE tenant = $1 ORDER BY created_ns, id`, tenant)
	if err == nil && len(out) == 0 {
		// Tenants are never deleted: one that exists now existed when
		// the keys were read.
		var one int
		err = s.pool.QueryRow(ctx, `SELECT 1 FROM tenants WHERE name = $1`, tenant).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			err = store.TenantNotFound(tenant)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: tenant %s: list API keys: %w", tenant, err)
	}
	return out, nil
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, tenant, id string) error {
	if err := s.check("revoke API key", cmp.Or(store.ValidateTenantName(tenant), store.ValidateAPIKeyID(id))); err != nil {
		return err
	}
	// COALESCE keeps the first revocation; the row still counts as
	// changed, so 0 rows means no such key of this tenant.
	// The key's web UI sessions (store.UISessions) end in the same
	// transaction. The UPDATE's row lock makes a login of the key that
	// holds it (CreateUISession) commit first, so that the DELETE, a
	// statement of its own, sees its session.
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE api_keys SET revoked_ns = COALESCE(revoked_ns, $1) WHERE id = $2 AND tenant = $3`,
			s.now().UnixNano(), id, tenant)
		if err != nil {
			return err
		}
		if err := oneRow(tag, store.APIKeyNotFound(id)); err != nil {
			return err
		}
		return schema.Postgres.DeleteKeyUISessions(ctx, schemaTx{tx}, tenant, id)
	})
	if err != nil {
		return fmt.Errorf("postgres: tenant %s: revoke API key: %w", tenant, err)
	}
	return nil
}

// TouchAPIKey implements store.Store. The update only moves last use
// forward, so replicas touching one key at once cannot move it back.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	if err := s.check("touch API key", store.ValidateTouch(id, at)); err != nil {
		return err
	}
	ns := at.UnixNano()
	tag, err := s.pool.Exec(ctx, `UPDATE api_keys SET last_used_ns = $1
		WHERE id = $2 AND (last_used_ns IS NULL OR last_used_ns < $1)`, ns, id)
	if err == nil && tag.RowsAffected() == 0 {
		var one int
		err = s.pool.QueryRow(ctx, `SELECT 1 FROM api_keys WHERE id = $1`, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			err = store.APIKeyNotFound(id)
		}
	}
	if err != nil {
		return fmt.Errorf("postgres: touch API key: %w", err)
	}
	return nil
}
