package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// forget moves the WAL's pages into the database file and empties the WAL
// after a deletion: the WAL holds whole page images, so until a checkpoint
// the deleted rows' bytes are still in it (secure_delete zeroes them in the
// pages, not in older copies). Best effort: a reader holding an old
// snapshot keeps the WAL until it ends, and the next automatic checkpoint
// then does the same.
func (s *Store) forget(ctx context.Context) {
	_, _ = s.w.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
}

// TombstonePayloads implements store.Store.
func (s *Store) TombstonePayloads(ctx context.Context, runID string, at time.Time, reason string) (replaced, kept int64, free []string, err error) {
	if err := s.check("tombstone payloads", store.CheckRunID(runID)); err != nil {
		return 0, 0, nil, err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		replaced, kept, free, err = schema.SQLite.TombstonePayloads(ctx, schemaTx{tx}, runID, at, reason)
		return err
	})
	if err != nil {
		return 0, 0, nil, fmt.Errorf("sqlite: run %s: tombstone payloads: %w", clip(runID), err)
	}
	s.forget(ctx)
	return replaced, kept, free, nil
}

// TombstoneCheckpoints implements store.Store.
func (s *Store) TombstoneCheckpoints(ctx context.Context, runID string, at time.Time, reason string) (replaced int64, err error) {
	if err := s.check("tombstone checkpoints", store.CheckRunID(runID)); err != nil {
		return 0, err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		replaced, err = schema.SQLite.TombstoneCheckpoints(ctx, schemaTx{tx}, runID, at, reason)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: run %s: tombstone checkpoints: %w", clip(runID), err)
	}
	if replaced > 0 {
		s.forget(ctx)
	}
	return replaced, nil
}

// DeleteArtifacts implements store.Store.
func (s *Store) DeleteArtifacts(ctx context.Context, runID string, at time.Time, reason string) (deleted int64, free []string, err error) {
	if err := s.check("delete artifacts", store.CheckRunID(runID)); err != nil {
		return 0, nil, err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		deleted, free, err = schema.SQLite.DeleteArtifacts(ctx, schemaTx{tx}, runID, at, reason)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("sqlite: run %s: delete artifacts: %w", clip(runID), err)
	}
	if deleted > 0 {
		s.forget(ctx)
	}
	return deleted, free, nil
}

// PurgeRun implements store.Store.
func (s *Store) PurgeRun(ctx context.Context, runID string, d store.Deletion) (store.Deletion, []string, error) {
	if err := s.check("purge run", store.CheckRunID(runID)); err != nil {
		return d, nil, err
	}
	var free []string
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, free, err = schema.SQLite.PurgeRun(ctx, schemaTx{tx}, runID, d, s.now().UnixNano())
		return err
	})
	if err != nil {
		return d, nil, fmt.Errorf("sqlite: run %s: purge: %w", clip(runID), err)
	}
	s.forget(ctx)
	return d, free, nil
}

// DeleteTenant implements store.Store.
func (s *Store) DeleteTenant(ctx context.Context, tenant string, d store.Deletion) (store.Deletion, []string, error) {
	if err := s.check("delete tenant", nil); err != nil {
		return d, nil, err
	}
	var free []string
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, free, err = schema.SQLite.DeleteTenant(ctx, schemaTx{tx}, tenant, d, s.now().UnixNano())
		return err
	})
	if err != nil {
		return d, nil, fmt.Errorf("sqlite: delete tenant: %w", err)
	}
	s.forget(ctx)
	return d, free, nil
}

// RecordDeletion implements store.Store.
func (s *Store) RecordDeletion(ctx context.Context, d store.Deletion) (store.Deletion, error) {
	if err := s.check("record deletion", nil); err != nil {
		return d, err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		d, err = schema.SQLite.RecordDeletion(ctx, schemaTx{tx}, d, s.now().UnixNano())
		return err
	})
	if err != nil {
		return d, fmt.Errorf("sqlite: %w", err)
	}
	return d, nil
}

// ListDeletions implements store.Store.
func (s *Store) ListDeletions(ctx context.Context, tenant string, limit int) ([]store.Deletion, error) {
	if err := s.check("list deletions", nil); err != nil {
		return nil, err
	}
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("sqlite: list deletions: begin: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	out, err := schema.SQLite.ListDeletions(ctx, schemaTx{tx}, tenant, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return out, nil
}

// ExpireDeletions implements store.Store.
func (s *Store) ExpireDeletions(ctx context.Context, before time.Time, tenants []string, others bool) (int64, error) {
	if err := s.check("expire deletions", nil); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, err = schema.SQLite.ExpireDeletions(ctx, schemaTx{tx}, before, tenants, others)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	return n, nil
}
