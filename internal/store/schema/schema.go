// Package schema is the one source of truth for the SQL schema of the run
// store: the list of migrations that builds every version of it, and the
// loop that applies them (Dialect.Migrate). The SQLite store applies them
// as written (SQLite); the PostgreSQL store applies the same text with the
// few words that differ between the dialects translated (Postgres). Both
// stores therefore have the same tables, columns, keys and indexes at
// every version, which store/postgres's tests check against a live
// database of each, and record them the same way, in a schema_migrations
// table of the versions applied.
//
// Invariants: migrations are only ever appended, never edited once
// released (schema_test.go pins the text of every released one, in both
// dialects), and Version is their number. Migrate applies every missing
// one in the one transaction it is given, so a failure leaves the
// database at the version it had, and refuses a database newer than it
// knows.
//
// Importers: internal/store/sqlite, internal/store/postgres, their rows
// (internal/store/sqlrow) and suite (internal/store/storetest).
package schema

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// migrations is the schema history: migrations[i] brings a database from
// version i to version i+1. The SQL is SQLite's and keeps to what
// PostgreSQL also understands, save for the words postgresWords translates:
// SQL words are upper case and names lower case, so the translation cannot
// touch a name.
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

	// 3: run leases. lease_token is the run's fencing token: it only
	// grows, once per acquisition, so it outlives a release. lease_owner
	// and lease_expires_ns are NULL when no one holds the lease (no TEXT
	// default: PostgreSQL would describe it as ''::text, SQLite as '').
	`ALTER TABLE runs ADD COLUMN lease_owner TEXT;
	ALTER TABLE runs ADD COLUMN lease_token INTEGER NOT NULL DEFAULT 0;
	ALTER TABLE runs ADD COLUMN lease_expires_ns INTEGER;`,

	// 4: per-tenant credit ledger. The store assigns ids itself (max + 1
	// under its write lock): SQLite and PostgreSQL spell auto-increment
	// differently, and ids in commit order make paging by id safe. A
	// balance is always summed from the rows. The unique index makes a
	// debit once per (run, event); grants have no seq, and NULLs never
	// collide in a unique index in either database.
	`CREATE TABLE ledger (
		id         INTEGER PRIMARY KEY,
		tenant     TEXT NOT NULL,
		kind       TEXT NOT NULL CHECK (kind IN ('grant', 'debit')),
		amount     INTEGER NOT NULL CHECK (amount > 0),
		run_id     TEXT REFERENCES runs (id),
		seq        INTEGER,
		note       TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		CHECK (kind = 'grant' AND seq IS NULL OR kind = 'debit' AND run_id IS NOT NULL AND seq > 0)
	);
	CREATE INDEX ledger_tenant_id ON ledger (tenant, id);
	CREATE UNIQUE INDEX ledger_run_seq ON ledger (run_id, seq);`,

	// 5: named policies, every version kept. The store numbers a name's
	// versions (max + 1 under its write lock; the key backs that up) and
	// names each by its document's hash, the hash a run records. A rowid
	// table in SQLite, not WITHOUT ROWID: a document may be a MiB, far
	// past the row size a clustered key suits.
	`CREATE TABLE policies (
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		version    INTEGER NOT NULL CHECK (version > 0),
		hash       TEXT NOT NULL,
		document   BLOB NOT NULL,
		source     TEXT NOT NULL,
		created_by TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		PRIMARY KEY (tenant, name, version)
	);`,

	// 6: tenants and their API keys. A key is stored as the SHA-256 of
	// the key string (hash), never the key; the unique index is how a
	// presented key is found. Scopes are one space-separated column. NULL
	// last_used_ns and revoked_ns: never used, not revoked. Tenants are
	// never deleted, so a key's tenant always exists.
	`CREATE TABLE tenants (
		name       TEXT PRIMARY KEY,
		created_ns INTEGER NOT NULL
	) WITHOUT ROWID;
	CREATE TABLE api_keys (
		id           TEXT PRIMARY KEY,
		tenant       TEXT NOT NULL REFERENCES tenants (name),
		name         TEXT NOT NULL,
		scopes       TEXT NOT NULL,
		hash         BLOB NOT NULL,
		created_ns   INTEGER NOT NULL,
		last_used_ns INTEGER,
		revoked_ns   INTEGER
	);
	CREATE UNIQUE INDEX api_keys_hash ON api_keys (hash);
	CREATE INDEX api_keys_tenant ON api_keys (tenant, created_ns);`,

	// 7: the kind of a run record. NULL is an agent run (every run
	// before this migration), 'sandbox' the record of an E2B sandbox,
	// which no worker drives. No TEXT default, for the reason migration
	// 3 gives.
	`ALTER TABLE runs ADD COLUMN kind TEXT;`,

	// 8: blobs in the database, for several hosts on one PostgreSQL (the
	// SQLite store, one host, keeps its blobs in a directory and leaves
	// these empty). Content-addressed: a blob's digest names it, its
	// bytes are rows of at most 1 MiB (n = 0, 1, 2...), written with the
	// blob's row in one transaction and read one by one, so no statement
	// ever holds a whole blob. Rowid tables in SQLite, not WITHOUT ROWID:
	// a chunk is far past the row size a clustered key suits.
	`CREATE TABLE blobs (
		digest     TEXT PRIMARY KEY,
		size       INTEGER NOT NULL CHECK (size >= 0),
		created_ns INTEGER NOT NULL
	);
	CREATE TABLE blob_chunks (
		digest TEXT NOT NULL REFERENCES blobs (digest),
		n      INTEGER NOT NULL CHECK (n >= 0),
		data   BLOB NOT NULL,
		PRIMARY KEY (digest, n)
	);`,

	// 9: an index of runs' metadata (the client's labels, which the run's
	// run.created event records), for listing runs by label. Written in
	// the transaction that stores the run with its first events; the
	// stores fill it for the runs stored before (MetadataVersion).
	`CREATE TABLE run_metadata (
		run_id TEXT NOT NULL REFERENCES runs (id),
		key    TEXT NOT NULL,
		value  TEXT NOT NULL,
		PRIMARY KEY (run_id, key)
	) WITHOUT ROWID;
	CREATE INDEX run_metadata_value ON run_metadata (key, value, run_id);`,

	// 10: a policy version's policy hash: the canonical hash of the
	// document resolved (package policy), what is shown as its hash and
	// what a run under it records, beside the hash of its bytes, which
	// still names the version. The store does not parse documents: the
	// caller that stores one gives it; NULL for the versions stored
	// before, whose readers hash their documents themselves. No TEXT
	// default, for the reason migration 3 gives.
	`ALTER TABLE policies ADD COLUMN policy_hash TEXT;`,

	// 11: checkpoint chunks in the database, for several hosts on one
	// PostgreSQL (the SQLite store's host keeps them in a directory,
	// chunk.Dir, and leaves this empty). A chunk's id is the HMAC of its
	// content under its tenant's key, in hex (package chunk), its data
	// the content zstd-compressed: at most chunk.MaxStored bytes, one row
	// each, so unlike a blob it is never split. size is len(data), for
	// accounting without reading the bytes. A table of its own, not
	// blobs: a chunk's id is not the SHA-256 of what is stored, and the
	// collectors of the two (artifacts refer to blobs, checkpoints to
	// chunks) must never see each other's keys.
	`CREATE TABLE chunks (
		id         TEXT PRIMARY KEY,
		size       INTEGER NOT NULL CHECK (size > 0),
		data       BLOB NOT NULL,
		created_ns INTEGER NOT NULL
	);`,

	// 12: named environment templates, every version kept until the
	// template is removed (all its versions at once). Numbered and named
	// by their documents' hashes as policies are; image is the image by
	// digest the version was made with, which listings show. A rowid
	// table in SQLite, as policies: a document may be 64 KiB.
	`CREATE TABLE templates (
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		version    INTEGER NOT NULL CHECK (version > 0),
		hash       TEXT NOT NULL,
		image      TEXT NOT NULL,
		document   BLOB NOT NULL,
		source     TEXT NOT NULL,
		created_by TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		PRIMARY KEY (tenant, name, version)
	);`,

	// 13: a data policy's deletions. deletions is the audit record of
	// each (a purged run, a deleted tenant, a retention pass): who, when,
	// what, and counts as JSON, never the deleted content, kept after the
	// data is gone (no foreign keys, so nothing it names has to exist).
	// The ledger is rebuilt without its foreign key to runs: a purged
	// run's debits stay (a tenant's balance must not rise because it
	// deleted a run), naming a run id no longer stored. The rebuild copies
	// every row with its id; the indexes are made again under their names.
	`CREATE TABLE ledger_v13 (
		id         INTEGER PRIMARY KEY,
		tenant     TEXT NOT NULL,
		kind       TEXT NOT NULL CHECK (kind IN ('grant', 'debit')),
		amount     INTEGER NOT NULL CHECK (amount > 0),
		run_id     TEXT,
		seq        INTEGER,
		note       TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		CHECK (kind = 'grant' AND seq IS NULL OR kind = 'debit' AND run_id IS NOT NULL AND seq > 0)
	);
	INSERT INTO ledger_v13 (id, tenant, kind, amount, run_id, seq, note, created_ns)
		SELECT id, tenant, kind, amount, run_id, seq, note, created_ns FROM ledger;
	DROP TABLE ledger;
	ALTER TABLE ledger_v13 RENAME TO ledger;
	CREATE INDEX ledger_tenant_id ON ledger (tenant, id);
	CREATE UNIQUE INDEX ledger_run_seq ON ledger (run_id, seq);
	CREATE TABLE deletions (
		id         INTEGER PRIMARY KEY,
		tenant     TEXT NOT NULL,
		kind       TEXT NOT NULL,
		target     TEXT NOT NULL,
		actor      TEXT NOT NULL,
		counts     TEXT NOT NULL,
		created_ns INTEGER NOT NULL
	);
	CREATE INDEX deletions_tenant_id ON deletions (tenant, id);`,

	// 14: a tenant's deletion under way (tenants delete --force): set
	// first, in a transaction of its own, so that every process sharing
	// the database refuses the tenant's API keys and new runs at once,
	// while its live runs are cancelled and its sandboxes destroyed; the
	// row goes with the rest of the tenant. NULL: not being deleted.
	`ALTER TABLE tenants ADD COLUMN deleting_ns INTEGER;`,

	// 15: references to checkpoints that no run's event makes (an E2B
	// sandbox paused as a checkpoint, an E2B snapshot), whose records
	// live in the home of the server that made them: on a database
	// several hosts share, each server keeps one row per record here, so
	// that a checkpoint collection run from any host sees every live
	// checkpoint (store.CheckpointHolds). The SQLite store's host reads
	// its own records and leaves this empty. A tenant's rows go with it.
	`CREATE TABLE checkpoint_holds (
		holder     TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		digest     TEXT NOT NULL,
		created_ns INTEGER NOT NULL
	);
	CREATE INDEX checkpoint_holds_tenant ON checkpoint_holds (tenant);`,

	// 16: what sandboxes outside runs (E2B's, MCP sessions') reported
	// through their event channels (store.SandboxEvents): one row per
	// event the host accepted, numbered per sandbox as its log numbers
	// them, body the event's JSON (marked as the sandbox's). Kept as a
	// run's events are (the tenant's retention); a tenant's rows go with
	// it.
	`CREATE TABLE sandbox_events (
		tenant     TEXT NOT NULL,
		sandbox    TEXT NOT NULL,
		seq        INTEGER NOT NULL,
		time_ns    INTEGER NOT NULL,
		body       BLOB NOT NULL,
		PRIMARY KEY (tenant, sandbox, seq)
	);
	CREATE INDEX sandbox_events_time ON sandbox_events (tenant, time_ns);`,

	// 17: uploaded workspaces (store.Uploads): the id the API gave, the
	// tenant, the digest of the gzipped tar in the blob store and its
	// size, so that an upload is found by id and tenant, counted against
	// its tenant's budget, and deleted under the data policy; the digest
	// index tells a deletion whether a blob is still named. Uploads made
	// before are blobs with a receipt and no row: no longer accepted,
	// and a blob collection (airlock gc) removes them.
	`CREATE TABLE uploads (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		digest     TEXT NOT NULL,
		size       INTEGER NOT NULL CHECK (size >= 0),
		created_ns INTEGER NOT NULL
	);
	CREATE INDEX uploads_tenant ON uploads (tenant, created_ns);
	CREATE INDEX uploads_digest ON uploads (digest);`,

	// 18: E2B snapshots on a database several hosts share
	// (store.E2BSnapshots): one row per snapshot, its body the E2B
	// server's record of it (opaque here), so that every replica of the
	// service lists, finds and deletes every snapshot and boots
	// sandboxes of it. A tenant's names are unique. The SQLite store's
	// host keeps its snapshots in its E2B state directory and leaves
	// this empty. A tenant's rows go with it.
	`CREATE TABLE e2b_snapshots (
		id         TEXT PRIMARY KEY,
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		body       BLOB NOT NULL
	);
	CREATE INDEX e2b_snapshots_tenant ON e2b_snapshots (tenant, created_ns);
	CREATE UNIQUE INDEX e2b_snapshots_name ON e2b_snapshots (tenant, name) WHERE name <> '';`,

	// 19: the web UI's sessions (store.UISessions), so that every server
	// on the store serves every logged-in browser: the SHA-256 of the
	// session id (never the id, nor anything the CSRF token is made
	// from), the key it stands for, its login, last recorded use and
	// expiry. A key's revocation and a tenant's deletion delete its rows.
	`CREATE TABLE ui_sessions (
		hash       BLOB PRIMARY KEY,
		tenant     TEXT NOT NULL,
		key_id     TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		used_ns    INTEGER NOT NULL,
		expires_ns INTEGER NOT NULL
	);
	CREATE INDEX ui_sessions_key ON ui_sessions (tenant, key_id, used_ns);
	CREATE INDEX ui_sessions_expires ON ui_sessions (expires_ns);`,

	// 20: the policy credentials (store.Secrets), so that every server on
	// the store injects a credential added through any of them: the
	// value sealed by the secret package under a key the store never
	// sees (nonce, ciphertext), the check of that key, the host patterns
	// it is bound to (a JSON array, also bound by the seal). A server
	// that kept them in a file of its home moves them here at its start.
	`CREATE TABLE secrets (
		tenant     TEXT NOT NULL,
		name       TEXT NOT NULL,
		hosts      TEXT NOT NULL,
		created_ns INTEGER NOT NULL,
		updated_ns INTEGER NOT NULL,
		key_check  BLOB NOT NULL,
		nonce      BLOB NOT NULL,
		ciphertext BLOB NOT NULL,
		PRIMARY KEY (tenant, name)
	);`,
}

