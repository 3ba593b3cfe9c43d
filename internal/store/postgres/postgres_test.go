package postgres

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/storetest"
)

// factory makes stores for the conformance suite and the benchmarks, each
// on a database of its own on the test server.
var factory = storetest.Factory{
	New: func(t testing.TB, r store.Redactor) store.Store {
		return newStore(t, r)
	},
	Reopen: func(t *testing.T, s store.Store) store.Store {
		u, _ := urls.Load(s.(*Store))
		return openURL(t, u.(string), store.NoRedaction)
	},
	NewAt: func(t *testing.T, now func() time.Time) store.Store {
		s, err := Open(context.Background(), pg.NewDatabase(t), Options{Redactor: store.NoRedaction, Now: now})
		if err != nil {
			t.Fatalf("Open() = %v", err)
		}
		return s
	},
	Tamper: func(t *testing.T, s store.Store, runID string, seq int64, payload []byte) {
		tag, err := rawConn(t, s.(*Store)).Exec(context.Background(),
			`UPDATE events SET payload = $1 WHERE run_id = $2 AND seq = $3`, payload, runID, seq)
		if err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("tamper: %v (%d rows)", err, tag.RowsAffected())
		}
	},
	Dump: func(t *testing.T, s store.Store) []byte {
		return dumpText(t, rawConn(t, s.(*Store)))
	},
}

func TestConformance(t *testing.T) { storetest.Run(t, factory) }

// BenchmarkStore: on the test server (unix socket, fsync on,
// synchronous_commit on), every write is one commit the server flushes to
// disk before it answers.
func BenchmarkStore(b *testing.B) { storetest.Bench(b, factory) }

// TestOpenErrors: Open refuses what it must, and its errors never show the
// URL's password.
func TestOpenErrors(t *testing.T) {
	const password = "hunter2-pw"
	db := pg.NewDatabase(t)
	withParam := func(k, v string) string {
		u, err := url.Parse(db)
		if err != nil {
			t.Fatal(err)
		}
		q := u.Query()
		q.Set(k, v)
		u.RawQuery = q.Encode()
		return u.String()
	}
	tests := []struct {
		name string
		url  string
		opts Options
		want string // in the error
	}{
		{"no redactor", db, Options{}, "Redactor"},
		{"malformed URL", "postgres://airlock:" + password + "@[::1/db", Options{Redactor: store.NoRedaction}, "malformed"},
		{"malformed key=value", "host=/x password='" + password, Options{Redactor: store.NoRedaction}, "malformed"},
		{"no server", "postgres://airlock:" + password + "@/db?host=/nonexistent&connect_timeout=5", Options{Redactor: store.NoRedaction}, "connect"},
		{"no database", strings.Replace(db, "/test_", "/missing_", 1), Options{Redactor: store.NoRedaction}, "missing_"},
		{"commits not durable", withParam("synchronous_commit", "off"), Options{Redactor: store.NoRedaction}, "synchronous_commit=off"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(context.Background(), tt.url, tt.opts)
			if err == nil {
				s.Close()
				t.Fatalf("Open() = nil error, want one mentioning %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.HasPrefix(err.Error(), "postgres: ") {
				t.Errorf("Open() = %v, want a postgres: error mentioning %q", err, tt.want)
			}
			if strings.Contains(err.Error(), password) {
				t.Errorf("Open() error shows the password: %v", err)
			}
		})
	}
}

// TestIdleTransactionTimeout: the store's sessions end a transaction left
// idle by a vanished client, unless the URL says otherwise.
func TestIdleTransactionTimeout(t *testing.T) {
	db := pg.NewDatabase(t)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("idle_in_transaction_session_timeout", "5s")
	u.RawQuery = q.Encode()
	for _, tt := range []struct{ url, want string }{{db, idleTxTimeout}, {u.String(), "5s"}} {
		s := openURL(t, tt.url, store.NoRedaction)
		var got string
		if err := s.pool.QueryRow(context.Background(), `SHOW idle_in_transaction_session_timeout`).Scan(&got); err != nil || got != tt.want {
			t.Errorf("idle_in_transaction_session_timeout = %q, %v, want %q", got, err, tt.want)
		}
	}
}

