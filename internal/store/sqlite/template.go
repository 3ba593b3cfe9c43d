package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// PutTemplate implements store.Store. The write lock every write
// transaction takes serializes it with every other writer, as PutPolicy.
func (s *Store) PutTemplate(ctx context.Context, v store.TemplateVersion) (store.TemplateVersion, bool, error) {
	if err := s.check("put template", nil); err != nil {
		return store.TemplateVersion{}, false, err
	}
	v, err := store.PrepareTemplate(v, s.now(), s.red)
	if err != nil {
		return store.TemplateVersion{}, false, fmt.Errorf("sqlite: put template: %w", err)
	}
	var stored store.TemplateVersion
	var insert bool
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		latest, err := sqlrow.ScanTemplate(tx.QueryRowContext(ctx, `SELECT `+sqlrow.TemplateColumns+` FROM templates
			WHERE tenant = ? AND name = ? ORDER BY version DESC LIMIT 1`, v.Tenant, v.Name))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		stored, insert = store.DecideTemplate(v, latest, err == nil)
		if !insert {
			return nil
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO templates (`+sqlrow.TemplateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			stored.Tenant, stored.Name, stored.Version, stored.Hash, stored.Image, stored.Source, stored.By,
			stored.CreatedAt.UnixNano(), stored.Document)
		return err
	})
	if err != nil {
		return store.TemplateVersion{}, false, fmt.Errorf("sqlite: tenant %s: put template %s: %w", v.Tenant, v.Name, err)
	}
	return stored, insert, nil
}

// TemplateVersions implements store.Store.
func (s *Store) TemplateVersions(ctx context.Context, tenant, name string) ([]store.TemplateVersion, error) {
	if err := s.check("template versions", store.ValidateTemplateQuery(tenant, name, 0)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanTemplateMeta, `SELECT `+sqlrow.TemplateMeta+` FROM templates WHERE tenant = ? AND name = ? ORDER BY version DESC LIMIT ?`,
		tenant, name, store.MaxPage)
	if err == nil && len(out) == 0 {
		err = store.TemplateNotFound(name, 0)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: template versions: %w", tenant, err)
	}
	return out, nil
}

// ListTemplates implements store.Store.
func (s *Store) ListTemplates(ctx context.Context, tenant string) ([]store.TemplateVersion, error) {
	if err := s.check("list templates", store.ValidateTenant(tenant)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanTemplateMeta, `SELECT `+sqlrow.TemplateMeta+` FROM templates p WHERE tenant = ?
		AND version = (SELECT MAX(version) FROM templates q WHERE q.tenant = p.tenant AND q.name = p.name)
		ORDER BY name LIMIT ?`, tenant, store.MaxPage)
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: list templates: %w", tenant, err)
	}
	return out, nil
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(ctx context.Context, tenant, name string, version int64) (store.TemplateVersion, error) {
	if err := s.check("get template", store.ValidateTemplateQuery(tenant, name, version)); err != nil {
		return store.TemplateVersion{}, err
	}
	const q = `SELECT ` + sqlrow.TemplateColumns + ` FROM templates WHERE tenant = ? AND name = ?`
	var row *sql.Row
	if version == 0 {
		row = s.r.QueryRowContext(ctx, q+` ORDER BY version DESC LIMIT 1`, tenant, name)
	} else {
		row = s.r.QueryRowContext(ctx, q+` AND version = ?`, tenant, name, version)
	}
	v, err := sqlrow.ScanTemplate(row)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.TemplateNotFound(name, version)
	}
	if err != nil {
		return store.TemplateVersion{}, fmt.Errorf("sqlite: tenant %s: %w", tenant, err)
	}
	return v, nil
}

// DeleteTemplate implements store.Store.
func (s *Store) DeleteTemplate(ctx context.Context, tenant, name string) (int64, error) {
	if err := s.check("delete template", store.ValidateTemplateQuery(tenant, name, 0)); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM templates WHERE tenant = ? AND name = ?`, tenant, name)
		if err != nil {
			return err
		}
		if n, err = res.RowsAffected(); err == nil && n == 0 {
			err = store.TemplateNotFound(name, 0)
		}
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: tenant %s: delete template %s: %w", tenant, name, err)
	}
	return n, nil
}
