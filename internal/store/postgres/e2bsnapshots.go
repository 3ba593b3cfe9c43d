package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
)

var _ store.E2BSnapshots = (*Store)(nil)

// maxSnapshotField bounds a snapshot's id and name.
const maxSnapshotField = 256

func checkE2BSnapshot(sn store.E2BSnapshot) error {
	switch {
	case sn.ID == "" || len(sn.ID) > maxSnapshotField, len(sn.Name) > maxSnapshotField:
		return fmt.Errorf("%w: snapshot id or name: 1 to %d bytes", store.ErrInvalid, maxSnapshotField)
	case store.ValidateTenant(sn.Tenant) != nil:
		return fmt.Errorf("%w: tenant %q", store.ErrInvalid, store.Clip(sn.Tenant))
	case len(sn.Body) == 0 || len(sn.Body) > store.MaxE2BSnapshotBody:
		return fmt.Errorf("%w: snapshot body: 1 to %d bytes", store.ErrInvalid, store.MaxE2BSnapshotBody)
	}
	return nil
}

// PutE2BSnapshot implements store.E2BSnapshots. ON CONFLICT makes two
// processes taking one id or name at once see one success and one
// ErrExists.
func (s *Store) PutE2BSnapshot(ctx context.Context, sn store.E2BSnapshot) error {
	if err := s.check("put e2b snapshot", checkE2BSnapshot(sn)); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO e2b_snapshots (id, tenant, name, created_ns, body) VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING`,
			sn.ID, sn.Tenant, sn.Name, sn.Created.UnixNano(), sn.Body)
		if err != nil {
			return err
		}
		return oneRow(tag, fmt.Errorf("the id or the tenant's name is taken: %w", store.ErrExists))
	})
	if err != nil {
		return fmt.Errorf("postgres: put e2b snapshot %s: %w", clip(sn.ID), err)
	}
	return nil
}

const e2bSnapshotCols = `id, tenant, name, created_ns, body`

func scanE2BSnapshot(r pgx.CollectableRow) (store.E2BSnapshot, error) {
	var (
		sn store.E2BSnapshot
		ns int64
	)
	err := r.Scan(&sn.ID, &sn.Tenant, &sn.Name, &ns, &sn.Body)
	sn.Created = time.Unix(0, ns).UTC()
	return sn, err
}

// GetE2BSnapshot implements store.E2BSnapshots.
func (s *Store) GetE2BSnapshot(ctx context.Context, tenant, ref string) (store.E2BSnapshot, error) {
	if err := s.check("get e2b snapshot", nil); err != nil {
		return store.E2BSnapshot{}, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+e2bSnapshotCols+` FROM e2b_snapshots WHERE tenant = $1 AND (id = $2 OR (name = $2 AND name <> '')) ORDER BY id = $2 DESC LIMIT 1`, tenant, ref)
	var sn store.E2BSnapshot
	if err == nil {
		sn, err = pgx.CollectExactlyOneRow(rows, scanE2BSnapshot)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return sn, fmt.Errorf("postgres: e2b snapshot %s: %w", clip(ref), store.ErrNotFound)
	}
	if err != nil {
		return sn, fmt.Errorf("postgres: get e2b snapshot %s: %w", clip(ref), err)
	}
	return sn, nil
}

// ListE2BSnapshots implements store.E2BSnapshots.
func (s *Store) ListE2BSnapshots(ctx context.Context, tenant string) ([]store.E2BSnapshot, error) {
	if err := s.check("list e2b snapshots", nil); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT `+e2bSnapshotCols+` FROM e2b_snapshots WHERE tenant = $1 ORDER BY created_ns, id`, tenant)
	var out []store.E2BSnapshot
	if err == nil {
		out, err = pgx.CollectRows(rows, scanE2BSnapshot)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: list e2b snapshots: %w", err)
	}
	return out, nil
}

// DeleteE2BSnapshot implements store.E2BSnapshots.
func (s *Store) DeleteE2BSnapshot(ctx context.Context, tenant, id string) error {
	if err := s.check("delete e2b snapshot", nil); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM e2b_snapshots WHERE tenant = $1 AND id = $2`, tenant, id)
		if err != nil {
			return err
		}
		return oneRow(tag, store.ErrNotFound)
	})
	if err != nil {
		return fmt.Errorf("postgres: delete e2b snapshot %s: %w", clip(id), err)
	}
	return nil
}
