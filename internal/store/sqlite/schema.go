package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// migrations is the schema history, from the one list both SQL stores
// share (package schema): migrations[i] brings a database from version i to
// version i+1.
var migrations = schema.SQLite()

// SchemaVersion is the schema version this build writes: len(migrations).
const SchemaVersion = schema.Version

// migrate brings the database to len(steps) in one transaction, so a
// failure leaves it at the version it had. It is idempotent, and safe when
// several processes open the database at once: the write lock taken by
// BEGIN IMMEDIATE serializes them, and the later ones find nothing to do. A
// database newer than len(steps) is refused with a *store.SchemaVersionError
// and not modified.
func migrate(ctx context.Context, db *sql.DB, steps []string, nowNS int64) (err error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_ns INTEGER NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(steps) {
		return &store.SchemaVersionError{Have: have, Supported: len(steps)}
	}
	for v := have + 1; v <= len(steps); v++ {
		if _, err := tx.ExecContext(ctx, steps[v-1]); err != nil {
			return fmt.Errorf("apply schema version %d: %w", v, err)
		}
		if v == schema.MetadataVersion {
			if err := backfillMetadata(ctx, tx); err != nil {
				return fmt.Errorf("apply schema version %d: %w", v, err)
			}
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_ns) VALUES (?, ?)`, v, nowNS); err != nil {
			return fmt.Errorf("record schema version %d: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// backfillMetadata indexes the metadata of the runs stored before
// run_metadata existed, from their run.created events.
func backfillMetadata(ctx context.Context, tx *sql.Tx) error {
	rows, err := tx.QueryContext(ctx, `SELECT run_id, payload FROM events WHERE seq = 1 AND type = ?`, string(event.TypeRunCreated))
	if err != nil {
		return err
	}
	type label struct{ run, key, value string }
	var labels []label
	for rows.Next() {
		var run string
		var payload []byte
		if err := rows.Scan(&run, &payload); err != nil {
			rows.Close()
			return err
		}
		for k, v := range store.CreatedMetadata(payload) {
			labels = append(labels, label{run, k, v})
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return err
	}
	for _, l := range labels {
		if _, err := tx.ExecContext(ctx, `INSERT INTO run_metadata (run_id, key, value) VALUES (?, ?, ?)`, l.run, l.key, l.value); err != nil {
			return err
		}
	}
	return nil
}
