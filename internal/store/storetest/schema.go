package storetest

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// Schema tells RunSchema how to reach a SQL store's database, with the
// store and behind its back.
type Schema struct {
	// Dialect is the dialect of the store's migrations.
	Dialect schema.Dialect
	// NewDB returns the address of a new, empty database (a file's path,
	// a URL) that the test owns.
	NewDB func(t *testing.T) string
	// Open opens a store on database db, without redaction, that applies
	// steps as its migrations, or its own (the dialect's) when steps is
	// nil. RunSchema closes it.
	Open func(ctx context.Context, db string, steps []string) (store.Store, error)
	// Raw runs fn in a transaction on db, bypassing the store (and its
	// locks but the transaction's own), and commits it unless fn fails.
	Raw func(t *testing.T, db string, fn func(tx schema.Tx) error) error
	// Tables is a query of the names of the database's tables.
	Tables string
}

// RunSchema runs the schema suite: how a SQL store migrates its database,
// from an old version, concurrently, atomically, and refuses one newer
// than it knows.
//
//	func TestSchema(t *testing.T) { storetest.RunSchema(t, schemaFactory) }
func RunSchema(t *testing.T, s Schema) {
	for _, tt := range []struct {
		name string
		fn   func(t *testing.T, s Schema)
	}{
		{"MigrateFromV1", testMigrateFromV1},
		{"NewerSchemaRefused", testNewerSchemaRefused},
		{"MigrationAtomic", testMigrationAtomic},
		{"ConcurrentOpen", testConcurrentOpen},
	} {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, s) })
	}
}

// versions returns the versions db records as applied.
func (s Schema) versions(t *testing.T, db string) []int {
	t.Helper()
	var out []int
	err := s.Raw(t, db, func(tx schema.Tx) error {
		return tx.Query(context.Background(), `SELECT version FROM schema_migrations ORDER BY version`, nil,
			func(scan func(...any) error) error {
				var v int
				err := scan(&v)
				out = append(out, v)
				return err
			})
	})
	if err != nil {
		t.Fatalf("read schema versions: %v", err)
	}
	return out
}

// tables returns the names of db's tables.
func (s Schema) tables(t *testing.T, db string) []string {
	t.Helper()
	var out []string
	err := s.Raw(t, db, func(tx schema.Tx) error {
		return tx.Query(context.Background(), s.Tables, nil, func(scan func(...any) error) error {
			var name string
			err := scan(&name)
			out = append(out, name)
			return err
		})
	})
	if err != nil {
		t.Fatalf("list tables: %v", err)
	}
	return out
}

// wantAll fails unless db records each version of the schema once.
func (s Schema) wantAll(t *testing.T, db string) {
	t.Helper()
	got := s.versions(t, db)
	want := make([]int, schema.Version)
	for i := range want {
		want[i] = i + 1
	}
	if !slices.Equal(got, want) {
		t.Fatalf("schema versions = %v, want each of 1..%d once", got, schema.Version)
	}
}

