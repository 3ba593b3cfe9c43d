package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// PutTemplate implements store.Store. Like PutPolicy, it first takes a
// transaction-scoped advisory lock on the tenant and name, so puts of one
// name queue whatever process they are in.
func (s *Store) PutTemplate(ctx context.Context, v store.TemplateVersion) (store.TemplateVersion, bool, error) {
	if err := s.check("put template", nil); err != nil {
		return store.TemplateVersion{}, false, err
	}
	v, err := store.PrepareTemplate(v, s.now(), s.red)
	if err != nil {
		return store.TemplateVersion{}, false, fmt.Errorf("postgres: put template: %w", err)
	}
	var stored store.TemplateVersion
	var insert bool
	err = s.write(ctx, func(tx pgx.Tx) error {
		// Neither a tenant nor a name can hold '/'; the "template:"
		// prefix keeps the key apart from the policy of the same name's.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`, "template:"+v.Tenant+"/"+v.Name); err != nil {
			return fmt.Errorf("lock template: %w", err)
		}
		latest, err := sqlrow.ScanTemplate(tx.QueryRow(ctx, `SELECT `+sqlrow.TemplateColumns+` FROM templates
			WHERE tenant = $1 AND name = $2 ORDER BY version DESC LIMIT 1`, v.Tenant, v.Name))
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		stored, insert = store.DecideTemplate(v, latest, err == nil)
		if !insert {
			return nil
		}
		_, err = tx.Exec(ctx, `INSERT INTO templates (`+sqlrow.TemplateColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			stored.Tenant, stored.Name, stored.Version, stored.Hash, stored.Image, stored.Source, stored.By,
			stored.CreatedAt.UnixNano(), stored.Document)
		return err
	})
	if err != nil {
		return store.TemplateVersion{}, false, fmt.Errorf("postgres: tenant %s: put template %s: %w", v.Tenant, v.Name, err)
	}
	return stored, insert, nil
}

// TemplateVersions implements store.Store.
func (s *Store) TemplateVersions(ctx context.Context, tenant, name string) ([]store.TemplateVersion, error) {
	if err := s.check("template versions", store.ValidateTemplateQuery(tenant, name, 0)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanTemplateMeta, `SELECT `+sqlrow.TemplateMeta+` FROM templates WHERE tenant = $1 AND name = $2 ORDER BY version DESC LIMIT $3`,
		tenant, name, store.MaxPage)
	if err == nil && len(out) == 0 {
		err = store.TemplateNotFound(name, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: tenant %s: template versions: %w", tenant, err)
	}
	return out, nil
}

// ListTemplates implements store.Store.
func (s *Store) ListTemplates(ctx context.Context, tenant string) ([]store.TemplateVersion, error) {
	if err := s.check("list templates", store.ValidateTenant(tenant)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanTemplateMeta, `SELECT `+sqlrow.TemplateMeta+` FROM templates p WHERE tenant = $1
		AND version = (SELECT MAX(version) FROM templates q WHERE q.tenant = p.tenant AND q.name = p.name)
		ORDER BY name LIMIT $2`, tenant, store.MaxPage)
	if err != nil {
		return nil, fmt.Errorf("postgres: tenant %s: list templates: %w", tenant, err)
	}
	return out, nil
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(ctx context.Context, tenant, name string, version int64) (store.TemplateVersion, error) {
	if err := s.check("get template", store.ValidateTemplateQuery(tenant, name, version)); err != nil {
		return store.TemplateVersion{}, err
	}
	const q = `SELECT ` + sqlrow.TemplateColumns + ` FROM templates WHERE tenant = $1 AND name = $2`
	var row pgx.Row
	if version == 0 {
		row = s.pool.QueryRow(ctx, q+` ORDER BY version DESC LIMIT 1`, tenant, name)
	} else {
		row = s.pool.QueryRow(ctx, q+` AND version = $3`, tenant, name, version)
	}
	v, err := sqlrow.ScanTemplate(row)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.TemplateNotFound(name, version)
	}
	if err != nil {
		return store.TemplateVersion{}, fmt.Errorf("postgres: tenant %s: %w", tenant, err)
	}
	return v, nil
}

// DeleteTemplate implements store.Store.
func (s *Store) DeleteTemplate(ctx context.Context, tenant, name string) (int64, error) {
	if err := s.check("delete template", store.ValidateTemplateQuery(tenant, name, 0)); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM templates WHERE tenant = $1 AND name = $2`, tenant, name)
		if err != nil {
			return err
		}
		if n = tag.RowsAffected(); n == 0 {
			return store.TemplateNotFound(name, 0)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: tenant %s: delete template %s: %w", tenant, name, err)
	}
	return n, nil
}
