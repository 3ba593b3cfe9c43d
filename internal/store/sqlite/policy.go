package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
)

// policyMeta are the columns of a policy version but its document, which
// listings leave out; policyColumns are all of them.
const (
	policyMeta    = `tenant, name, version, hash, policy_hash, source, created_by, created_ns`
	policyColumns = policyMeta + `, document`
)

func scanPolicy(sc scanner, withDoc bool) (store.PolicyVersion, error) {
	var (
		v          store.PolicyVersion
		ns         int64
		policyHash *string // NULL before migration 10
	)
	dest := []any{&v.Tenant, &v.Name, &v.Version, &v.Hash, &policyHash, &v.Source, &v.By, &ns}
	if withDoc {
		dest = append(dest, &v.Document)
	}
	if err := sc.Scan(dest...); err != nil {
		return v, err
	}
	if withDoc && v.Document == nil {
		v.Document = []byte{}
	}
	if policyHash != nil {
		v.PolicyHash = *policyHash
	}
	v.CreatedAt = fromNS(ns)
	return v, nil
}

// PutPolicy implements store.Store. The write lock every write
// transaction takes (BEGIN IMMEDIATE) serializes it with every other
// writer, in this process or another, so the latest version it reads is
// still the latest when it inserts the next.
func (s *Store) PutPolicy(ctx context.Context, v store.PolicyVersion) (store.PolicyVersion, bool, error) {
	if err := s.check("put policy"); err != nil {
		return store.PolicyVersion{}, false, err
	}
	v, err := store.PreparePolicy(v, s.now(), s.red)
	if err != nil {
		return store.PolicyVersion{}, false, fmt.Errorf("sqlite: put policy: %w", err)
	}
	created := false
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		latest, err := scanPolicy(tx.QueryRowContext(ctx, `SELECT `+policyColumns+` FROM policies
			WHERE tenant = ? AND name = ? ORDER BY version DESC LIMIT 1`, v.Tenant, v.Name), true)
		switch {
		case err == nil && latest.Hash == v.Hash:
			if latest.PolicyHash == "" && v.PolicyHash != "" {
				// Stored before the stores kept policy hashes.
				if _, err := tx.ExecContext(ctx, `UPDATE policies SET policy_hash = ? WHERE tenant = ? AND name = ? AND version = ?`,
					v.PolicyHash, v.Tenant, v.Name, latest.Version); err != nil {
					return err
				}
				latest.PolicyHash = v.PolicyHash
			}
			v = latest
			return nil
		case err == nil:
			v.Version = latest.Version + 1
		case errors.Is(err, sql.ErrNoRows):
			v.Version = 1
		default:
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO policies (`+policyColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			v.Tenant, v.Name, v.Version, v.Hash, nullString(v.PolicyHash), v.Source, v.By, v.CreatedAt.UnixNano(), v.Document)
		created = err == nil
		return err
	})
	if err != nil {
		return store.PolicyVersion{}, false, fmt.Errorf("sqlite: tenant %s: put policy %s: %w", v.Tenant, v.Name, err)
	}
	return v, created, nil
}

// PolicyVersions implements store.Store.
func (s *Store) PolicyVersions(ctx context.Context, tenant, name string) ([]store.PolicyVersion, error) {
	if err := s.check("policy versions"); err != nil {
		return nil, err
	}
	if _, err := store.ValidatePolicyQuery(tenant, name, ""); err != nil {
		return nil, fmt.Errorf("sqlite: policy versions: %w", err)
	}
	out, err := s.policies(ctx, `SELECT `+policyMeta+` FROM policies WHERE tenant = ? AND name = ? ORDER BY version DESC LIMIT ?`,
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
	if err := s.check("list policies"); err != nil {
		return nil, err
	}
	if err := store.ValidateTenant(tenant); err != nil {
		return nil, fmt.Errorf("sqlite: list policies: %w", err)
	}
	out, err := s.policies(ctx, `SELECT `+policyMeta+` FROM policies p WHERE tenant = ?
		AND version = (SELECT MAX(version) FROM policies q WHERE q.tenant = p.tenant AND q.name = p.name)
		ORDER BY name LIMIT ?`, tenant, store.MaxPage)
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: list policies: %w", tenant, err)
	}
	return out, nil
}

// policies runs a query of policy versions without their documents.
func (s *Store) policies(ctx context.Context, q string, args ...any) ([]store.PolicyVersion, error) {
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []store.PolicyVersion
	for rows.Next() {
		v, err := scanPolicy(rows, false)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, rows.Err()
}

// GetPolicy implements store.Store.
func (s *Store) GetPolicy(ctx context.Context, tenant, name, ref string) (store.PolicyVersion, error) {
	if err := s.check("get policy"); err != nil {
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
	const q = `SELECT ` + policyColumns + ` FROM policies WHERE tenant = ? AND name = ?`
	switch {
	case r.Version != 0:
		return scanPolicy(s.r.QueryRowContext(ctx, q+` AND version = ?`, tenant, name, r.Version), true)
	case r.HashPrefix == "":
		return scanPolicy(s.r.QueryRowContext(ctx, q+` ORDER BY version DESC LIMIT 1`, tenant, name), true)
	}
	// Several versions may share a hash (a name that went back to an
	// earlier document, or documents that differ only in form share a
	// policy hash); only different hashes make a prefix ambiguous. The
	// prefix may be of either hash: the policy hash is the one shown,
	// the document's the one shown before.
	rows, err := s.r.QueryContext(ctx, `SELECT hash FROM policies WHERE tenant = ? AND name = ? AND substr(hash, 1, ?) = ?
		UNION SELECT policy_hash FROM policies WHERE tenant = ? AND name = ? AND substr(policy_hash, 1, ?) = ? LIMIT 2`,
		tenant, name, len(r.HashPrefix), r.HashPrefix, tenant, name, len(r.HashPrefix), r.HashPrefix)
	if err != nil {
		return store.PolicyVersion{}, err
	}
	var hashes []string
	for rows.Next() {
		var h string
		if err := rows.Scan(&h); err != nil {
			rows.Close()
			return store.PolicyVersion{}, err
		}
		hashes = append(hashes, h)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return store.PolicyVersion{}, err
	}
	switch len(hashes) {
	case 0:
		return store.PolicyVersion{}, sql.ErrNoRows
	case 1:
		return scanPolicy(s.r.QueryRowContext(ctx, q+` AND (hash = ? OR policy_hash = ?) ORDER BY version DESC LIMIT 1`, tenant, name, hashes[0], hashes[0]), true)
	}
	return store.PolicyVersion{}, store.AmbiguousPolicyRef(name, r)
}