// testMigrateFromV1 builds a version-1 database with data in it, as the
// first release wrote it, and opens it with the current code: the schema
// is brought up to date, the data is intact and still verifies, and the
// newer parts work.
func testMigrateFromV1(t *testing.T, s Schema) {
	ctx := context.Background()
	db := s.NewDB(t)
	id := event.NewRunID(time.Now())
	e := event.Event{Type: event.TypeRunCreated, Time: time.Now().UTC(), Payload: []byte(`{"task":"old","metadata":{"team":"infra"}}`)}
	event.Seal(id, 0, event.Hash{}, &e)
	// Raw SQL, not a Store: today's code reads columns a version-1
	// database lacks.
	p := s.Dialect.Param
	err := s.Raw(t, db, func(tx schema.Tx) error {
		if err := s.Dialect.Migrate(ctx, tx, s.Dialect.Migrations()[:1], 0); err != nil {
			return err
		}
		if err := tx.Exec(ctx, `INSERT INTO runs (id, tenant, task, model, policy, policy_hash, status, created_ns, updated_ns, last_seq, last_hash)
			VALUES (`+p(1)+`, 'a', 'old', '', `+p(2)+`, '', 'queued', `+p(3)+`, `+p(4)+`, 1, `+p(5)+`)`,
			id, []byte{}, e.Time.UnixNano(), e.Time.UnixNano(), e.Hash[:]); err != nil {
			return err
		}
		return tx.Exec(ctx, `INSERT INTO events (run_id, seq, type, time_ns, payload, prev_hash, hash)
			VALUES (`+p(1)+`, `+p(2)+`, `+p(3)+`, `+p(4)+`, `+p(5)+`, `+p(6)+`, `+p(7)+`)`,
			id, e.Seq, string(e.Type), e.Time.UnixNano(), []byte(e.Payload), e.PrevHash[:], e.Hash[:])
	})
	if err != nil {
		t.Fatalf("build a version-1 database: %v", err)
	}
	if got := s.versions(t, db); !slices.Equal(got, []int{1}) || slices.Contains(s.tables(t, db), "artifacts") {
		t.Fatalf("version-1 database: versions %v, tables %v", got, s.tables(t, db))
	}

	for range 2 { // the second open finds nothing to do
		st, err := s.Open(ctx, db, nil)
		if err != nil {
			t.Fatalf("Open(version-1 database) = %v", err)
		}
		s.wantAll(t, db)
		if n, err := store.VerifyRun(ctx, st, id); err != nil || n != 1 {
			t.Fatalf("VerifyRun(old run) = %d, %v", n, err)
		}
		if r, err := st.GetRun(ctx, id); err != nil || r.Task != "old" || len(r.Policy) != 0 || r.Kind != "" {
			t.Fatalf("GetRun(old run) = %+v, %v", r, err)
		}
		if _, err := st.PutArtifact(ctx, store.Artifact{RunID: id, Name: "patch", Digest: "sha256:" + strings.Repeat("0", 64)}); err != nil {
			t.Fatalf("PutArtifact after migration = %v", err)
		}
		if l, err := st.AcquireLease(ctx, id, "w", time.Hour); err != nil || l.Token != 1 {
			t.Fatalf("AcquireLease(old run) = %+v, %v, want token 1", l, err)
		}
		if _, _, err := st.PutPolicy(ctx, store.PolicyVersion{Tenant: "a", Name: "p", Document: []byte("{}")}); err != nil {
			t.Fatalf("PutPolicy after migration = %v", err)
		}
		if _, err := st.CreateTenant(ctx, "a"); err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatalf("CreateTenant after migration = %v", err)
		}
		k := store.APIKey{ID: "key_0123456789abcdef", Tenant: "a", Scopes: []string{"admin"}, Hash: make([]byte, 32)}
		if err := st.CreateAPIKey(ctx, k); err != nil && !errors.Is(err, store.ErrExists) {
			t.Fatalf("CreateAPIKey after migration = %v", err)
		}
		// The old run's labels were indexed by the migration, once.
		if runs, err := st.ListRuns(ctx, store.RunFilter{Metadata: map[string]string{"team": "infra"}}); err != nil || len(runs) != 1 || runs[0].ID != id {
			t.Fatalf("ListRuns(old run's label) = %+v, %v", runs, err)
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// testNewerSchemaRefused: a database written by a newer airlock is not
// opened, and not touched.
func testNewerSchemaRefused(t *testing.T, s Schema) {
	ctx := context.Background()
	db := s.NewDB(t)
	st, err := s.Open(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	err = s.Raw(t, db, func(tx schema.Tx) error {
		return tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_ns) VALUES (`+s.Dialect.Param(1)+`, 0)`, schema.Version+1)
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = s.Open(ctx, db, nil)
	var ve *store.SchemaVersionError
	if !errors.As(err, &ve) || !errors.Is(err, store.ErrSchemaTooNew) || ve.Have != schema.Version+1 || ve.Supported != schema.Version {
		t.Fatalf("Open(newer schema) = %v, want a SchemaVersionError %d > %d", err, schema.Version+1, schema.Version)
	}
	if got := s.versions(t, db); len(got) != schema.Version+1 {
		t.Fatalf("versions after refused Open = %v", got)
	}
}

// testMigrationAtomic: a migration that fails half-way leaves the database
// as it was, without a trace of the failed open.
func testMigrationAtomic(t *testing.T, s Schema) {
	ctx := context.Background()
	db := s.NewDB(t)
	steps := append(s.Dialect.Migrations()[:1],
		`CREATE TABLE half (x INTEGER); CREATE TABLE runs (x INTEGER);`) // the second statement fails
	_, err := s.Open(ctx, db, steps)
	if err == nil || !strings.Contains(err.Error(), "schema version 2") {
		t.Fatalf("open with a failing migration = %v, want an error about version 2", err)
	}
	// Not even version 1, applied in the same transaction, stayed.
	for _, table := range s.tables(t, db) {
		if table == "half" || table == "runs" || table == "schema_migrations" {
			t.Fatalf("a failed migration left table %s behind", table)
		}
	}
	st, err := s.Open(ctx, db, nil)
	if err != nil {
		t.Fatalf("Open after a failed migration = %v", err)
	}
	st.Close()
	s.wantAll(t, db)
}

// testConcurrentOpen: several stores opening a new database at once apply
// the migrations exactly once.
func testConcurrentOpen(t *testing.T, s Schema) {
	ctx := context.Background()
	db := s.NewDB(t)
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			st, err := s.Open(ctx, db, nil)
			if err == nil {
				err = st.Close()
			}
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatalf("concurrent Open = %v", err)
		}
	}
	s.wantAll(t, db)
}