// TestRedactionInDatabase looks for the secret anywhere in the database
// after a redacting store wrote a task and a payload holding it.
func TestRedactionInDatabase(t *testing.T) {
	s := newStore(t, redactor{})
	ctx := context.Background()
	id := newRun(t, s)
	if _, err := s.CreateRun(ctx, store.Run{ID: event.NewRunID(time.Now()), Tenant: "a", Status: event.StatusQueued, Task: "use " + storetest.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, id, 1, []event.Event{{Type: event.TypeToolFinished, Payload: []byte(`{"output":"` + storetest.Secret + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	var n int
	err := rawConn(t, s).QueryRow(ctx, `SELECT
		(SELECT count(*) FROM runs r WHERE strpos(r::text, $1) > 0) +
		(SELECT count(*) FROM events e WHERE strpos(e::text, $1) > 0 OR position(convert_to($1, 'UTF8') IN e.payload) > 0)`,
		storetest.Secret).Scan(&n)
	if err != nil || n != 0 {
		t.Fatalf("rows holding the secret: %d, %v", n, err)
	}
}

type redactor struct{}

func (redactor) Bytes(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(storetest.Secret), []byte("[redacted]"))
}

func newRun(t testing.TB, s store.Store) string {
	t.Helper()
	id := event.NewRunID(time.Now())
	if _, err := s.CreateRun(context.Background(), store.Run{ID: id, Tenant: "a", Status: event.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	return id
}

// batch returns n drafts whose payloads name their writer w and round.
func batch(w string, round, n int) []event.Event {
	ds := make([]event.Event, n)
	for i := range ds {
		p, _ := json.Marshal(map[string]any{"w": w, "round": round, "i": i})
		ds[i] = event.Event{Type: event.TypeRetry, Payload: p}
	}
	return ds
}

// waitLockWaiters waits until n sessions of s's database are waiting for
// a lock. It polls: there is no event to wait on, and no fixed time
// would be right on every machine.
func waitLockWaiters(t *testing.T, s *Store, n int) {
	t.Helper()
	c := rawConn(t, s)
	for {
		var got int
		err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&got)
		if err != nil {
			t.Fatal(err)
		}
		if got == n {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestTwoStoresRace makes two stores on one database, as two airlock
// processes would have, append to the same run at the same seq at the
// same instant: a third session holds the run's row lock until both are
// queued on it. Exactly one wins; the other gets an AppendConflictError
// naming the winner's tail, and writes nothing.
func TestTwoStoresRace(t *testing.T) {
	a := newStore(t, store.NoRedaction)
	u, _ := urls.Load(a)
	b := openURL(t, u.(string), store.NoRedaction)
	ctx := context.Background()
	id := newRun(t, a)
	holder := rawConn(t, a)
	sizes := map[string]int{"a": 3, "b": 5}
	var next int64 = 1
	for round := range 6 {
		tx, err := holder.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE`, id); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := map[string]error{}
		var mu sync.Mutex
		for name, s := range map[string]*Store{"a": a, "b": b} {
			wg.Go(func() {
				_, err := s.Append(ctx, id, next, batch(name, round, sizes[name]))
				mu.Lock()
				errs[name] = err
				mu.Unlock()
			})
		}
		waitLockWaiters(t, a, 2)
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		wg.Wait()

		var winner, loser string
		switch {
		case errs["a"] == nil && errs["b"] != nil:
			winner, loser = "a", "b"
		case errs["b"] == nil && errs["a"] != nil:
			winner, loser = "b", "a"
		default:
			t.Fatalf("round %d: Append() = %v (a), %v (b); want exactly one to win", round, errs["a"], errs["b"])
		}
		var ce *store.AppendConflictError
		if !errors.As(errs[loser], &ce) || ce.Want != next || ce.Got != next+int64(sizes[winner]) {
			t.Fatalf("round %d: loser's Append() = %v, want an AppendConflictError with Got %d", round, errs[loser], next+int64(sizes[winner]))
		}
		evs, err := a.Events(ctx, id, next, store.MaxPage)
		if err != nil || len(evs) != sizes[winner] {
			t.Fatalf("round %d: Events() = %d events, %v; want the winner's %d", round, len(evs), err, sizes[winner])
		}
		for i, e := range evs {
			var p struct {
				W     string
				Round int
				I     int
			}
			if err := json.Unmarshal(e.Payload, &p); err != nil || p.W != winner || p.Round != round || p.I != i {
				t.Fatalf("round %d: seq %d is %s, want event %d of %s's batch", round, e.Seq, e.Payload, i, winner)
			}
		}
		next += int64(sizes[winner])
		if n, err := store.VerifyRun(ctx, b, id); err != nil || n != next-1 {
			t.Fatalf("round %d: VerifyRun() = %d, %v, want %d", round, n, err, next-1)
		}
	}
}

// TestAppendWaitsForLock: an Append queued on the run's row lock behind
// another session writes nothing while it waits, and gives up cleanly when
// its context ends.
func TestAppendWaitsForLock(t *testing.T) {
	s := newStore(t, store.NoRedaction)
	bg := context.Background()
	id := newRun(t, s)
	holder := rawConn(t, s)
	tx, err := holder.Begin(bg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(bg, `SELECT 1 FROM runs WHERE id = $1 FOR NO KEY UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(bg)
	done := make(chan error, 1)
	go func() {
		_, err := s.Append(ctx, id, 1, batch("a", 0, 4))
		done <- err
	}()
	waitLockWaiters(t, s, 1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Append(cancelled while waiting) = %v, want context.Canceled", err)
	}
	if err := tx.Rollback(bg); err != nil {
		t.Fatal(err)
	}
	if n, err := store.VerifyRun(bg, s, id); err != nil || n != 0 {
		t.Fatalf("VerifyRun() = %d, %v, want an empty log", n, err)
	}
	if _, err := s.Append(bg, id, 1, batch("a", 1, 4)); err != nil {
		t.Fatalf("Append() after the wait = %v", err)
	}
}

// TestBackendKilledMidTransaction has the server end the session of an
// Append after the events are written and while the run's tail is being
// updated, before COMMIT: nothing of it stays, the store's pool recovers,
// and the log goes on where it was.
func TestBackendKilledMidTransaction(t *testing.T) {
	for _, withStatus := range []bool{false, true} {
		t.Run(fmt.Sprintf("status=%v", withStatus), func(t *testing.T) {
			s := newStore(t, store.NoRedaction)
			ctx := context.Background()
			id := newRun(t, s)
			if _, err := s.Append(ctx, id, 1, batch("a", 0, 5)); err != nil {
				t.Fatal(err)
			}
			raw := rawConn(t, s)
			// The trigger runs inside the UPDATE of the tail, so after
			// the COPY of the events; the session terminates itself, as
			// an administrator's pg_terminate_backend or a crash of the
			// backend process would end it.
			if _, err := raw.Exec(ctx, `
				CREATE FUNCTION die() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN
					PERFORM pg_terminate_backend(pg_backend_pid());
					PERFORM pg_sleep(60); -- the termination lands in here
					RETURN NEW;
				END $$;
				CREATE TRIGGER die BEFORE UPDATE OF last_seq ON runs
					FOR EACH ROW WHEN (NEW.last_seq > 5) EXECUTE FUNCTION die();`); err != nil {
				t.Fatal(err)
			}
			var err error
			if withStatus {
				done, _ := event.New(event.RunCompleted{Summary: "ok"})
				_, _, err = s.AppendStatus(ctx, id, 6, event.StatusRunning, event.StatusCompleted, []event.Event{done})
			} else {
				_, err = s.Append(ctx, id, 6, batch("a", 1, 7))
			}
			if err == nil {
				t.Fatal("Append() whose session was terminated = nil error")
			}
			t.Logf("Append() = %v", err)
			var rows int
			if err := raw.QueryRow(ctx, `SELECT count(*) FROM events WHERE run_id = $1`, id).Scan(&rows); err != nil || rows != 5 {
				t.Fatalf("events rows = %d, %v, want the first 5 only", rows, err)
			}
			r, err := s.GetRun(ctx, id)
			if err != nil || r.LastSeq != 5 || r.Status != event.StatusRunning {
				t.Fatalf("GetRun() = last seq %d, status %s, %v; want 5, running", r.LastSeq, r.Status, err)
			}
			if _, err := raw.Exec(ctx, `DROP TRIGGER die ON runs`); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Append(ctx, id, 6, batch("a", 2, 7)); err != nil {
				t.Fatalf("Append() after the terminated one = %v", err)
			}
			if n, err := store.VerifyRun(ctx, s, id); err != nil || n != 12 {
				t.Fatalf("VerifyRun() = %d, %v, want 12", n, err)
			}
		})
	}
}

// TestCommitLost breaks the connection of an AppendStatus at its COMMIT,
// through a proxy between the store and the server, in the two ways that
// leave the client not knowing the outcome from the wire alone: the COMMIT
// never reaches the server, or the server commits and its reply is lost.
// Either way the store finds out which, and says so truly.
func TestCommitLost(t *testing.T) {
	tests := []struct {
		mode      dropMode
		committed bool
	}{
		{dropCommit, false},
		{dropCommitReply, true},
	}
	for _, tt := range tests {
		t.Run(tt.mode.String(), func(t *testing.T) {
			db := pg.NewDatabase(t)
			p := newCommitProxy(t, pg.Dir())
			s := openURL(t, p.url(t, db), store.NoRedaction)
			ctx := context.Background()
			id := newRun(t, s)
			if _, err := s.Append(ctx, id, 1, batch("a", 0, 3)); err != nil {
				t.Fatal(err)
			}
			done, _ := event.New(event.RunCompleted{Summary: "ok"})
			p.arm(tt.mode)
			r, evs, err := s.AppendStatus(ctx, id, 4, event.StatusRunning, event.StatusCompleted, []event.Event{done})
			if p.drops() != 1 {
				t.Fatalf("the proxy broke %d commits, want 1", p.drops())
			}
			got, gerr := s.GetRun(ctx, id)
			if gerr != nil {
				t.Fatal(gerr)
			}
			if tt.committed {
				if err != nil || len(evs) != 1 || r.Status != event.StatusCompleted || r.LastSeq != 4 {
					t.Fatalf("AppendStatus() = %+v, %d events, %v; want it to report the commit", r, len(evs), err)
				}
				if got.LastSeq != 4 || got.Status != event.StatusCompleted || got.LastHash != evs[0].Hash {
					t.Fatalf("GetRun() = %+v, want the appended event and status", got)
				}
			} else {
				if err == nil {
					t.Fatal("AppendStatus() = nil error, but the COMMIT never reached the server")
				}
				t.Logf("AppendStatus() = %v", err)
				if got.LastSeq != 3 || got.Status != event.StatusRunning {
					t.Fatalf("GetRun() = last seq %d, status %s; want 3, running", got.LastSeq, got.Status)
				}
			}
			if _, err := store.VerifyRun(ctx, s, id); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestInsertChunk(t *testing.T) {
	sized := func(sizes ...int) []event.Event {
		evs := make([]event.Event, len(sizes))
		for i, n := range sizes {
			evs[i].Payload = make([]byte, n)
		}
		return evs
	}
	tests := []struct {
		name  string
		sizes []int
		want  int
	}{
		{"one small", []int{10}, 1},
		{"all fit", []int{10, 20, 30}, 3},
		{"exactly the limit", []int{50, 50}, 2},
		{"one over", []int{50, 50, 1}, 2},
		{"first alone over", []int{101, 1}, 1},
		{"second over", []int{1, 100}, 1},
	}
	for _, tt := range tests {
		if got := insertChunk(sized(tt.sizes...), 100); got != tt.want {
			t.Errorf("%s: insertChunk(%v, 100) = %d, want %d", tt.name, tt.sizes, got, tt.want)
		}
	}
}

// TestAppendLargeBatch appends a batch too large for one INSERT (the
// limit lowered from maxInsertBytes, which is in the megabytes): it is
// written whole, in order, and verifies; and one that fails in its last
// INSERT writes nothing.
func TestAppendLargeBatch(t *testing.T) {
	s := newStore(t, store.NoRedaction)
	s.insertBytes = 4 << 10
	ctx := context.Background()
	id := newRun(t, s)
	fill := strings.Repeat("x", 1000)
	const n = 50
	ds := make([]event.Event, n)
	for i := range ds {
		ds[i] = event.Event{Type: event.TypeRetry, Payload: json.RawMessage(fmt.Sprintf(`{"i":%d,"x":%q}`, i, fill))}
	}
	if c := insertChunk(ds, s.insertBytes); c > n/4 {
		t.Fatalf("the first INSERT takes %d of %d events; the test wants several", c, n)
	}
	evs, err := s.Append(ctx, id, 1, ds)
	if err != nil || len(evs) != n {
		t.Fatalf("Append(%d events) = %d events, %v", n, len(evs), err)
	}
	if got, err := store.VerifyRun(ctx, s, id); err != nil || got != n {
		t.Fatalf("VerifyRun() = %d, %v, want %d", got, err, n)
	}
	last, err := s.LastEvent(ctx, id)
	if err != nil || last.Seq != n || !bytes.Equal(last.Payload, evs[n-1].Payload) {
		t.Fatalf("LastEvent() = seq %d, %v; want the batch's last", last.Seq, err)
	}

	// A row the last INSERT collides with (put there behind the store's
	// back): the earlier INSERTs of the batch do not stay.
	raw := rawConn(t, s)
	if _, err := raw.Exec(ctx, `INSERT INTO events SELECT run_id, $2, type, time_ns, payload, prev_hash, hash
		FROM events WHERE run_id = $1 AND seq = 1`, id, 2*n); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, id, n+1, ds); err == nil {
		t.Fatal("Append() colliding in its last INSERT = nil error")
	}
	var rows int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM events WHERE run_id = $1`, id).Scan(&rows); err != nil || rows != n+1 {
		t.Fatalf("events rows = %d, %v, want %d (the log and the planted row)", rows, err, n+1)
	}
	if r, err := s.GetRun(ctx, id); err != nil || r.LastSeq != n {
		t.Fatalf("GetRun() last seq = %d, %v, want %d", r.LastSeq, err, n)
	}
}
