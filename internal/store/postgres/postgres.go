// Package postgres is the Store for more than one machine: runs, event logs
// and artifact metadata in a PostgreSQL database, through pgx's native
// interface (pgxpool; no database/sql). Several airlock processes may share
// one database.
//
// Durability: every write is one transaction, and Open refuses a server or
// session with fsync or synchronous_commit off, so an appended event is on
// disk once Append returns. Should the connection fail while COMMIT is in
// flight, Append does not guess: it asks the database whether its last
// event is there (see committed), so its result always says truly whether
// the events were written.
//
// Concurrency: Append locks the run's row (SELECT ... FOR NO KEY UPDATE)
// before it reads the log's tail, so writers of one run queue on the row
// whatever process they are in, and each re-checks the next seq only once it
// holds the lock; the loser of a race gets a *store.AppendConflictError and
// the log is never interleaved. Status changes lock the row the same way.
//
// The schema comes from package schema, the list the SQLite store applies
// too, in PostgreSQL's dialect. Tests run against a throwaway server that
// package pgtest starts.
//
// Importers: host wiring (internal/host), and tests.
package postgres

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	// Now returns the current time; nil means time.Now. Tests inject a
	// fake clock here.
	Now func() time.Time
}

// Store is a store.Store in a PostgreSQL database. It is safe for
// concurrent use, also by several processes on the same database.
type Store struct {
	pool   *pgxpool.Pool
	red    store.Redactor
	now    func() time.Time
	closed atomic.Bool
	// insertBytes bounds the payload bytes of one INSERT of events:
	// maxInsertBytes, lowered by tests.
	insertBytes int
}

// idleTxTimeout is the idle_in_transaction_session_timeout the store's
// sessions get unless the URL sets one. A store transaction never waits on
// its client between statements for long; one that does belongs to a
// client that vanished without the server noticing (a network partition),
// and would hold its run's row lock, and so stop every writer of that run,
// until TCP gave up on it.
const idleTxTimeout = "1min"

// Open connects to the database at url (a postgres:// URL or a libpq
// key=value string; pgxpool's pool_* parameters size the pool), applies
// any schema migrations, and refuses a database written by a newer airlock
// (*store.SchemaVersionError) or a server that would not make commits
// durable. Errors never quote url, which may hold a password.
func Open(ctx context.Context, url string, opts Options) (*Store, error) {
	return open(ctx, url, opts, migrations)
}

func open(ctx context.Context, url string, opts Options, steps []string) (_ *Store, err error) {
	if opts.Redactor == nil {
		return nil, errors.New("postgres: open: Options.Redactor is required (store.NoRedaction opts out)")
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		// Not wrapped: pgx masks the password in the URL it quotes only
		// on a best-effort basis, and a malformed URL can defeat it.
		return nil, errors.New("postgres: open: malformed database URL (not shown: it may hold a password)")
	}
	if _, ok := cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"]; !ok {
		cfg.ConnConfig.RuntimeParams["idle_in_transaction_session_timeout"] = idleTxTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	s := &Store{pool: pool, red: opts.Redactor, now: opts.Now, insertBytes: maxInsertBytes}
	defer func() {
		if err != nil {
			pool.Close()
		}
	}()
	if err := checkDurable(ctx, pool); err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	if err := migrate(ctx, pool, steps, s.now().UnixNano()); err != nil {
		return nil, fmt.Errorf("postgres: open: %w", err)
	}
	return s, nil
}

// checkDurable makes sure the settings durability rests on are on: with
// either off, the server acknowledges commits it may lose.
func checkDurable(ctx context.Context, pool *pgxpool.Pool) error {
	var fsync, syncCommit string
	err := pool.QueryRow(ctx, `SELECT current_setting('fsync'), current_setting('synchronous_commit')`).Scan(&fsync, &syncCommit)
	if err != nil {
		return fmt.Errorf("read settings: %w", err)
	}
	if fsync != "on" || syncCommit == "off" {
		return fmt.Errorf("fsync=%s synchronous_commit=%s: commits would not be durable; want fsync on and synchronous_commit not off", fsync, syncCommit)
	}
	return nil
}

