package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

func TestSchemaVersion(t *testing.T) {
	if SchemaVersion != len(migrations) || SchemaVersion != sqlite.SchemaVersion {
		t.Fatalf("SchemaVersion = %d, %d migrations, SQLite's SchemaVersion %d: want all equal", SchemaVersion, len(migrations), sqlite.SchemaVersion)
	}
	if !slices.Equal(migrations, schema.Postgres()) {
		t.Fatal("the PostgreSQL store does not apply schema.Postgres()")
	}
}

func versions(t *testing.T, c *pgx.Conn) []int {
	t.Helper()
	rows, err := c.Query(context.Background(), `SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tableExists(t *testing.T, c *pgx.Conn, name string) bool {
	t.Helper()
	var ok bool
	if err := c.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

func connectURL(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// TestMigrateFromV1 builds a version-1 database with data in it and opens
// it with the current code: the schema is brought up to date, the data is
// intact and still verifies, and the newer parts work.
func TestMigrateFromV1(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	// Raw SQL, not a Store: today's code reads columns a version-1
	// database lacks.
	c := connectURL(t, url)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := migrateIn(ctx, tx, migrations[:1], 0); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	id := event.NewRunID(time.Now())
	e := event.Event{Type: event.TypeRunCreated, Time: time.Now().UTC(), Payload: []byte(`{"task":"old","metadata":{"team":"infra"}}`)}
	event.Seal(id, 0, event.Hash{}, &e)
	if _, err := tx.Exec(ctx, `INSERT INTO runs (id, tenant, task, model, policy, policy_hash, status, created_ns, updated_ns, last_seq, last_hash)
		VALUES ($1, 'a', 'old', '', '', '', 'queued', $2, $2, 1, $3)`, id, e.Time.UnixNano(), e.Hash[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO events (run_id, seq, type, time_ns, payload, prev_hash, hash) VALUES ($1, $2, $3, $4, $5, $6, $7)`,
		id, e.Seq, string(e.Type), e.Time.UnixNano(), []byte(e.Payload), e.PrevHash[:], e.Hash[:]); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, c); len(got) != 1 || tableExists(t, c, "artifacts") {
		t.Fatalf("version-1 database: versions %v, artifacts table %v", got, tableExists(t, c, "artifacts"))
	}
	for range 2 { // the second open finds nothing to do
		s, err := Open(ctx, url, Options{Redactor: store.NoRedaction})
		if err != nil {
			t.Fatalf("Open(version-1 database) = %v", err)
		}
		if got := versions(t, c); len(got) != SchemaVersion || got[len(got)-1] != SchemaVersion {
			t.Fatalf("versions after Open = %v, want 1..%d once each", got, SchemaVersion)
		}
		if n, err := store.VerifyRun(ctx, s, id); err != nil || n != 1 {
			t.Fatalf("VerifyRun(old run) = %d, %v", n, err)
		}
		if _, err := s.PutArtifact(ctx, store.Artifact{RunID: id, Name: "patch", Digest: "sha256:" + strings.Repeat("0", 64)}); err != nil {
			t.Fatalf("PutArtifact after migration = %v", err)
		}
		if l, err := s.AcquireLease(ctx, id, "w", time.Hour); err != nil || l.Token != 1 {
			t.Fatalf("AcquireLease(old run) = %+v, %v, want token 1", l, err)
		}
		if _, _, err := s.PutPolicy(ctx, store.PolicyVersion{Tenant: "a", Name: "p", Document: []byte("{}")}); err != nil {
			t.Fatalf("PutPolicy after migration = %v", err)
		}
		if _, err := s.CreateTenant(ctx, "a"); err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatalf("CreateTenant after migration = %v", err)
		}
		k := store.APIKey{ID: "key_0123456789abcdef", Tenant: "a", Scopes: []string{"admin"}, Hash: make([]byte, 32)}
		if err := s.CreateAPIKey(ctx, k); err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatalf("CreateAPIKey after migration = %v", err)
		}
		// The old run's labels were indexed by the migration, once.
		if runs, err := s.ListRuns(ctx, store.RunFilter{Metadata: map[string]string{"team": "infra"}}); err != nil || len(runs) != 1 || runs[0].ID != id {
			t.Fatalf("ListRuns(old run's label) = %+v, %v", runs, err)
		}
		s.Close()
	}
}

// TestNewerSchemaRefused: a database written by a newer airlock is not
// opened, and not touched.
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	s, err := Open(ctx, url, Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	c := connectURL(t, url)
	if _, err := c.Exec(ctx, `INSERT INTO schema_migrations (version, applied_ns) VALUES ($1, 0)`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, url, Options{Redactor: store.NoRedaction})
	var ve *store.SchemaVersionError
	if !errors.As(err, &ve) || !errors.Is(err, store.ErrSchemaTooNew) || ve.Have != SchemaVersion+1 || ve.Supported != SchemaVersion {
		t.Fatalf("Open(newer schema) = %v, want a SchemaVersionError %d > %d", err, SchemaVersion+1, SchemaVersion)
	}
	if got := versions(t, c); len(got) != SchemaVersion+1 {
		t.Fatalf("versions after refused Open = %v", got)
	}
}

// TestMigrationAtomic: a migration that fails half-way leaves the database
// as it was, without a trace of the failed open.
func TestMigrationAtomic(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	steps := append(slices.Clone(migrations[:1]),
		`CREATE TABLE half (x BIGINT); CREATE TABLE runs (x BIGINT);`) // the second statement fails
	_, err := open(ctx, url, Options{Redactor: store.NoRedaction}, steps)
	if err == nil || !strings.Contains(err.Error(), "schema version 2") {
		t.Fatalf("open with a failing migration = %v, want an error about version 2", err)
	}
	c := connectURL(t, url)
	// Not even version 1, applied in the same transaction, stayed.
	for _, table := range []string{"half", "runs", "schema_migrations"} {
		if tableExists(t, c, table) {
			t.Fatalf("a failed migration left table %s behind", table)
		}
	}
	s, err := Open(ctx, url, Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatalf("Open after a failed migration = %v", err)
	}
	s.Close()
}

// TestConcurrentOpen: several stores opening a new database at once apply
// the migrations exactly once.
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	url := pg.NewDatabase(t)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			s, err := Open(ctx, url, Options{Redactor: store.NoRedaction})
			if err == nil {
				err = s.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Open = %v", err)
		}
	}
	if got := versions(t, connectURL(t, url)); len(got) != SchemaVersion {
		t.Fatalf("versions = %v, want each of 1..%d once", got, SchemaVersion)
	}
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
	for _, want := range []string{"table runs", "table events", "table artifacts", "table ledger", "table policies", "table tenants", "table api_keys", fmt.Sprintf("version %d", SchemaVersion)} {
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
