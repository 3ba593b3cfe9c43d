package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// PutPolicy implements store.Store.
//
// It first takes a transaction-scoped advisory lock on the tenant and
// name, so puts of one name queue whatever process they are in while puts
// of other names go on (two names whose keys collide only queue too). Once
// it holds the lock, each statement sees every version committed before
// it (READ COMMITTED), so the latest version it reads is still the latest
// when it inserts the next; the primary key would refuse a duplicate
// version should that ever not hold.
func (s *Store) PutPolicy(ctx context.Context, v store.PolicyVersion) (store.PolicyVersion, bool, error) {
	if err := s.check("put policy", nil); err != nil {
		return store.PolicyVersion{}, false, err
	}
	v, err := store.PreparePolicy(v, s.now(), s.red)
	if err != nil {
		return store.PolicyVersion{}, false, fmt.Errorf("postgres: put policy: %w", err)
	}
	var stored store.PolicyVersion
	var write store.PolicyWrite
	err = s.write(ctx, func(tx pgx.Tx) error {
		// Neither a tenant nor a name can hold '/'.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock(hashtextextended($1::text, 0))`, v.Tenant+"/"+v.Name); err != nil {
			return fmt.Errorf("lock policy: %w", err)
		}
		latest, err := sqlrow.ScanPolicy(tx.QueryRow(ctx, `SELECT `+sqlrow.PolicyColumns+` FROM policies
			WHERE tenant = $1 AND name = $2 ORDER BY version DESC LIMIT 1`, v.Tenant, v.Name))
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		stored, write = store.DecidePolicy(v, latest, err == nil)
		switch write {
		case store.PolicyFill:
			_, err = tx.Exec(ctx, `UPDATE policies SET policy_hash = $1 WHERE tenant = $2 AND name = $3 AND version = $4`,
				stored.PolicyHash, stored.Tenant, stored.Name, stored.Version)
		case store.PolicyInsert:
			var policyHash *string // NULL, not '', when the caller gave none
			if stored.PolicyHash != "" {
				policyHash = &stored.PolicyHash
			}
			_, err = tx.Exec(ctx, `INSERT INTO policies (`+sqlrow.PolicyColumns+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
				stored.Tenant, stored.Name, stored.Version, stored.Hash, policyHash, stored.Source, stored.By,
				stored.CreatedAt.UnixNano(), stored.Document)
		default:
			err = nil
		}
		return err
	})
	if err != nil {
		return store.PolicyVersion{}, false, fmt.Errorf("postgres: tenant %s: put policy %s: %w", v.Tenant, v.Name, err)
	}
	return stored, write == store.PolicyInsert, nil
}

// PolicyVersions implements store.Store.
func (s *Store) PolicyVersions(ctx context.Context, tenant, name string) ([]store.PolicyVersion, error) {
	if err := s.check("policy versions", nil); err != nil {
		return nil, err
	}
	if _, err := store.ValidatePolicyQuery(tenant, name, ""); err != nil {
		return nil, fmt.Errorf("postgres: policy versions: %w", err)
	}
	out, err := query(ctx, s.pool, sqlrow.ScanPolicyMeta, `SELECT `+sqlrow.PolicyMeta+` FROM policies WHERE tenant = $1 AND name = $2 ORDER BY version DESC LIMIT $3`,
		tenant, name, store.MaxPage)
	if err == nil && len(out) == 0 {
		err = store.PolicyNotFound(name, store.PolicyRef{})
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: tenant %s: policy versions: %w", tenant, err)
	}
	return out, nil
}

// ListPolicies implements store.Store.
func (s *Store) ListPolicies(ctx context.Context, tenant string) ([]store.PolicyVersion, error) {
	if err := s.check("list policies", store.ValidateTenant(tenant)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanPolicyMeta, `SELECT `+sqlrow.PolicyMeta+` FROM policies p WHERE tenant = $1
		AND version = (SELECT MAX(version) FROM policies q WHERE q.tenant = p.tenant AND q.name = p.name)
		ORDER BY name LIMIT $2`, tenant, store.MaxPage)
	if err != nil {
		return nil, fmt.Errorf("postgres: tenant %s: list policies: %w", tenant, err)
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
		return store.PolicyVersion{}, fmt.Errorf("postgres: get policy: %w", err)
	}
	v, err := s.getPolicy(ctx, tenant, name, r)
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.PolicyNotFound(name, r)
	}
	if err != nil {
		return store.PolicyVersion{}, fmt.Errorf("postgres: tenant %s: %w", tenant, err)
	}
	return v, nil
}

func (s *Store) getPolicy(ctx context.Context, tenant, name string, r store.PolicyRef) (store.PolicyVersion, error) {
	const q = `SELECT ` + sqlrow.PolicyColumns + ` FROM policies WHERE tenant = $1 AND name = $2`
	switch {
	case r.Version != 0:
		return sqlrow.ScanPolicy(s.pool.QueryRow(ctx, q+` AND version = $3`, tenant, name, r.Version))
	case r.HashPrefix == "":
		return sqlrow.ScanPolicy(s.pool.QueryRow(ctx, q+` ORDER BY version DESC LIMIT 1`, tenant, name))
	}
	// Several versions may share a hash (a name that went back to an
	// earlier document, or documents that differ only in form share a
	// policy hash); only different hashes make a prefix ambiguous. The
	// prefix may be of either hash: the policy hash is the one shown,
	// the document's the one shown before.
	hashes, err := query(ctx, s.pool, sqlrow.ScanString, `SELECT hash FROM policies WHERE tenant = $1 AND name = $2 AND substr(hash, 1, $3) = $4
		UNION SELECT policy_hash FROM policies WHERE tenant = $1 AND name = $2 AND substr(policy_hash, 1, $3) = $4 LIMIT 2`,
		tenant, name, len(r.HashPrefix), r.HashPrefix)
	if err != nil {
		return store.PolicyVersion{}, err
	}
	switch len(hashes) {
	case 0:
		return store.PolicyVersion{}, pgx.ErrNoRows
	case 1:
		return sqlrow.ScanPolicy(s.pool.QueryRow(ctx, q+` AND (hash = $3 OR policy_hash = $3) ORDER BY version DESC LIMIT 1`, tenant, name, hashes[0]))
	}
	return store.PolicyVersion{}, store.AmbiguousPolicyRef(name, r)
}