// Close closes the connection pool, waiting for connections in use to be
// returned. It is safe to call more than once.
func (s *Store) Close() error {
	if !s.closed.Swap(true) {
		s.pool.Close()
	}
	return nil
}

// check returns the error call op must return before it begins, if
// any: ErrClosed when the store is closed, else invalid, the error of the
// call's check of its arguments (nil when they passed or it has none).
func (s *Store) check(op string, invalid error) error {
	switch {
	case s.closed.Load():
		return fmt.Errorf("postgres: %s: %w", op, store.ErrClosed)
	case invalid != nil:
		return fmt.Errorf("postgres: %s: %w", op, invalid)
	}
	return nil
}

// write runs fn in one transaction and commits.
func (s *Store) write(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		rollback(ctx, tx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback ends tx, also when ctx is done: rolling back on a live
// connection keeps it for the pool. Should that fail, pgx closes the
// connection, and the server rolls back for it.
func rollback(ctx context.Context, tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, r store.Run) (store.Run, error) {
	if err := s.check("create run", nil); err != nil {
		return r, err
	}
	r, err := store.PrepareRun(r, s.now(), s.red)
	if err != nil {
		return r, fmt.Errorf("postgres: create run: %w", err)
	}
	err = s.write(ctx, func(tx pgx.Tx) error { return s.insertRun(ctx, tx, r, nil) })
	if err != nil {
		return r, fmt.Errorf("postgres: create run %s: %w", r.ID, err)
	}
	return r, nil
}

// insertRun stores new run r (prepared) in tx, its log's tail the last of
// first, its first events, sealed (none: an empty log); ErrExists when its
// id is taken. The events themselves are the caller's to insert.
func (s *Store) insertRun(ctx context.Context, tx pgx.Tx, r store.Run, first []event.Event) error {
	if _, err := tenantDeleting(ctx, tx, r.Tenant); err != nil {
		return err
	}
	var parent, pseq any // NULL unless a fork
	var kind any         // NULL for an agent run
	if r.Kind != "" {
		kind = r.Kind
	}
	if r.ParentRunID != "" {
		// A log only grows, so a seq it has now it keeps: no lock.
		var last int64
		err := tx.QueryRow(ctx, `SELECT last_seq FROM runs WHERE id = $1`, r.ParentRunID).Scan(&last)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		if err := store.CheckParent(r, err == nil, last); err != nil {
			return err
		}
		parent, pseq = r.ParentRunID, r.ParentSeq
	}
	var lastSeq int64
	var lastHash []byte // NULL: no event yet
	if n := len(first); n > 0 {
		lastSeq, lastHash = first[n-1].Seq, first[n-1].Hash[:]
	}
	tag, err := tx.Exec(ctx, `INSERT INTO runs (`+sqlrow.RunColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, NULL, $10, $11, $12, $13, NULL, 0, NULL, $14)
		ON CONFLICT (id) DO NOTHING`,
		r.ID, r.Tenant, r.Task, r.Model, r.Policy, r.PolicyHash, string(r.Status),
		r.Created.UnixNano(), r.Updated.UnixNano(), parent, pseq, lastSeq, lastHash, kind)
	if err == nil && tag.RowsAffected() == 0 {
		return store.ErrExists
	}
	return err
}

// CreateRunWith implements store.Store.
func (s *Store) CreateRunWith(ctx context.Context, r store.Run, first []event.Event) (store.Run, []event.Event, error) {
	if err := s.check("create run", nil); err != nil {
		return r, nil, err
	}
	r, evs, err := store.PrepareRunWith(ctx, r, first, s.now(), s.red)
	if err != nil {
		return r, nil, fmt.Errorf("postgres: %w", err)
	}
	// The run row holds its log's tail from the start (appendIn would
	// read and update it).
	err = s.write(ctx, func(tx pgx.Tx) error {
		if err := s.insertRun(ctx, tx, r, evs); err != nil {
			return err
		}
		if err := s.insertEvents(ctx, tx, evs); err != nil {
			return err
		}
		md := store.MetadataOf(evs)
		for _, k := range slices.Sorted(maps.Keys(md)) {
			if _, err := tx.Exec(ctx, `INSERT INTO run_metadata (run_id, key, value) VALUES ($1, $2, $3)`, r.ID, k, md[k]); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return r, nil, fmt.Errorf("postgres: create run %s: %w", r.ID, err)
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
	r, err := sqlrow.ScanRun(s.pool.QueryRow(ctx, `SELECT `+sqlrow.RunColumns+` FROM runs WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Run{}, fmt.Errorf("postgres: get run %s: %w", clip(id), err)
	}
	return r, nil
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	q, args, err := sqlrow.ListRuns(f, schema.Postgres)
	if err := s.check("list runs", err); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanRun, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list runs: %w", err)
	}
	return out, nil
}

