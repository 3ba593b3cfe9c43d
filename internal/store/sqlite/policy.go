package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// PutPolicy implements store.Store. The write lock every write
// transaction takes (BEGIN IMMEDIATE) serializes it with every other
// writer, in this process or another, so the latest version it reads is
// still the latest when it inserts the next.
func (s *Store) PutPolicy(ctx context.Context, v store.PolicyVersion) (store.PolicyVersion, bool, error) {
	if err := s.check("put policy", nil); err != nil {
		return store.PolicyVersion{}, false, err
	}
	v, err := store.PreparePolicy(v, s.now(), s.red)
	if err != nil {
		return store.PolicyVersion{}, false, fmt.Errorf("sqlite: put policy: %w", err)
	}
	var stored store.PolicyVersion
	var write store.PolicyWrite
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		latest, err := sqlrow.ScanPolicy(tx.QueryRowContext(ctx, `SELECT `+sqlrow.PolicyColumns+` FROM policies
			WHERE tenant = ? AND name = ? ORDER BY version DESC LIMIT 1`, v.Tenant, v.Name))
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		stored, write = store.DecidePolicy(v, latest, err == nil)
		switch write {
		case store.PolicyFill:
			_, err = tx.ExecContext(ctx, `UPDATE policies SET policy_hash = ? WHERE tenant = ? AND name = ? AND version = ?`,
				stored.PolicyHash, stored.Tenant, stored.Name, stored.Version)
		case store.PolicyInsert:
			_, err = tx.ExecContext(ctx, `INSERT INTO policies (`+sqlrow.PolicyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
				stored.Tenant, stored.Name, stored.Version, stored.Hash, nullString(stored.PolicyHash), stored.Source, stored.By,
				stored.CreatedAt.UnixNano(), stored.Document)
		default:
			err = nil
		}
		return err
	})
	if err != nil {
		return store.PolicyVersion{}, false, fmt.Errorf("sqlite: tenant %s: put policy %s: %w", v.Tenant, v.Name, err)
	}
	return stored, write == store.PolicyInsert, nil
}

// PolicyVersions implements store.Store.
func (s *Store) PolicyVersions(ctx context.Context, tenant, name string) ([]store.PolicyVersion, error) {
	if err := s.check("policy versions", nil); err != nil {
		return nil, err
	}
	if _, err := store.ValidatePolicyQuery(tenant, name, ""); err != nil {
		return nil, fmt.Errorf("sqlite: policy versions: %w", err)
	}
	out, err := query(ctx, s.r, sqlrow.ScanPolicyMeta, `SELECT `+sqlrow.PolicyMeta+` FROM policies WHERE tenant = ? AND name = ? ORDER BY version DESC LIMIT ?`,
		tenant, name, store.MaxPage)
	if err == nil && len(out) == 0 {
		err = store.PolicyNotFound(name, store.PolicyRef{})
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: policy versions: %w", tenant, err)
	}
	return out, nil
}

// ListPolicies implements store.Store.
func (s *Store) ListPolicies(ctx context.Context, tenant string) ([]store.PolicyVersion, error) {
	if err := s.check("list policies", store.ValidateTenant(tenant)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanPolicyMeta, `SELECT `+sqlrow.PolicyMeta+` FROM policies p WHERE tenant = ?
		AND version = (SELECT MAX(version) FROM policies q WHERE q.tenant = p.tenant AND q.name = p.name)
		ORDER BY name LIMIT ?`, tenant, store.MaxPage)
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: list policies: %w", tenant, err)
	}
	return out, nil
}

// GetPolicy implements store.Store.
func (s *Store) GetPolicy(ctx context.Context, tenant, name, ref string) (store.PolicyVersion, error) {
	if err := s.check("get policy", nil); err != nil {
		return store.PolicyVersion{}, err
	}
	r, err := store.ValidatePolicyQuery(tenant, name, ref)
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("sqlite: get policy: %w", err)
	}
	v, err := s.getPolicy(ctx, tenant, name, r)
	if errors.Is(err, sql.ErrNoRows) {
		err = store.PolicyNotFound(name, r)
	}
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("sqlite: tenant %s: %w", tenant, err)
	}
	return v, nil
}

func (s *Store) getPolicy(ctx context.Context, tenant, name string, r store.PolicyRef) (store.PolicyVersion, error) {
	const q = `SELECT ` + sqlrow.PolicyColumns + ` FROM policies WHERE tenant = ? AND name = ?`
	switch {
	case r.Version != 0:
		return sqlrow.ScanPolicy(s.r.QueryRowContext(ctx, q+` AND version = ?`, tenant, name, r.Version))
	case r.HashPrefix == "":
		return sqlrow.ScanPolicy(s.r.QueryRowContext(ctx, q+` ORDER BY version DESC LIMIT 1`, tenant, name))
	}
	// Several versions may share a hash (a name that went back to an
	// earlier document, or documents that differ only in form share a
	// policy hash); only different hashes make a prefix ambiguous. The
	// prefix may be of either hash: the policy hash is the one shown,
	// the document's the one shown before.
	hashes, err := query(ctx, s.r, sqlrow.ScanString, `SELECT hash FROM policies WHERE tenant = ? AND name = ? AND substr(hash, 1, ?) = ?
		UNION SELECT policy_hash FROM policies WHERE tenant = ? AND name = ? AND substr(policy_hash, 1, ?) = ? LIMIT 2`,
		tenant, name, len(r.HashPrefix), r.HashPrefix, tenant, name, len(r.HashPrefix), r.HashPrefix)
	if err != nil {
		return store.PolicyVersion{}, err
	}
	switch len(hashes) {
	case 0:
		return store.PolicyVersion{}, sql.ErrNoRows
	case 1:
		return sqlrow.ScanPolicy(s.r.QueryRowContext(ctx, q+` AND (hash = ? OR policy_hash = ?) ORDER BY version DESC LIMIT 1`, tenant, name, hashes[0], hashes[0]))
	}
	return store.PolicyVersion{}, store.AmbiguousPolicyRef(name, r)
}
