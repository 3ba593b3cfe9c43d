// Package sqlite is the embedded Store: one SQLite database file in WAL mode,
// through the pure-Go driver modernc.org/sqlite (no cgo, so the host binary
// stays static).
//
// Durability: every write is one transaction, and synchronous=FULL makes
// SQLite fsync the WAL before a commit returns, so an appended event
// survives a crash of the process or of the machine once Append returns.
// Concurrency: writes go through one connection per Store (database/sql
// queues writers of one process without spinning on SQLite's lock), and
// each write transaction starts with BEGIN IMMEDIATE, so writers in other
// processes wait on the file lock (up to the busy timeout) instead of
// failing half-way; Append's next-seq check inside that transaction keeps
// two engine processes from interleaving a run's log. Reads use a separate
// pool of read-only connections and never block writers (WAL).
//
// Importers: host wiring (internal/host), the API's test server
// (internal/server/servertest), and tests.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	msqlite "modernc.org/sqlite" // also registers the "sqlite" database/sql driver
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

var _ store.Store = (*Store)(nil)

// Options configure Open.
type Options struct {
	// Redactor scrubs secrets from every payload and task before they are
	// hashed and written. Required, so it cannot be forgotten: pass
	// store.NoRedaction to opt out on purpose.
	Redactor store.Redactor
	// BusyTimeout is how long a write waits for another process holding
	// the database's write lock; zero means 10 seconds.
	BusyTimeout time.Duration
	// Readers is the size of the read connection pool; zero means 4.
	Readers int
	// Now returns the current time; nil means time.Now. Tests inject a
	// fake clock here.
	Now func() time.Time
}

// Store is a store.Store in one SQLite file. It is safe for concurrent use,
// also by several processes on the same file.
type Store struct {
	path   string
	w      *sql.DB // one connection, BEGIN IMMEDIATE: all writes
	r      *sql.DB // read-only connections
	red    store.Redactor
	now    func() time.Time
	closed atomic.Bool

	// Prepared on w at Open, used in every write transaction.
	stmtTail    *sql.Stmt
	stmtSetTail *sql.Stmt
	// The statements of a new run and of a group commit's savepoints,
	// prepared once: parsing them is most of what they cost.
	stmtInsertRun                          *sql.Stmt
	stmtSavepoint, stmtRelease, stmtRollTo *sql.Stmt
	// stmtInsert[i] inserts insertChunks[i] events in one statement.
	stmtInsert [len(insertChunks)]*sql.Stmt
	// Prepared on r at Open: the reads every API request and event stream
	// makes, which would otherwise be parsed by SQLite each time.
	stmtGetRun *sql.Stmt
	stmtAPIKey *sql.Stmt

	// wmu guards queue and writing: the group commit (see write).
	wmu     sync.Mutex
	queue   []*writeReq
	writing bool
}

// writeReq is one write transaction's work waiting for a group commit.
type writeReq struct {
	ctx context.Context
	fn  func(ctx context.Context, tx *sql.Tx) error
	// err and done are set by the committing goroutine before it closes
	// wake; a wake without done makes the waiter the next committer.
	err  error
	done bool
	wake chan struct{}
}

// insertChunks are the row counts of the prepared multi-row INSERTs, largest
// first; a batch is written as a sum of them (100 = 64 + 16 + 16 + 4). One
// statement per row costs a database/sql and VDBE round trip per event, which
// dominated the batched append benchmark.
var insertChunks = [...]int{64, 16, 4, 1}

func insertSQL(rows int) string {
	return `INSERT INTO events (run_id, seq, type, time_ns, payload, prev_hash, hash) VALUES ` +
		strings.TrimSuffix(strings.Repeat(`(?, ?, ?, ?, ?, ?, ?), `, rows), ", ")
}

// Open opens (creating if needed) the database file at path, applies any
// schema migrations, and refuses a database written by a newer airlock
// (*store.SchemaVersionError). The file's directory must exist.
func Open(ctx context.Context, path string, opts Options) (*Store, error) {
	return open(ctx, path, opts, migrations)
}