// UpdateRunStatus implements store.Store.
func (s *Store) UpdateRunStatus(ctx context.Context, id string, from, to event.Status) (store.Run, error) {
	if err := s.check("update run status", nil); err != nil {
		return store.Run{}, err
	}
	if err := event.CheckTransition(from, to); err != nil {
		return store.Run{}, fmt.Errorf("postgres: run %s: %w", clip(id), err)
	}
	if err := store.CheckRunID(id); err != nil {
		return store.Run{}, fmt.Errorf("postgres: update run status: %w", err)
	}
	var r store.Run
	err := s.write(ctx, func(tx pgx.Tx) error {
		var (
			cur   string
			token int64
		)
		err := tx.QueryRow(ctx, `SELECT status, lease_token FROM runs WHERE id = $1 FOR NO KEY UPDATE`, id).Scan(&cur, &token)
		if err == nil {
			err = store.CheckFence(ctx, id, token)
		}
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return store.ErrNotFound
		case err != nil:
			return err
		case event.Status(cur) != from:
			return &store.StatusConflictError{RunID: id, Want: from, Got: event.Status(cur)}
		}
		now := s.now().UnixNano()
		r, err = sqlrow.ScanRun(tx.QueryRow(ctx, `UPDATE runs SET status = $2, updated_ns = $3, finished_ns = $4
			WHERE id = $1 RETURNING `+sqlrow.RunColumns, id, string(to), now, finishedNS(to, now)))
		if err == nil && to.Final() {
			_, err = tx.Exec(ctx, notifySQL, runEndedPayload(id))
		}
		return err
	})
	if err != nil {
		return store.Run{}, fmt.Errorf("postgres: run %s: update status: %w", clip(id), err)
	}
	return r, nil
}

// finishedNS is the finished_ns of a run entering status to at now: now
// for a final status, else NULL.
func finishedNS(to event.Status, now int64) any {
	if to.Final() {
		return now
	}
	return nil
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, next int64, drafts []event.Event) ([]event.Event, error) {
	_, evs, err := s.appendStatus(ctx, runID, next, "", "", drafts)
	return evs, err
}

// AppendStatus implements store.Store.
func (s *Store) AppendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (store.Run, []event.Event, error) {
	if err := event.CheckTransition(from, to); err != nil {
		return store.Run{}, nil, fmt.Errorf("postgres: run %s: %w", clip(runID), err)
	}
	return s.appendStatus(ctx, runID, next, from, to, drafts)
}

// appendStatus appends drafts and, when to is not empty, changes the status
// from from to to, in one transaction.
func (s *Store) appendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (store.Run, []event.Event, error) {
	if err := s.check("append", nil); err != nil {
		return store.Run{}, nil, err
	}
	// Redaction and canonical JSON are the costly part; they need no lock.
	evs, err := store.PrepareDrafts(runID, next, drafts, s.now(), s.red)
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("postgres: append: %w", err)
	}
	r, err := s.appendTx(ctx, runID, next, from, to, evs)
	if err != nil {
		return store.Run{}, nil, fmt.Errorf("postgres: run %s: append: %w", runID, err)
	}
	return r, evs, nil
}

