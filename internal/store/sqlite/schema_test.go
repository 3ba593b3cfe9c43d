package sqlite

import (
	"context"
	"database/sql"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/storetest"
)

func TestSchema(t *testing.T) {
	storetest.RunSchema(t, storetest.Schema{
		Dialect: schema.SQLite,
		NewDB:   func(t *testing.T) string { return filepath.Join(t.TempDir(), "airlock.db") },
		Open: func(ctx context.Context, path string, steps []string) (store.Store, error) {
			if steps == nil {
				return Open(ctx, path, Options{Redactor: store.NoRedaction})
			}
			return open(ctx, path, Options{Redactor: store.NoRedaction}, steps)
		},
		Raw: func(t *testing.T, path string, fn func(schema.Tx) error) error {
			db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000")
			if err != nil {
				return err
			}
			defer db.Close()
			tx, err := db.Begin()
			if err != nil {
				return err
			}
			if err := fn(schemaTx{tx}); err != nil {
				_ = tx.Rollback()
				return err
			}
			return tx.Commit()
		},
		Tables: `SELECT name FROM sqlite_master WHERE type = 'table'`,
	})
}