func open(ctx context.Context, path string, opts Options, steps []string) (_ *Store, err error) {
	if opts.Redactor == nil {
		return nil, errors.New("sqlite: open: Options.Redactor is required (store.NoRedaction opts out)")
	}
	if opts.BusyTimeout <= 0 {
		opts.BusyTimeout = 10 * time.Second
	}
	if opts.Readers <= 0 {
		opts.Readers = 4
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	s := &Store{path: abs, red: opts.Redactor, now: opts.Now}
	defer func() {
		if err != nil {
			s.closeDBs()
		}
	}()

	base := "file:" + (&url.URL{Path: abs}).EscapedPath() +
		"?_busy_timeout=" + strconv.FormatInt(opts.BusyTimeout.Milliseconds(), 10) +
		"&_journal_mode=WAL&_synchronous=FULL&_foreign_keys=1" +
		// Deleted rows are overwritten with zeros, not left in free pages:
		// a purge or a retention pass must leave nothing of the data in
		// the file (package store's Deletions).
		"&_pragma=secure_delete(1)"
	if s.w, err = sql.Open("sqlite", base+"&_txlock=immediate"); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	s.w.SetMaxOpenConns(1)
	s.w.SetMaxIdleConns(1)
	s.w.SetConnMaxLifetime(0)
	s.w.SetConnMaxIdleTime(0)
	err = retryBusy(ctx, opts.BusyTimeout, func() error {
		if err := checkPragmas(ctx, s.w); err != nil {
			return err
		}
		return migrate(ctx, s.w, steps, s.now().UnixNano())
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	if s.r, err = sql.Open("sqlite", base+"&_query_only=1"); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	s.r.SetMaxOpenConns(opts.Readers)
	s.r.SetMaxIdleConns(opts.Readers)
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.stmtTail, `SELECT last_seq, last_hash, status, lease_token FROM runs WHERE id = ?`},
		{&s.stmtSetTail, `UPDATE runs SET last_seq = ?, last_hash = ?, updated_ns = MAX(updated_ns, ?) WHERE id = ? AND last_seq = ?`},
		{&s.stmtInsert[0], insertSQL(insertChunks[0])},
		{&s.stmtInsert[1], insertSQL(insertChunks[1])},
		{&s.stmtInsert[2], insertSQL(insertChunks[2])},
		{&s.stmtInsert[3], insertSQL(insertChunks[3])},
		{&s.stmtInsertRun, `INSERT INTO runs (` + sqlrow.RunColumns + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, NULL, 0, NULL, ?)
			ON CONFLICT (id) DO NOTHING`},
		{&s.stmtSavepoint, `SAVEPOINT w`},
		{&s.stmtRelease, `RELEASE w`},
		{&s.stmtRollTo, `ROLLBACK TO w`},
	} {
		if *p.stmt, err = s.w.PrepareContext(ctx, p.sql); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: prepare: %w", abs, err)
		}
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{
		{&s.stmtGetRun, `SELECT ` + sqlrow.RunColumns + ` FROM runs WHERE id = ?`},
		{&s.stmtAPIKey, `SELECT ` + sqlrow.APIKeyRead + ` FROM api_keys WHERE hash = ?`},
	} {
		if *p.stmt, err = s.r.PrepareContext(ctx, p.sql); err != nil {
			return nil, fmt.Errorf("sqlite: open %s: prepare: %w", abs, err)
		}
	}
	if err := warmReaders(ctx, s.r, opts.Readers); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	return s, nil
}

// warmReaders opens all n reader connections now: opened on demand, the
// first burst of requests would wait for them (an open applies the
// connection's pragmas, a few milliseconds each).
func warmReaders(ctx context.Context, db *sql.DB, n int) error {
	conns := make([]*sql.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close() // back to the idle pool, open
		}
	}()
	for range n {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		if err := c.PingContext(ctx); err != nil {
			return err
		}
	}
	return nil
}

// retryBusy runs fn until it does not fail with SQLITE_BUSY, for up to
// timeout. SQLite's busy timeout covers ordinary lock waits, but not every
// one at open: while another process turns a new file to WAL mode or
// recovers its WAL, SQLite returns SQLITE_BUSY at once, so several
// processes starting on one database would fail without this.
func retryBusy(ctx context.Context, timeout time.Duration, fn func() error) error {
	deadline := time.Now().Add(timeout)
	for wait := 5 * time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := fn()
		var se *msqlite.Error
		if err == nil || !errors.As(err, &se) || se.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().Add(wait).After(deadline) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
	}
}

// checkPragmas makes sure the settings durability depends on took effect:
// a driver that silently ignored one would lose acknowledged events.
func checkPragmas(ctx context.Context, db *sql.DB) error {
	var mode string
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil {
		return fmt.Errorf("read journal_mode: %w", err)
	}
	var sync, fk int
	if err := db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil {
		return fmt.Errorf("read synchronous: %w", err)
	}
	if err := db.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil {
		return fmt.Errorf("read foreign_keys: %w", err)
	}
	var secure int
	if err := db.QueryRowContext(ctx, `PRAGMA secure_delete`).Scan(&secure); err != nil {
		return fmt.Errorf("read secure_delete: %w", err)
	}
	if !strings.EqualFold(mode, "wal") || sync != 2 || fk != 1 || secure != 1 {
		return fmt.Errorf("journal_mode=%s synchronous=%d foreign_keys=%d secure_delete=%d, want wal, 2 (full), 1, 1", mode, sync, fk, secure)
	}
	return nil
}

// Path returns the absolute path of the database file.
func (s *Store) Path() string { return s.path }

// Close closes the database. It is safe to call more than once.
func (s *Store) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	return s.closeDBs()
}

func (s *Store) closeDBs() error {
	var errs []error
	for _, st := range append([]*sql.Stmt{
		s.stmtTail, s.stmtSetTail, s.stmtGetRun, s.stmtAPIKey,
		s.stmtInsertRun, s.stmtSavepoint, s.stmtRelease, s.stmtRollTo,
	}, s.stmtInsert[:]...) {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	for _, db := range []*sql.DB{s.r, s.w} {
		if db != nil {
			errs = append(errs, db.Close())
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", s.path, err)
	}
	return nil
}

// check returns the error call op must return before it begins, if
// any: ErrClosed when the store is closed, else invalid, the error of the
// call's check of its arguments (nil when they passed or it has none).
func (s *Store) check(op string, invalid error) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("sqlite: %s: %w", op, store.ErrClosed)
	case invalid != nil:
		return fmt.Errorf("sqlite: %s: %w", op, invalid)
	}
	return nil
}

// write runs fn in a write transaction (BEGIN IMMEDIATE) and returns once
// it is committed, or fn's error, with nothing of fn's kept.
//
// Writes commit in groups: while one transaction commits (an fsync, the
// cost of a write), the writes that arrive queue, and the next committer
// runs all of them in one transaction, each in a savepoint of its own, so
// a write that fails rolls back only its own changes, and one fsync makes
// all the others durable. The order of the queue is the order of the
// writes. Alone, a write is one transaction, as before; with many at once
// (a hundred runs created together), they share fsyncs instead of waiting
// for one each.
//
// fn's statements run on a ctx that is never cancelled (fn sees ctx's
// values only): a write is a few short statements in a transaction
// already begun, and a statement on a cancellable ctx costs the driver a
// goroutine to watch it (about a tenth of a run's creation). A write
// whose ctx ends before its turn does not run.
func (s *Store) write(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	req := &writeReq{ctx: ctx, fn: fn, wake: make(chan struct{})}
	s.wmu.Lock()
	s.queue = append(s.queue, req)
	if s.writing {
		s.wmu.Unlock()
		<-req.wake
		if req.done {
			return req.err
		}
		// Woken to commit the queue, req's own write in it.
	} else {
		s.writing = true
		s.wmu.Unlock()
	}
	s.wmu.Lock()
	batch := s.queue
	s.queue = nil
	s.wmu.Unlock()
	s.commit(batch)
	for _, r := range batch {
		if r != req {
			close(r.wake)
		}
	}
	s.wmu.Lock()
	if len(s.queue) > 0 {
		close(s.queue[0].wake) // not done: it commits next
	} else {
		s.writing = false
	}
	s.wmu.Unlock()
	return req.err
}

// commit runs the batch in one transaction and sets each write's outcome.
func (s *Store) commit(batch []*writeReq) {
	for _, r := range batch {
		r.done = true
	}
	if len(batch) == 1 {
		r := batch[0]
		r.err = s.commitOne(r.ctx, r.fn)
		return
	}
	fail := func(err error) {
		for _, r := range batch {
			if r.err == nil {
				r.err = err
			}
		}
	}
	tx, err := s.w.BeginTx(context.Background(), nil)
	if err != nil {
		fail(fmt.Errorf("begin: %w", err))
		return
	}
	// One savepoint name serves every write: each is released (or rolled
	// back to) before the next begins.
	sp := func(st *sql.Stmt) error {
		_, err := tx.Stmt(st).Exec()
		return err
	}
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.err = err
			continue
		}
		if err := sp(s.stmtSavepoint); err != nil {
			_ = tx.Rollback()
			fail(fmt.Errorf("savepoint: %w", err))
			return
		}
		if r.err = r.fn(context.WithoutCancel(r.ctx), tx); r.err != nil {
			if err := sp(s.stmtRollTo); err != nil {
				_ = tx.Rollback()
				fail(fmt.Errorf("rollback to savepoint: %w", err))
				return
			}
		}
		if err := sp(s.stmtRelease); err != nil {
			_ = tx.Rollback()
			fail(fmt.Errorf("release savepoint: %w", err))
			return
		}
	}
	if err := tx.Commit(); err != nil {
		fail(fmt.Errorf("commit: %w", err))
	}
}

// commitOne runs fn in a transaction of its own, unless ctx ended.
func (s *Store) commitOne(ctx context.Context, fn func(ctx context.Context, tx *sql.Tx) error) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Not cancellable either (see write): database/sql would also watch
	// a cancellable transaction's ctx with a goroutine of its own.
	ctx = context.WithoutCancel(ctx)
	tx, err := s.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(ctx, tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// each calls row for every row of rows, in order, until row fails, and
// closes rows. The error is row's or the rows'.
func each(rows *sql.Rows, row func(sqlrow.Scanner) error) error {
	defer rows.Close()
	for rows.Next() {
		if err := row(rows); err != nil {
			return err
		}
	}
	return rows.Err()
}

// query runs q on db and reads every row it returns with scan.
func query[T any](ctx context.Context, db *sql.DB, scan func(sqlrow.Scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	var out []T
	err = each(rows, func(sc sqlrow.Scanner) error {
		v, err := scan(sc)
		out = append(out, v)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullInt(n int64, valid bool) sql.NullInt64 { return sql.NullInt64{Int64: n, Valid: valid} }

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, r store.Run) (store.Run, error) {
	if err := s.check("create run", nil); err != nil {
		return r, err
	}
	r, err := store.PrepareRun(r, s.now(), s.red)
	if err != nil {
		return r, fmt.Errorf("sqlite: create run: %w", err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error { return s.insertRun(ctx, tx, r, nil) })
	if err != nil {
		return r, fmt.Errorf("sqlite: create run %s: %w", r.ID, err)
	}
	return r, nil
}

// insertRun stores new run r (prepared) in tx, its log's tail the last of
// first, its first events, sealed (none: an empty log); ErrExists when its
// id is taken. The events themselves are the caller's to insert.
func (s *Store) insertRun(ctx context.Context, tx *sql.Tx, r store.Run, first []event.Event) error {
	if err := tenantDeleting(ctx, tx, r.Tenant); err != nil {
		return err
	}
	if r.ParentRunID != "" {
		var last int64
		err := tx.QueryRowContext(ctx, `SELECT last_seq FROM runs WHERE id = ?`, r.ParentRunID).Scan(&last)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if err := store.CheckParent(r, err == nil, last); err != nil {
			return err
		}
	}
	var lastSeq int64
	var lastHash []byte // NULL: no event yet
	if n := len(first); n > 0 {
		lastSeq, lastHash = first[n-1].Seq, first[n-1].Hash[:]
	}
	res, err := tx.StmtContext(ctx, s.stmtInsertRun).ExecContext(ctx, r.ID, r.Tenant, r.Task, r.Model, r.Policy, r.PolicyHash, string(r.Status),
		r.Created.UnixNano(), r.Updated.UnixNano(),
		nullString(r.ParentRunID), nullInt(r.ParentSeq, r.ParentRunID != ""), lastSeq, lastHash, nullString(r.Kind))
	if err != nil {
		return err
	}
	return oneRow(res, store.ErrExists)
}

// CreateRunWith implements store.Store.
func (s *Store) CreateRunWith(ctx context.Context, r store.Run, first []event.Event) (store.Run, []event.Event, error) {
	if err := s.check("create run", nil); err != nil {
		return r, nil, err
	}
	r, evs, err := store.PrepareRunWith(ctx, r, first, s.now(), s.red)
	if err != nil {
		return r, nil, fmt.Errorf("sqlite: %w", err)
	}
	// The run row holds its log's tail from the start (appendIn would
	// read and update it).
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.insertRun(ctx, tx, r, evs); err != nil {
			return err
		}
		if err := s.insertEvents(ctx, tx, evs); err != nil {
			return err
		}
		md := store.MetadataOf(evs)
		for _, k := range slices.Sorted(maps.Keys(md)) {
			if _, err := tx.ExecContext(ctx, `INSERT INTO run_metadata (run_id, key, value) VALUES (?, ?, ?)`, r.ID, k, md[k]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return r, nil, fmt.Errorf("sqlite: create run %s: %w", r.ID, err)
	}
	last := evs[len(evs)-1]
	r.LastSeq, r.LastHash = last.Seq, last.Hash
	return r, evs, nil
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	if err := s.check("get run", store.CheckRunID(id)); err != nil {
		return store.Run{}, err
	}
	r, err := sqlrow.ScanRun(s.stmtGetRun.QueryRowContext(ctx, id))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("sqlite: get run %s: %w", clip(id), err)
	}
	return r, nil
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	q, args, err := sqlrow.ListRuns(f, schema.SQLite)
	if err := s.check("list runs", err); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanRun, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list runs: %w", err)
	}
	return out, nil
}

// UpdateRunStatus implements store.Store.
func (s *Store) UpdateRunStatus(ctx context.Context, id string, from, to event.Status) (store.Run, error) {
	if err := s.check("update run status", nil); err != nil {
		return store.Run{}, err
	}
	if err := event.CheckTransition(from, to); err != nil {
		return store.Run{}, fmt.Errorf("sqlite: run %s: %w", clip(id), err)
	}
	if err := store.CheckRunID(id); err != nil {
		return store.Run{}, fmt.Errorf("sqlite: update run status: %w", err)
	}
	var r store.Run
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if err := s.setStatus(ctx, tx, id, from, to); err != nil {
			return err
		}
		var err error
		r, err = sqlrow.ScanRun(tx.QueryRowContext(ctx, `SELECT `+sqlrow.RunColumns+` FROM runs WHERE id = ?`, id))
		return err
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("sqlite: run %s: update status: %w", clip(id), err)
	}
	return r, nil
}

// setStatus moves run id from from to to inside tx, if ctx's fence (if
// any) is still the run's. The caller has checked the transition.
func (s *Store) setStatus(ctx context.Context, tx *sql.Tx, id string, from, to event.Status) error {
	var (
		cur   string
		token int64
	)
	err := tx.QueryRowContext(ctx, `SELECT status, lease_token FROM runs WHERE id = ?`, id).Scan(&cur, &token)
	if err == nil {
		err = store.CheckFence(ctx, id, token)
	}
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.ErrNotFound
	case err != nil:
		return err
	case event.Status(cur) != from:
		return &store.StatusConflictError{RunID: id, Want: from, Got: event.Status(cur)}
	}
	now := s.now().UnixNano()
	_, err = tx.ExecContext(ctx, `UPDATE runs SET status = ?, updated_ns = ?, finished_ns = ? WHERE id = ? AND status = ?`,
		string(to), now, nullInt(now, to.Final()), id, string(from))
	return err
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, next int64, drafts []event.Event) ([]event.Event, error) {
	_, evs, err := s.appendStatus(ctx, runID, next, "", "", drafts)
	return evs, err
}

// AppendStatus implements store.Store.
func (s *Store) AppendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (store.Run, []event.Event, error) {
	if err := event.CheckTransition(from, to); err != nil {
		return store.Run{}, nil, fmt.Errorf("sqlite: run %s: %w", clip(runID), err)
	}
	return s.appendStatus(ctx, runID, next, from, to, drafts)
}

// appendStatus appends drafts and, when to is not empty, changes the status,
// in one transaction.
func (s *Store) appendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (store.Run, []event.Event, error) {
	if err := s.check("append", nil); err != nil {
		return store.Run{}, nil, err
	}
	// Redaction and canonical JSON are the costly part; they need no lock.
	evs, err := store.PrepareDrafts(runID, next, drafts, s.now(), s.red)
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("sqlite: append: %w", err)
	}
	var r store.Run
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		r, err = s.appendIn(ctx, tx, runID, next, from, to, evs)
		return err
	})
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("sqlite: run %s: append: %w", runID, err)
	}
	return r, evs, nil
}

// appendIn appends evs (prepared, from seq next) to run runID's log in tx
// and, when to is not empty, moves the run from status from to to,
// returning the run as it then is (the zero Run when to is empty).
func (s *Store) appendIn(ctx context.Context, tx *sql.Tx, runID string, next int64, from, to event.Status, evs []event.Event) (store.Run, error) {
	var (
		lastSeq  int64
		lastHash []byte
		status   string
		token    int64
	)
	err := tx.StmtContext(ctx, s.stmtTail).QueryRowContext(ctx, runID).Scan(&lastSeq, &lastHash, &status, &token)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return store.Run{}, store.ErrNotFound
	case err != nil:
		return store.Run{}, err
	}
	if err := store.CheckTail(ctx, runID, next, lastSeq, token); err != nil {
		return store.Run{}, err
	}
	var prev event.Hash
	if err := sqlrow.CopyHash(&prev, lastHash); err != nil {
		return store.Run{}, fmt.Errorf("last_hash: %w", err)
	}
	event.SealChain(runID, lastSeq, prev, evs)
	if err := s.insertEvents(ctx, tx, evs); err != nil {
		return store.Run{}, err
	}
	last := evs[len(evs)-1]
	// The run's updated time moves with its log, in the statement that
	// moves its tail (never back: a clock may step).
	res, err := tx.StmtContext(ctx, s.stmtSetTail).ExecContext(ctx, last.Seq, last.Hash[:], s.now().UnixNano(), runID, lastSeq)
	if err != nil {
		return store.Run{}, fmt.Errorf("update tail: %w", err)
	}
	// Neither can happen under the write lock; refuse rather than leave
	// the tail and the log disagreeing.
	n, err := res.RowsAffected()
	if err != nil {
		return store.Run{}, fmt.Errorf("update tail: rows changed: %w", err)
	}
	if n != 1 {
		return store.Run{}, fmt.Errorf("update tail: %d rows changed", n)
	}
	if to == "" {
		return store.Run{}, nil
	}
	if err := s.setStatus(ctx, tx, runID, from, to); err != nil {
		return store.Run{}, err
	}
	return sqlrow.ScanRun(tx.QueryRowContext(ctx, `SELECT `+sqlrow.RunColumns+` FROM runs WHERE id = ?`, runID))
}

// readLease reads run runID's lease state inside tx.
func readLease(ctx context.Context, tx *sql.Tx, runID string) (store.LeaseState, error) {
	var (
		st      store.LeaseState
		status  string
		owner   sql.NullString
		expires sql.NullInt64
	)
	err := tx.QueryRowContext(ctx, `SELECT status, lease_owner, lease_token, lease_expires_ns FROM runs WHERE id = ?`, runID).
		Scan(&status, &owner, &st.Token, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return st, store.ErrNotFound
	}
	st.Status, st.Owner, st.ExpiresNS = event.Status(status), owner.String, expires.Int64
	return st, err
}

// setLease writes l as run l.RunID's lease inside tx.
func setLease(ctx context.Context, tx *sql.Tx, l store.Lease) error {
	_, err := tx.ExecContext(ctx, `UPDATE runs SET lease_owner = ?, lease_token = ?, lease_expires_ns = ? WHERE id = ?`,
		l.Owner, l.Token, l.Expires.UnixNano(), l.RunID)
	return err
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (store.Lease, error) {
	if err := s.check("acquire lease", store.ValidateLease(runID, owner, 1, ttl)); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		st, err := readLease(ctx, tx, runID)
		if err != nil {
			return err
		}
		if l, err = store.DecideAcquire(st, runID, owner, ttl, s.now()); err != nil {
			return err
		}
		return setLease(ctx, tx, l)
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("sqlite: run %s: acquire lease: %w", runID, err)
	}
	return l, nil
}

// RenewLease implements store.Store.
func (s *Store) RenewLease(ctx context.Context, runID, owner string, token int64, ttl time.Duration) (store.Lease, error) {
	if err := s.check("renew lease", store.ValidateLease(runID, owner, token, ttl)); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		st, err := readLease(ctx, tx, runID)
		if err != nil {
			return err
		}
		if l, err = store.DecideRenew(st, runID, owner, token, ttl, s.now()); err != nil {
			return err
		}
		return setLease(ctx, tx, l)
	})
	if err != nil {
		return store.Lease{}, fmt.Errorf("sqlite: run %s: renew lease: %w", runID, err)
	}
	return l, nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, runID, owner string, token int64) error {
	if err := s.check("release lease", store.ValidateLease(runID, owner, token, 1)); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if _, err := readLease(ctx, tx, runID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `UPDATE runs SET lease_owner = NULL, lease_expires_ns = NULL
			WHERE id = ? AND lease_owner = ? AND lease_token = ?`, runID, owner, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: run %s: release lease: %w", runID, err)
	}
	return nil
}

// insertEvents writes sealed events with as few statements as the
// prepared chunk sizes allow.
func (s *Store) insertEvents(ctx context.Context, tx *sql.Tx, evs []event.Event) error {
	// Room for the largest chunk evs needs, not the largest there is
	// (a run's creation inserts two events, not a hundred).
	args := make([]any, 0, 7*min(len(evs), insertChunks[0]))
	for len(evs) > 0 {
		c := len(insertChunks) - 1
		for i, n := range insertChunks {
			if n <= len(evs) {
				c = i
				break
			}
		}
		chunk := evs[:insertChunks[c]]
		evs = evs[len(chunk):]
		args = args[:0]
		for i := range chunk {
			e := &chunk[i]
			args = append(args, e.RunID, e.Seq, string(e.Type), e.Time.UnixNano(), []byte(e.Payload), e.PrevHash[:], e.Hash[:])
		}
		if _, err := tx.StmtContext(ctx, s.stmtInsert[c]).ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("insert seq %d to %d: %w", chunk[0].Seq, chunk[len(chunk)-1].Seq, err)
		}
	}
	return nil
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, from int64, limit int) ([]event.Event, error) {
	if err := s.check("events", store.CheckRunID(runID)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanEvent, `SELECT `+sqlrow.EventColumns+` FROM events WHERE run_id = ? AND seq >= ? ORDER BY seq LIMIT ?`,
		runID, from, store.PageLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("sqlite: run %s: events: %w", clip(runID), err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, fmt.Errorf("sqlite: run %s: events: %w", clip(runID), err)
		}
	}
	return out, nil
}

// LastEvent implements store.Store.
func (s *Store) LastEvent(ctx context.Context, runID string) (event.Event, error) {
	if err := s.check("last event", store.CheckRunID(runID)); err != nil {
		return event.Event{}, err
	}
	e, err := sqlrow.ScanEvent(s.r.QueryRowContext(ctx, `SELECT `+sqlrow.EventColumns+` FROM events WHERE run_id = ? ORDER BY seq DESC LIMIT 1`, runID))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
		if xerr := s.exists(ctx, runID); xerr != nil {
			err = xerr
		}
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("sqlite: run %s: last event: %w", clip(runID), err)
	}
	return e, nil
}

// exists returns nil if run id exists, or an error wrapping
// store.ErrNotFound.
func (s *Store) exists(ctx context.Context, id string) error {
	var one int
	err := s.r.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("run %s: %w", clip(id), store.ErrNotFound)
	}
	return err
}

// PutArtifact implements store.Store.
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact) (store.Artifact, error) {
	if err := s.check("put artifact", nil); err != nil {
		return a, err
	}
	a, err := store.PrepareArtifact(a, s.now())
	if err != nil {
		return a, fmt.Errorf("sqlite: put artifact: %w", err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		old, err := sqlrow.ScanArtifact(tx.QueryRowContext(ctx, `SELECT `+sqlrow.ArtifactColumns+` FROM artifacts WHERE run_id = ? AND name = ?`, a.RunID, a.Name))
		switch {
		case err == nil:
			if err := store.SameArtifact(old, a); err != nil {
				return err
			}
			a = old
			return nil
		case !errors.Is(err, sql.ErrNoRows):
			return err
		}
		var one int
		switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM runs WHERE id = ?`, a.RunID).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return store.ErrNotFound
		case err != nil:
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO artifacts (`+sqlrow.ArtifactColumns+`) VALUES (?, ?, ?, ?, ?, ?)`,
			a.RunID, a.Name, a.Digest, a.Size, a.MediaType, a.Created.UnixNano())
		return err
	})
	if err != nil {
		return store.Artifact{}, fmt.Errorf("sqlite: run %s: put artifact %q: %w", a.RunID, a.Name, err)
	}
	return a, nil
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, runID, name string) (store.Artifact, error) {
	if err := s.check("get artifact", store.CheckArtifactKey(runID, name)); err != nil {
		return store.Artifact{}, err
	}
	a, err := sqlrow.ScanArtifact(s.r.QueryRowContext(ctx, `SELECT `+sqlrow.ArtifactColumns+` FROM artifacts WHERE run_id = ? AND name = ?`, runID, name))
	if errors.Is(err, sql.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Artifact{}, fmt.Errorf("sqlite: run %s: get artifact %q: %w", clip(runID), clip(name), err)
	}
	return a, nil
}

// ListArtifacts implements store.Store.
func (s *Store) ListArtifacts(ctx context.Context, runID string) ([]store.Artifact, error) {
	if err := s.check("list artifacts", store.CheckRunID(runID)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.r, sqlrow.ScanArtifact, `SELECT `+sqlrow.ArtifactColumns+` FROM artifacts WHERE run_id = ? ORDER BY name`, runID)
	if err != nil {
		return nil, fmt.Errorf("sqlite: run %s: list artifacts: %w", clip(runID), err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, fmt.Errorf("sqlite: list artifacts: %w", err)
		}
	}
	return out, nil
}

// clip shortens an untrusted id quoted in an error message.
func clip(s string) string { return store.Clip(s) }
