package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// migrations is the schema history, from the one list both SQL stores
// share (package schema), in PostgreSQL's dialect: migrations[i] brings a
// database from version i to version i+1.
var migrations = schema.Postgres()

// SchemaVersion is the schema version this build writes: len(migrations).
const SchemaVersion = schema.Version

// migrateLock is the key of the transaction-scoped advisory lock that
// serializes migrations of one database ("airlock" in ASCII).
const migrateLock = 0x61_69_72_6c_6f_63_6b

// migrate brings the database to len(steps) in one transaction (PostgreSQL
// DDL is transactional), so a failure leaves it at the version it had. It
// is idempotent, and safe when several processes open the database at
// once: an advisory lock serializes them, and the later ones find nothing
// to do. A database newer than len(steps) is refused with a
// *store.SchemaVersionError and not modified.
func migrate(ctx context.Context, pool *pgxpool.Pool, steps []string, nowNS int64) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := migrateIn(ctx, tx, steps, nowNS); err != nil {
		rollback(ctx, tx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

func migrateIn(ctx context.Context, tx pgx.Tx, steps []string, nowNS int64) error {
	// Taken before anything else: CREATE TABLE IF NOT EXISTS itself is
	// not safe against a concurrent one.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
		return fmt.Errorf("lock schema: %w", err)
	}
	if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    BIGINT PRIMARY KEY,
		applied_ns BIGINT NOT NULL
	)`); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	if err := tx.QueryRow(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`).Scan(&have); err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(steps) {
		return &store.SchemaVersionError{Have: have, Supported: len(steps)}
	}
	for v := have + 1; v <= len(steps); v++ {
		// No arguments: pgx sends it as a simple query, which may hold
		// several statements.
		if _, err := tx.Exec(ctx, steps[v-1]); err != nil {
			return fmt.Errorf("apply schema version %d: %w", v, err)
		}
		if v == schema.MetadataVersion {
			if err := backfillMetadata(ctx, tx); err != nil {
				return fmt.Errorf("apply schema version %d: %w", v, err)
			}
		}
		if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_ns) VALUES ($1, $2)`, v, nowNS); err != nil {
			return fmt.Errorf("record schema version %d: %w", v, err)
		}
	}
	return nil
}

// backfillMetadata indexes the metadata of the runs stored before
// run_metadata existed, from their run.created events.
func backfillMetadata(ctx context.Context, tx pgx.Tx) error {
	rows, err := tx.Query(ctx, `SELECT run_id, payload FROM events WHERE seq = 1 AND type = $1`, string(event.TypeRunCreated))
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
		if _, err := tx.Exec(ctx, `INSERT INTO run_metadata (run_id, key, value) VALUES ($1, $2, $3)`, l.run, l.key, l.value); err != nil {
			return err
		}
	}
	return nil
}
