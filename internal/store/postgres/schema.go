package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/airlockrun/airlock/internal/store/schema"
)

// migrations is the schema history, from the one list both SQL stores
// share (package schema), in PostgreSQL's dialect: migrations[i] brings a
// database from version i to version i+1.
var migrations = schema.Postgres.Migrations()

// migrateLock is the key of the transaction-scoped advisory lock that
// serializes migrations of one database ("airlock" in ASCII).
const migrateLock = 0x61_69_72_6c_6f_63_6b

// migrate brings the database to len(steps) (schema.Dialect.Migrate) in
// one transaction (PostgreSQL DDL is transactional), so a failure leaves
// it at the version it had. It is safe when several processes open the
// database at once: an advisory lock serializes them, and the later ones
// find nothing to do.
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
	return schema.Postgres.Migrate(ctx, schemaTx{tx}, steps, nowNS)
}

// schemaTx is a transaction as schema.Dialect.Migrate runs statements in
// it.
type schemaTx struct{ tx pgx.Tx }

func (t schemaTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.Exec(ctx, query, args...)
	return err
}

func (t schemaTx) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := t.tx.Query(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := row(rows.Scan); err != nil {
			return err
		}
	}
	return rows.Err()
}
