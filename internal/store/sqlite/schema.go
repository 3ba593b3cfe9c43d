package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
)

// migrations is the schema history: migrations[i] brings a database from
// version i to version i+1. Entries are never edited once released, only
// appended. The SQL keeps to what PostgreSQL also understands, except
// WITHOUT ROWID (a storage hint the PostgreSQL store leaves out).
//
// Times are INTEGER nanoseconds since 1970 in UTC, so every backend keeps
// them exactly (the hash chain covers event times to the nanosecond), and
// payloads are BLOBs, so the hashed bytes are stored as they are (a JSON
// column type would reformat them).
var migrations = []string{
	// 1: runs and their event logs.
	`CREATE TABLE runs (
		id            TEXT PRIMARY KEY,
		tenant        TEXT NOT NULL,
		task          TEXT NOT NULL,
		model         TEXT NOT NULL,
		policy        BLOB NOT NULL,
		policy_hash   TEXT NOT NULL,
		status        TEXT NOT NULL,
		created_ns    INTEGER NOT NULL,
		updated_ns    INTEGER NOT NULL,
		finished_ns   INTEGER,
		parent_run_id TEXT REFERENCES runs (id),
		parent_seq    INTEGER,
		last_seq      INTEGER NOT NULL DEFAULT 0,
		last_hash     BLOB
	);
	CREATE INDEX runs_tenant_id ON runs (tenant, id);
	CREATE INDEX runs_status_id ON runs (status, id);
	CREATE TABLE events (
		run_id    TEXT NOT NULL REFERENCES runs (id),
		seq       INTEGER NOT NULL,
		type      TEXT NOT NULL,
		time_ns   INTEGER NOT NULL,
		payload   BLOB NOT NULL,
		prev_hash BLOB NOT NULL,
		hash      BLOB NOT NULL,
		PRIMARY KEY (run_id, seq)
	) WITHOUT ROWID;`,

	// 2: artifact metadata; the digest index finds whether a blob is still
	// referenced before it is deleted.
	`CREATE TABLE artifacts (
		run_id     TEXT NOT NULL REFERENCES runs (id),
		name       TEXT NOT NULL,
		digest     TEXT NOT NULL,
		size       INTEGER NOT NULL,
		media_type TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		PRIMARY KEY (run_id, name)
	) WITHOUT ROWID;
	CREATE INDEX artifacts_digest ON artifacts (digest);`,
}

// SchemaVersion is the schema version this build writes: len(migrations).
const SchemaVersion = 2

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
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_migrations (version, applied_ns) VALUES (?, ?)`, v, nowNS); err != nil {
			return fmt.Errorf("record schema version %d: %w", v, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
