package postgres

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// pg is the package's throwaway server; each test makes its own database.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	os.Exit(pgtest.Main(m, &pg))
}

// urls remembers the URL of each store the tests open, so a test can open
// another handle on the same database or reach it behind the store's back.
// (The store itself keeps no URL: it may hold a password.)
var urls sync.Map // *Store -> string

// newStore opens a store on a new database, closed when t ends.
func newStore(t testing.TB, r store.Redactor) *Store {
	t.Helper()
	return openURL(t, pg.NewDatabase(t), r)
}

// openURL opens a store on the database at url, closed when t ends.
func openURL(t testing.TB, url string, r store.Redactor) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{Redactor: r})
	if err != nil {
		t.Fatalf("Open() = %v", err)
	}
	urls.Store(s, url)
	t.Cleanup(func() { s.Close() })
	return s
}

// rawConn connects to s's database directly, bypassing the store.
func rawConn(t testing.TB, s *Store) *pgx.Conn {
	t.Helper()
	u, ok := urls.Load(s)
	if !ok {
		t.Fatal("rawConn: a store the tests did not open")
	}
	c, err := pgx.Connect(context.Background(), u.(string))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}