// appendTx seals evs onto run runID's log, writes them and the new tail
// (and status, when to is not empty), and commits.
func (s *Store) appendTx(ctx context.Context, runID string, next int64, from, to event.Status, evs []event.Event) (store.Run, error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return store.Run{}, fmt.Errorf("begin: %w", err)
	}
	r, err := s.appendIn(ctx, tx, runID, next, from, to, evs)
	if err != nil {
		rollback(ctx, tx)
		return store.Run{}, err
	}
	if err := tx.Commit(ctx); err != nil {
		if errors.Is(err, pgx.ErrTxCommitRollback) {
			return store.Run{}, fmt.Errorf("commit: %w", err) // the server said so
		}
		// COMMIT failed, but perhaps only its reply was lost: the
		// events may be durable. Find out rather than guess, so the
		// caller neither redoes an effect nor believes one recorded.
		// (pgconn.SafeToRetry cannot tell: pgx v5.12 reports a COMMIT
		// whose reply was lost as "conn closed", safe to retry, though
		// the server got it and committed; TestCommitLost shows it.)
		ok, cerr := s.committed(ctx, evs[len(evs)-1])
		switch {
		case cerr != nil:
			return store.Run{}, fmt.Errorf("commit: %w; whether it took effect is unknown: %w", err, cerr)
		case !ok:
			return store.Run{}, fmt.Errorf("commit: %w", err)
		}
	}
	return r, nil
}

// appendIn is the body of appendTx's transaction.
func (s *Store) appendIn(ctx context.Context, tx pgx.Tx, runID string, next int64, from, to event.Status, evs []event.Event) (store.Run, error) {
	// The row lock is what serializes writers of one run across
	// processes. NO KEY UPDATE rather than UPDATE: it does not block the
	// key-share locks that inserting a row that references the run takes
	// (an artifact, a fork), and it is the lock the UPDATE below needs anyway.
	var (
		lastSeq  int64
		lastHash []byte
		status   string
		token    int64
	)
	err := tx.QueryRow(ctx, `SELECT last_seq, last_hash, status, lease_token FROM runs WHERE id = $1 FOR NO KEY UPDATE`, runID).
		Scan(&lastSeq, &lastHash, &status, &token)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return store.Run{}, store.ErrNotFound
	case err != nil:
		return store.Run{}, err
	}
	// Under the row lock that AcquireLease takes too.
	if err := store.CheckTail(ctx, runID, next, lastSeq, token); err != nil {
		return store.Run{}, err
	}
	if to != "" && event.Status(status) != from {
		return store.Run{}, &store.StatusConflictError{RunID: runID, Want: from, Got: event.Status(status)}
	}
	var prev event.Hash
	if err := sqlrow.CopyHash(&prev, lastHash); err != nil {
		return store.Run{}, fmt.Errorf("last_hash: %w", err)
	}
	event.SealChain(runID, lastSeq, prev, evs)
	// The events and the new tail go in one round trip: a pipeline of
	// INSERTs (one for most batches) and the UPDATE.
	b := &pgx.Batch{}
	for rest := evs; len(rest) > 0; {
		n := insertChunk(rest, s.insertBytes)
		queueInsert(b, rest[:n])
		rest = rest[n:]
	}
	last := evs[len(evs)-1]
	now := s.now().UnixNano()
	if to.Final() {
		// Before the UPDATE, whose row is read last: heard at commit
		// (store.Changes).
		b.Queue(notifySQL, runEndedPayload(runID))
	}
	if to == "" {
		// The run's updated time moves with its log (never back: a
		// clock may step).
		b.Queue(`UPDATE runs SET last_seq = $2, last_hash = $3, updated_ns = GREATEST(updated_ns, $4) WHERE id = $1`, runID, last.Seq, last.Hash[:], now)
	} else {
		b.Queue(`UPDATE runs SET last_seq = $2, last_hash = $3, status = $4, updated_ns = $5, finished_ns = $6
			WHERE id = $1 RETURNING `+sqlrow.RunColumns, runID, last.Seq, last.Hash[:], string(to), now, finishedNS(to, now))
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for i := 0; i < b.Len()-1; i++ {
		if _, err := br.Exec(); err != nil {
			return store.Run{}, fmt.Errorf("insert seq %d to %d: %w", next, last.Seq, err)
		}
	}
	if to == "" {
		if _, err := br.Exec(); err != nil {
			return store.Run{}, fmt.Errorf("update tail: %w", err)
		}
		return store.Run{}, br.Close()
	}
	r, err := sqlrow.ScanRun(br.QueryRow())
	if err != nil {
		return store.Run{}, fmt.Errorf("update tail and status: %w", err)
	}
	return r, br.Close()
}

