package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

// TestSchemaVersion: the store applies the shared migrations as they are
// (package schema pins their text).
func TestSchemaVersion(t *testing.T) {
	if SchemaVersion != len(migrations) {
		t.Fatalf("SchemaVersion = %d, but there are %d migrations", SchemaVersion, len(migrations))
	}
	if !slices.Equal(migrations, schema.SQLite()) {
		t.Fatal("the SQLite store does not apply schema.SQLite()")
	}
}

func rawOpen(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func versions(t *testing.T, db *sql.DB) []int {
	t.Helper()
	rows, err := db.Query(`SELECT version FROM schema_migrations ORDER BY version`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []int
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			t.Fatal(err)
		}
		out = append(out, v)
	}
	return out
}

func tableExists(t *testing.T, db *sql.DB, name string) bool {
	t.Helper()
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n == 1
}

// TestMigrateFromV1 builds a version-1 database with data in it, as the
// first release wrote it, and opens it with the current code: the
// schema is brought up to date, the data is intact and still verifies, and
// the newer parts work.
func TestMigrateFromV1(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "v1.db")
	// Raw SQL, not a Store: today's code reads columns a version-1
	// database lacks.
	db := rawOpen(t, path)
	if err := migrate(ctx, db, migrations[:1], 0); err != nil {
		t.Fatalf("migrate to version 1: %v", err)
	}
	id := event.NewRunID(time.Now())
	e := event.Event{Type: event.TypeRunCreated, Time: time.Now().UTC(), Payload: []byte(`{"task":"old","metadata":{"team":"infra"}}`)}
	event.Seal(id, 0, event.Hash{}, &e)
	if _, err := db.Exec(`INSERT INTO runs (id, tenant, task, model, policy, policy_hash, status, created_ns, updated_ns, last_seq, last_hash)
		VALUES (?, 'a', 'old', '', x'', '', 'queued', ?, ?, 1, ?)`, id, e.Time.UnixNano(), e.Time.UnixNano(), e.Hash[:]); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`INSERT INTO events (run_id, seq, type, time_ns, payload, prev_hash, hash) VALUES (?, ?, ?, ?, ?, ?, ?)`,
		id, e.Seq, string(e.Type), e.Time.UnixNano(), []byte(e.Payload), e.PrevHash[:], e.Hash[:]); err != nil {
		t.Fatal(err)
	}
	if got := versions(t, db); len(got) != 1 || tableExists(t, db, "artifacts") {
		t.Fatalf("version-1 database: versions %v, artifacts table %v", got, tableExists(t, db, "artifacts"))
	}

	for range 2 { // the second open finds nothing to do
		s, err := Open(ctx, path, Options{Redactor: store.NoRedaction})
		if err != nil {
			t.Fatalf("Open(version-1 database) = %v", err)
		}
		if got := versions(t, db); len(got) != SchemaVersion || got[len(got)-1] != SchemaVersion {
			t.Fatalf("versions after Open = %v, want 1..%d once each", got, SchemaVersion)
		}
		if n, err := store.VerifyRun(ctx, s, id); err != nil || n != 1 {
			t.Fatalf("VerifyRun(old run) = %d, %v", n, err)
		}
		if r, err := s.GetRun(ctx, id); err != nil || r.Task != "old" {
			t.Fatalf("GetRun(old run) = %+v, %v", r, err)
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
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestNewerSchemaRefused: a database written by a newer airlock is not
// opened, and not touched.
func TestNewerSchemaRefused(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "new.db")
	s, err := Open(ctx, path, Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	db := rawOpen(t, path)
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied_ns) VALUES (?, 0)`, SchemaVersion+1); err != nil {
		t.Fatal(err)
	}
	_, err = Open(ctx, path, Options{Redactor: store.NoRedaction})
	var ve *store.SchemaVersionError
	if !errors.As(err, &ve) || !errors.Is(err, store.ErrSchemaTooNew) || ve.Have != SchemaVersion+1 || ve.Supported != SchemaVersion {
		t.Fatalf("Open(newer schema) = %v, want a SchemaVersionError %d > %d", err, SchemaVersion+1, SchemaVersion)
	}
	if got := versions(t, db); len(got) != SchemaVersion+1 {
		t.Fatalf("versions after refused Open = %v", got)
	}
}

// TestMigrationAtomic: a migration that fails half-way leaves the database
// at the version it had, without a trace of the failed step.
func TestMigrationAtomic(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	steps := append(append([]string(nil), migrations[:1]...),
		`CREATE TABLE half (x INTEGER); CREATE TABLE runs (x INTEGER);`) // the second statement fails
	_, err := open(ctx, path, Options{Redactor: store.NoRedaction}, steps)
	if err == nil || !strings.Contains(err.Error(), "schema version 2") {
		t.Fatalf("open with a failing migration = %v, want an error about version 2", err)
	}
	db := rawOpen(t, path)
	// Nothing of the failed open stayed: not even version 1, applied in the
	// same transaction.
	if tableExists(t, db, "half") || tableExists(t, db, "runs") {
		t.Fatal("a failed migration left tables behind")
	}
	if _, err := Open(ctx, path, Options{Redactor: store.NoRedaction}); err != nil {
		t.Fatalf("Open after a failed migration = %v", err)
	}
}

// TestConcurrentOpen: several handles opening a new file at once apply the
// migrations exactly once.
func TestConcurrentOpen(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() {
			s, err := Open(ctx, path, Options{Redactor: store.NoRedaction})
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
	if got := versions(t, rawOpen(t, path)); len(got) != SchemaVersion {
		t.Fatalf("versions = %v, want each of 1..%d once", got, SchemaVersion)
	}
}