// MetadataVersion is the migration that made run_metadata: Migrate fills
// it, in the same transaction, from the runs stored before it (their
// run.created events), which SQL common to both dialects cannot do.
const MetadataVersion = 9

// Version is the schema version this build writes: the number of
// migrations.
const Version = 20

// A Dialect is one SQL dialect the schema is written in.
type Dialect int

// The dialects of the two SQL stores.
const (
	// SQLite is the dialect the migrations are written in.
	SQLite Dialect = iota + 1
	// Postgres is PostgreSQL's: the migrations with postgresWords
	// translated.
	Postgres
)

// Migrations returns the migrations in d: element i brings a database
// from version i to version i+1.
func (d Dialect) Migrations() []string {
	out := make([]string, len(migrations))
	for i, m := range migrations {
		out[i] = d.translate(m)
	}
	return out
}

// translate returns the SQL statement q, written in SQLite's words, in d.
func (d Dialect) translate(q string) string {
	if d == Postgres {
		return postgresWords.Replace(q)
	}
	return q
}

// Param returns the placeholder of a statement's nth argument (from 1):
// "?" in SQLite, "$n" in PostgreSQL.
func (d Dialect) Param(n int) string {
	if d == Postgres {
		return "$" + strconv.Itoa(n)
	}
	return "?"
}

