package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/storetest"
)

func TestSchema(t *testing.T) {
	storetest.RunSchema(t, storetest.Schema{
		Dialect: schema.Postgres,
		NewDB:   func(t *testing.T) string { return pg.NewDatabase(t) },
		Open: func(ctx context.Context, url string, steps []string) (store.Store, error) {
			if steps == nil {
				return Open(ctx, url, Options{Redactor: store.NoRedaction})
			}
			return open(ctx, url, Options{Redactor: store.NoRedaction}, steps)
		},
		Raw: func(t *testing.T, url string, fn func(schema.Tx) error) error {
			ctx := context.Background()
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				return err
			}
			defer c.Close(ctx)
			tx, err := c.Begin(ctx)
			if err != nil {
				return err
			}
			if err := fn(schemaTx{tx}); err != nil {
				rollback(ctx, tx)
				return err
			}
			return tx.Commit(ctx)
		},
		Tables: `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`,
	})
}

// TestSchemaMatchesSQLite opens a database of each store and compares what
// their catalogs say: the same tables, columns (type, NOT NULL, default),
// primary and foreign keys, indexes, and schema version. The migrations
// come from one list, so this checks its PostgreSQL translation.
func TestSchemaMatchesSQLite(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	ls, err := sqlite.Open(ctx, path, sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	ls.Close()
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	lite := sqliteSchema(t, db)

	s := newStore(t, store.NoRedaction)
	pgs := postgresSchema(t, rawConn(t, s))
	if !slices.Equal(lite, pgs) {
		t.Errorf("the schemas differ.\nSQLite:\n\t%s\nPostgreSQL:\n\t%s", strings.Join(lite, "\n\t"), strings.Join(pgs, "\n\t"))
	}
	for _, want := range []string{"table runs", "table events", "table artifacts", "table ledger", "table policies", "table tenants", "table api_keys", fmt.Sprintf("version %d", schema.Version)} {
		if !slices.Contains(pgs, want) {
			t.Errorf("schema lacks %q: %v", want, pgs)
		}
	}
}

// sqliteSchema describes the SQLite database's schema as sorted facts,
// in the words postgresSchema uses.
func sqliteSchema(t *testing.T, db *sql.DB) []string {
	t.Helper()
	var facts []string
	query := func(q string, args []any, dest ...any) func(yield func() bool) {
		return func(yield func() bool) {
			rows, err := db.Query(q, args...)
			if err != nil {
				t.Fatal(err)
			}
			defer rows.Close()
			for rows.Next() {
				if err := rows.Scan(dest...); err != nil {
					t.Fatal(err)
				}
				if !yield() {
					return
				}
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	var tables []string
	var name string
	for range query(`SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name`, nil, &name) {
		tables = append(tables, name)
	}
	types := map[string]string{"INTEGER": "int64", "TEXT": "text", "BLOB": "bytes"}
	for _, tb := range tables {
		facts = append(facts, "table "+tb)
		var (
			col, typ string
			notNull  bool
			dflt     sql.NullString
			pk       int
		)
		pkCols := map[int]string{}
		for range query(`SELECT name, type, "notnull", dflt_value, pk FROM pragma_table_info(?)`, []any{tb}, &col, &typ, &notNull, &dflt, &pk) {
			// A primary key column is NOT NULL in PostgreSQL; SQLite
			// allows NULL in a TEXT key of a rowid table, which the
			// store never writes.
			facts = append(facts, column(tb, col, types[typ], notNull || pk > 0, dflt.String))
			if pk > 0 {
				pkCols[pk] = col
			}
		}
		var key []string
		for i := 1; i <= len(pkCols); i++ {
			key = append(key, pkCols[i])
		}
		facts = append(facts, fmt.Sprintf("primary key %s (%s)", tb, strings.Join(key, ", ")))
		var from, ref, to string
		for range query(`SELECT "from", "table", "to" FROM pragma_foreign_key_list(?)`, []any{tb}, &from, &ref, &to) {
			facts = append(facts, fmt.Sprintf("foreign key %s (%s) -> %s (%s)", tb, from, ref, to))
		}
		var idx string
		for range query(`SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL`, []any{tb}, &idx) {
			var cols []string
			var c string
			for range query(`SELECT name FROM pragma_index_info(?) ORDER BY seqno`, []any{idx}, &c) {
				cols = append(cols, c)
			}
			facts = append(facts, fmt.Sprintf("index %s on %s (%s)", idx, tb, strings.Join(cols, ", ")))
		}
	}
	var v int
	for range query(`SELECT MAX(version) FROM schema_migrations`, nil, &v) {
		facts = append(facts, fmt.Sprintf("version %d", v))
	}
	slices.Sort(facts)
	return facts
}

// postgresSchema describes the PostgreSQL database's schema (the current
// schema of its search path) as sorted facts. It also checks that every
// text column compares by bytes, as SQLite's do.
func postgresSchema(t *testing.T, c *pgx.Conn) []string {
	t.Helper()
	ctx := context.Background()
	var facts []string
	each := func(q string, scan func(pgx.CollectableRow) (string, error)) {
		rows, err := c.Query(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		got, err := pgx.CollectRows(rows, scan)
		if err != nil {
			t.Fatal(err)
		}
		facts = append(facts, got...)
	}
	each(`SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema()`,
		func(r pgx.CollectableRow) (string, error) {
			var tb string
			err := r.Scan(&tb)
			return "table " + tb, err
		})
	types := map[string]string{"bigint": "int64", "text": "text", "bytea": "bytes"}
	each(`SELECT table_name, column_name, data_type, is_nullable = 'NO', COALESCE(column_default, ''), COALESCE(collation_name, '')
		FROM information_schema.columns WHERE table_schema = current_schema()`,
		func(r pgx.CollectableRow) (string, error) {
			var (
				tb, col, typ, dflt, coll string
				notNull                  bool
			)
			err := r.Scan(&tb, &col, &typ, &notNull, &dflt, &coll)
			if typ == "text" && coll != "C" {
				t.Errorf("column %s.%s has collation %q, want C (byte order, as in SQLite)", tb, col, coll)
			}
			return column(tb, col, types[typ], notNull, dflt), err
		})
	each(`SELECT tc.table_name, string_agg(k.column_name, ', ' ORDER BY k.ordinal_position)
		FROM information_schema.table_constraints tc
		JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
		WHERE tc.table_schema = current_schema() AND tc.constraint_type = 'PRIMARY KEY'
		GROUP BY tc.table_name`,
		func(r pgx.CollectableRow) (string, error) {
			var tb, cols string
			err := r.Scan(&tb, &cols)
			return fmt.Sprintf("primary key %s (%s)", tb, cols), err
		})
	each(`SELECT k.table_name, k.column_name, u.table_name, u.column_name
		FROM information_schema.table_constraints tc
		JOIN information_schema.key_column_usage k USING (constraint_schema, constraint_name)
		JOIN information_schema.constraint_column_usage u USING (constraint_schema, constraint_name)
		WHERE tc.table_schema = current_schema() AND tc.constraint_type = 'FOREIGN KEY'`,
		func(r pgx.CollectableRow) (string, error) {
			var tb, col, ref, to string
			err := r.Scan(&tb, &col, &ref, &to)
			return fmt.Sprintf("foreign key %s (%s) -> %s (%s)", tb, col, ref, to), err
		})
	each(`SELECT i.relname, t.relname, string_agg(a.attname, ', ' ORDER BY k.ord)
		FROM pg_index x
		JOIN pg_class i ON i.oid = x.indexrelid
		JOIN pg_class t ON t.oid = x.indrelid
		CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord)
		JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum
		WHERE t.relnamespace = current_schema()::regnamespace AND NOT x.indisprimary
		GROUP BY i.relname, t.relname`,
		func(r pgx.CollectableRow) (string, error) {
			var idx, tb, cols string
			err := r.Scan(&idx, &tb, &cols)
			return fmt.Sprintf("index %s on %s (%s)", idx, tb, cols), err
		})
	each(`SELECT MAX(version) FROM schema_migrations`, func(r pgx.CollectableRow) (string, error) {
		var v int
		err := r.Scan(&v)
		return fmt.Sprintf("version %d", v), err
	})
	slices.Sort(facts)
	return facts
}

func column(table, name, typ string, notNull bool, dflt string) string {
	s := fmt.Sprintf("column %s.%s %s", table, name, typ)
	if typ == "" {
		s += " (unknown type)"
	}
	if notNull {
		s += " NOT NULL"
	}
	if dflt != "" {
		s += " DEFAULT " + dflt
	}
	return s
}