// insertEvents inserts evs, sealed, in one round trip.
func (s *Store) insertEvents(ctx context.Context, tx pgx.Tx, evs []event.Event) error {
	b := &pgx.Batch{}
	for rest := evs; len(rest) > 0; {
		n := insertChunk(rest, s.insertBytes)
		queueInsert(b, rest[:n])
		rest = rest[n:]
	}
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	for range b.Len() {
		if _, err := br.Exec(); err != nil {
			return fmt.Errorf("insert seq %d to %d: %w", evs[0].Seq, evs[len(evs)-1].Seq, err)
		}
	}
	return br.Close()
}

// readLease locks run runID's row inside tx, as Append does, and reads its
// lease state: AcquireLease and a fenced Append of one run are thus
// serialized, whatever processes they run in.
func readLease(ctx context.Context, tx pgx.Tx, runID string) (store.LeaseState, error) {
	var (
		st      store.LeaseState
		status  string
		owner   *string
		expires *int64
	)
	err := tx.QueryRow(ctx, `SELECT status, lease_owner, lease_token, lease_expires_ns FROM runs WHERE id = $1 FOR NO KEY UPDATE`, runID).
		Scan(&status, &owner, &st.Token, &expires)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, store.ErrNotFound
	}
	st.Status = event.Status(status)
	if owner != nil {
		st.Owner = *owner
	}
	if expires != nil {
		st.ExpiresNS = *expires
	}
	return st, err
}