// postgresWords maps the SQLite words of the migrations to PostgreSQL's:
// SQLite's INTEGER is 64 bits, PostgreSQL's 32 (BIGINT is 64); BLOB is
// BYTEA; SQLite compares TEXT by its bytes, PostgreSQL by the database's
// collation unless told "C" (so ids, names and pages sort, compare and
// index the same in both, whatever locale the database was made with);
// WITHOUT ROWID is a SQLite storage hint with no PostgreSQL counterpart
// (its tables never have a hidden row id).
var postgresWords = strings.NewReplacer(
	"INTEGER", "BIGINT",
	"BLOB", "BYTEA",
	"TEXT", `TEXT COLLATE "C"`,
	" WITHOUT ROWID", "",
)

// Tx is a transaction on a store's database in one dialect: how its store
// runs a statement in it, for Migrate.
type Tx interface {
	// Exec runs query with args; without args, query may hold several
	// statements.
	Exec(ctx context.Context, query string, args ...any) error
	// Query runs query with args and calls row for each row it returns,
	// in order, with a function that scans the row into dest, until row
	// returns an error, which Query returns.
	Query(ctx context.Context, query string, args []any, row func(scan func(dest ...any) error) error) error
}

// migrationsTable records the versions applied, one row each.
const migrationsTable = `CREATE TABLE IF NOT EXISTS schema_migrations (
		version    INTEGER PRIMARY KEY,
		applied_ns INTEGER NOT NULL
	)`

