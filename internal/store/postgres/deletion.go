package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// TombstonePayloads implements store.Store.
func (s *Store) TombstonePayloads(ctx context.Context, runID string, at time.Time, reason string) (replaced, kept int64, free []string, err error) {
	if err := s.check("tombstone payloads", store.CheckRunID(runID)); err != nil {
		return 0, 0, nil, err
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		// Lock the run's row: an append in flight waits, so no event is
		// written between the read of a page and its tombstones.
		if _, err := tx.Exec(ctx, `SELECT id FROM runs WHERE id = $1 FOR UPDATE`, runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		var err error
		replaced, kept, free, err = schema.Postgres.TombstonePayloads(ctx, schemaTx{tx}, runID, at, reason)
		return err
	})
	if err != nil {
		return 0, 0, nil, fmt.Errorf("postgres: run %s: tombstone payloads: %w", clip(runID), err)
	}
	return replaced, kept, free, nil
}

// TombstoneCheckpoints implements store.Store.
func (s *Store) TombstoneCheckpoints(ctx context.Context, runID string, at time.Time, reason string) (replaced int64, err error) {
	if err := s.check("tombstone checkpoints", store.CheckRunID(runID)); err != nil {
		return 0, err
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT id FROM runs WHERE id = $1 FOR UPDATE`, runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		var err error
		replaced, err = schema.Postgres.TombstoneCheckpoints(ctx, schemaTx{tx}, runID, at, reason)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: run %s: tombstone checkpoints: %w", clip(runID), err)
	}
	return replaced, nil
}

// DeleteArtifacts implements store.Store.
func (s *Store) DeleteArtifacts(ctx context.Context, runID string, at time.Time, reason string) (deleted int64, free []string, err error) {
	if err := s.check("delete artifacts", store.CheckRunID(runID)); err != nil {
		return 0, nil, err
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT id FROM runs WHERE id = $1 FOR UPDATE`, runID); err != nil {
			return fmt.Errorf("lock run: %w", err)
		}
		var err error
		deleted, free, err = schema.Postgres.DeleteArtifacts(ctx, schemaTx{tx}, runID, at, reason)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("postgres: run %s: delete artifacts: %w", clip(runID), err)
	}
	return deleted, free, nil
}

// PurgeRun implements store.Store.
func (s *Store) PurgeRun(ctx context.Context, runID string, d store.Deletion) (store.Deletion, []string, error) {
	if err := s.check("purge run", store.CheckRunID(runID)); err != nil {
		return d, nil, err
	}
	var free []string
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		d, free, err = schema.Postgres.PurgeRun(ctx, schemaTx{tx}, runID, d, s.now().UnixNano())
		return err
	})
	if err != nil {
		return d, nil, fmt.Errorf("postgres: run %s: purge: %w", clip(runID), err)
	}
	return d, free, nil
}

// DeleteTenant implements store.Store.
func (s *Store) DeleteTenant(ctx context.Context, tenant string, d store.Deletion) (store.Deletion, []string, error) {
	if err := s.check("delete tenant", nil); err != nil {
		return d, nil, err
	}
	var free []string
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		d, free, err = schema.Postgres.DeleteTenant(ctx, schemaTx{tx}, tenant, d, s.now().UnixNano())
		return err
	})
	if err != nil {
		return d, nil, fmt.Errorf("postgres: delete tenant: %w", err)
	}
	return d, free, nil
}

// RecordDeletion implements store.Store.
func (s *Store) RecordDeletion(ctx context.Context, d store.Deletion) (store.Deletion, error) {
	if err := s.check("record deletion", nil); err != nil {
		return d, err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		d, err = schema.Postgres.RecordDeletion(ctx, schemaTx{tx}, d, s.now().UnixNano())
		return err
	})
	if err != nil {
		return d, fmt.Errorf("postgres: %w", err)
	}
	return d, nil
}

// ListDeletions implements store.Store.
func (s *Store) ListDeletions(ctx context.Context, tenant string, limit int) ([]store.Deletion, error) {
	if err := s.check("list deletions", nil); err != nil {
		return nil, err
	}
	var out []store.Deletion
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		out, err = schema.Postgres.ListDeletions(ctx, schemaTx{tx}, tenant, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return out, nil
}

// ExpireDeletions implements store.Store.
func (s *Store) ExpireDeletions(ctx context.Context, before time.Time, tenants []string, others bool) (int64, error) {
	if err := s.check("expire deletions", nil); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = schema.Postgres.ExpireDeletions(ctx, schemaTx{tx}, before, tenants, others)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	return n, nil
}