// setLease writes l as run l.RunID's lease inside tx.
func setLease(ctx context.Context, tx pgx.Tx, l store.Lease) error {
	_, err := tx.Exec(ctx, `UPDATE runs SET lease_owner = $2, lease_token = $3, lease_expires_ns = $4 WHERE id = $1`,
		l.RunID, l.Owner, l.Token, l.Expires.UnixNano())
	return err
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (store.Lease, error) {
	if err := s.check("acquire lease", store.ValidateLease(runID, owner, 1, ttl)); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	err := s.write(ctx, func(tx pgx.Tx) error {
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
		return store.Lease{}, fmt.Errorf("postgres: run %s: acquire lease: %w", runID, err)
	}
	return l, nil
}

// RenewLease implements store.Store.
func (s *Store) RenewLease(ctx context.Context, runID, owner string, token int64, ttl time.Duration) (store.Lease, error) {
	if err := s.check("renew lease", store.ValidateLease(runID, owner, token, ttl)); err != nil {
		return store.Lease{}, err
	}
	var l store.Lease
	err := s.write(ctx, func(tx pgx.Tx) error {
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
		return store.Lease{}, fmt.Errorf("postgres: run %s: renew lease: %w", runID, err)
	}
	return l, nil
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, runID, owner string, token int64) error {
	if err := s.check("release lease", store.ValidateLease(runID, owner, token, 1)); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		if _, err := readLease(ctx, tx, runID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE runs SET lease_owner = NULL, lease_expires_ns = NULL
			WHERE id = $1 AND lease_owner = $2 AND lease_token = $3`, runID, owner, token)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: run %s: release lease: %w", runID, err)
	}
	return nil
}

// maxInsertBytes bounds the payload bytes of one INSERT: PostgreSQL takes
// at most 1 GiB in one message, and a batch may hold MaxBatch events of
// event.MaxPayloadSize.
const maxInsertBytes = 64 << 20

// insertChunk returns how many of evs, at least one, the next INSERT
// takes, given that one should hold at most limit payload bytes.
func insertChunk(evs []event.Event, limit int) int {
	size := 0
	for i, e := range evs {
		size += len(e.Payload)
		if size > limit && i > 0 {
			return i
		}
	}
	return len(evs)
}

// queueInsert queues one INSERT of evs, each column an array: one
// statement, prepared once per connection, whatever the number of rows.
func queueInsert(b *pgx.Batch, evs []event.Event) {
	var (
		seqs     = make([]int64, len(evs))
		types    = make([]string, len(evs))
		times    = make([]int64, len(evs))
		payloads = make([][]byte, len(evs))
		prevs    = make([][]byte, len(evs))
		hashes   = make([][]byte, len(evs))
	)
	for i := range evs {
		e := &evs[i]
		seqs[i], types[i], times[i] = e.Seq, string(e.Type), e.Time.UnixNano()
		payloads[i], prevs[i], hashes[i] = e.Payload, e.PrevHash[:], e.Hash[:]
	}
	b.Queue(`INSERT INTO events (run_id, seq, type, time_ns, payload, prev_hash, hash)
		SELECT $1::text, * FROM unnest($2::bigint[], $3::text[], $4::bigint[], $5::bytea[], $6::bytea[], $7::bytea[])`,
		evs[0].RunID, seqs, types, times, payloads, prevs, hashes)
}

// resolveTimeout bounds committed, which runs after the caller's context
// may have ended.
const resolveTimeout = 30 * time.Second

// committed reports whether the transaction that appended last committed,
// after its COMMIT failed without a clear answer (the connection broke, or
// the caller's context ended, while it was in flight). It locks the run's
// row first, so if that transaction is still running on the server it
// waits for it to end, then looks for last in the log: the hash covers the
// run, seq, time, payload and the whole chain before it, so an event there
// with last's hash is last itself. It runs on a new connection, regardless
// of ctx's cancellation, for at most resolveTimeout.
func (s *Store) committed(ctx context.Context, last event.Event) (bool, error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), resolveTimeout)
	defer cancel()
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("look for seq %d: %w", last.Seq, err)
	}
	defer rollback(ctx, tx)
	var one int
	if err := tx.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR SHARE`, last.RunID).Scan(&one); err != nil {
		return false, fmt.Errorf("look for seq %d: lock run: %w", last.Seq, err)
	}
	var hash []byte
	err = tx.QueryRow(ctx, `SELECT hash FROM events WHERE run_id = $1 AND seq = $2`, last.RunID, last.Seq).Scan(&hash)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("look for seq %d: %w", last.Seq, err)
	}
	return string(hash) == string(last.Hash[:]), nil
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, from int64, limit int) ([]event.Event, error) {
	if err := s.check("events", store.CheckRunID(runID)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanEvent, `SELECT `+sqlrow.EventColumns+` FROM events WHERE run_id = $1 AND seq >= $2 ORDER BY seq LIMIT $3`,
		runID, from, store.PageLimit(limit))
	if err != nil {
		return nil, fmt.Errorf("postgres: run %s: events: %w", clip(runID), err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, fmt.Errorf("postgres: run %s: events: %w", clip(runID), err)
		}
	}
	return out, nil
}

// LastEvent implements store.Store.
func (s *Store) LastEvent(ctx context.Context, runID string) (event.Event, error) {
	if err := s.check("last event", store.CheckRunID(runID)); err != nil {
		return event.Event{}, err
	}
	e, err := sqlrow.ScanEvent(s.pool.QueryRow(ctx, `SELECT `+sqlrow.EventColumns+` FROM events WHERE run_id = $1 ORDER BY seq DESC LIMIT 1`, runID))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
		if xerr := s.exists(ctx, runID); xerr != nil {
			err = xerr
		}
	}
	if err != nil {
		return event.Event{}, fmt.Errorf("postgres: run %s: last event: %w", clip(runID), err)
	}
	return e, nil
}

// exists returns nil if run id exists, or an error wrapping
// store.ErrNotFound.
func (s *Store) exists(ctx context.Context, id string) error {
	var one int
	err := s.pool.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1`, id).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
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
		return a, fmt.Errorf("postgres: put artifact: %w", err)
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		var one int
		switch err := tx.QueryRow(ctx, `SELECT 1 FROM runs WHERE id = $1`, a.RunID).Scan(&one); {
		case errors.Is(err, pgx.ErrNoRows):
			return store.ErrNotFound
		case err != nil:
			return err
		}
		// Insert unless the name is taken, then read what is stored
		// under it: ours, or an earlier Put's (maybe another process's,
		// committed an instant ago).
		_, err := tx.Exec(ctx, `INSERT INTO artifacts (`+sqlrow.ArtifactColumns+`) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (run_id, name) DO NOTHING`,
			a.RunID, a.Name, a.Digest, a.Size, a.MediaType, a.Created.UnixNano())
		if err != nil {
			return err
		}
		old, err := sqlrow.ScanArtifact(tx.QueryRow(ctx, `SELECT `+sqlrow.ArtifactColumns+` FROM artifacts WHERE run_id = $1 AND name = $2`, a.RunID, a.Name))
		if err != nil {
			return err
		}
		if err := store.SameArtifact(old, a); err != nil {
			return err
		}
		a = old
		return nil
	})
	if err != nil {
		return store.Artifact{}, fmt.Errorf("postgres: run %s: put artifact %q: %w", a.RunID, a.Name, err)
	}
	return a, nil
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, runID, name string) (store.Artifact, error) {
	if err := s.check("get artifact", store.CheckArtifactKey(runID, name)); err != nil {
		return store.Artifact{}, err
	}
	a, err := sqlrow.ScanArtifact(s.pool.QueryRow(ctx, `SELECT `+sqlrow.ArtifactColumns+` FROM artifacts WHERE run_id = $1 AND name = $2`, runID, name))
	if errors.Is(err, pgx.ErrNoRows) {
		err = store.ErrNotFound
	}
	if err != nil {
		return store.Artifact{}, fmt.Errorf("postgres: run %s: get artifact %q: %w", clip(runID), clip(name), err)
	}
	return a, nil
}

// ListArtifacts implements store.Store.
func (s *Store) ListArtifacts(ctx context.Context, runID string) ([]store.Artifact, error) {
	if err := s.check("list artifacts", store.CheckRunID(runID)); err != nil {
		return nil, err
	}
	out, err := query(ctx, s.pool, sqlrow.ScanArtifact, `SELECT `+sqlrow.ArtifactColumns+` FROM artifacts WHERE run_id = $1 ORDER BY name`, runID)
	if err != nil {
		return nil, fmt.Errorf("postgres: run %s: list artifacts: %w", clip(runID), err)
	}
	if len(out) == 0 {
		if err := s.exists(ctx, runID); err != nil {
			return nil, fmt.Errorf("postgres: list artifacts: %w", err)
		}
	}
	return out, nil
}

// query runs q on db and reads every row it returns with scan.
func query[T any](ctx context.Context, db *pgxpool.Pool, scan func(sqlrow.Scanner) (T, error), q string, args ...any) ([]T, error) {
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) { return scan(row) })
}

// clip shortens an untrusted id quoted in an error message.
func clip(s string) string { return store.Clip(s) }
