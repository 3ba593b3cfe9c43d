package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// migrations is the schema history, from the one list both SQL stores
// share (package schema): migrations[i] brings a database from version i to
// version i+1.
var migrations = schema.SQLite.Migrations()

// migrate brings the database to len(steps) (schema.Dialect.Migrate) in
// one transaction, so a failure leaves it at the version it had. It is
// safe when several processes open the database at once: the write lock
// taken by BEGIN IMMEDIATE serializes them, and the later ones find
// nothing to do.
func migrate(ctx context.Context, db *sql.DB, steps []string, nowNS int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := schema.SQLite.Migrate(ctx, schemaTx{tx}, steps, nowNS); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// schemaTx is a transaction as schema.Dialect.Migrate runs statements in
// it.
type schemaTx struct{ tx *sql.Tx }

func (t schemaTx) Exec(ctx context.Context, query string, args ...any) error {
	_, err := t.tx.ExecContext(ctx, query, args...)
	return err
}

func (t schemaTx) Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error {
	rows, err := t.tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	return each(rows, func(sc sqlrow.Scanner) error { return row(sc.Scan) })
}