// Migrate brings the database of tx, a transaction in dialect d, from the
// version it records to len(steps) (steps are d's migrations, or in tests
// their first few or a broken one), recording each version applied at
// nowNS. It is idempotent. A database newer than len(steps) gives a
// *store.SchemaVersionError and is not modified. The caller commits tx,
// or rolls it back on an error, so that a failure leaves the database at
// the version it had; and it serializes migrations of one database before
// calling (the write lock of SQLite's BEGIN IMMEDIATE, PostgreSQL's
// advisory lock), so that processes opening a database at once apply each
// version once.
func (d Dialect) Migrate(ctx context.Context, tx Tx, steps []string, nowNS int64) error {
	if err := tx.Exec(ctx, d.translate(migrationsTable)); err != nil {
		return fmt.Errorf("create schema_migrations: %w", err)
	}
	var have int
	err := tx.Query(ctx, `SELECT COALESCE(MAX(version), 0) FROM schema_migrations`, nil,
		func(scan func(...any) error) error { return scan(&have) })
	if err != nil {
		return fmt.Errorf("read schema version: %w", err)
	}
	if have > len(steps) {
		return &store.SchemaVersionError{Have: have, Supported: len(steps)}
	}
	record := `INSERT INTO schema_migrations (version, applied_ns) VALUES (` + d.Param(1) + `, ` + d.Param(2) + `)`
	for v := have + 1; v <= len(steps); v++ {
		// No arguments: a statement that may hold several (pgx sends it
		// as a simple query).
		if err := tx.Exec(ctx, steps[v-1]); err != nil {
			return fmt.Errorf("apply schema version %d: %w", v, err)
		}
		if v == MetadataVersion {
			if err := d.backfillMetadata(ctx, tx); err != nil {
				return fmt.Errorf("apply schema version %d: %w", v, err)
			}
		}
		if err := tx.Exec(ctx, record, v, nowNS); err != nil {
			return fmt.Errorf("record schema version %d: %w", v, err)
		}
	}
	return nil
}

// backfillMetadata indexes the metadata of the runs stored before
// run_metadata existed, from their run.created events.
func (d Dialect) backfillMetadata(ctx context.Context, tx Tx) error {
	type label struct{ run, key, value string }
	var labels []label
	err := tx.Query(ctx, `SELECT run_id, payload FROM events WHERE seq = 1 AND type = `+d.Param(1), []any{string(event.TypeRunCreated)},
		func(scan func(...any) error) error {
			var run string
			var payload []byte
			if err := scan(&run, &payload); err != nil {
				return err
			}
			for k, v := range store.CreatedMetadata(payload) {
				labels = append(labels, label{run, k, v})
			}
			return nil
		})
	if err != nil {
		return err
	}
	insert := `INSERT INTO run_metadata (run_id, key, value) VALUES (` + d.Param(1) + `, ` + d.Param(2) + `, ` + d.Param(3) + `)`
	for _, l := range labels {
		if err := tx.Exec(ctx, insert, l.run, l.key, l.value); err != nil {
			return err
		}
	}
	return nil
}
