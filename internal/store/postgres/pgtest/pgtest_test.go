package pgtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// TestServer starts a server and checks what the package promises: it runs
// unprivileged, listens on no TCP port, keeps fsync on, gives each test its
// own database, and leaves nothing behind once stopped.
func TestServer(t *testing.T) {
	ctx := context.Background()
	s, err := pgtest.Start(ctx)
	if errors.Is(err, pgtest.ErrNoPostgres) && !pgtest.Required() {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	if uid := processUID(t, s.PID()); uid == 0 {
		t.Errorf("the server runs as root")
	}

	var (
		used []string
		left *pgx.Conn
	)
	t.Run("databases", func(t *testing.T) {
		a, b := s.NewDatabase(t), s.NewDatabase(t)
		used = []string{a, b}
		ca := connect(t, a)
		cb := connect(t, b)
		if _, err := ca.Exec(ctx, `CREATE TABLE x (y int); CREATE SCHEMA other; CREATE TABLE other.z (y int)`); err != nil {
			t.Fatal(err)
		}
		if _, err := cb.Exec(ctx, `SELECT * FROM x`); err == nil {
			t.Fatal("a table of one test's database is visible in another's")
		}
		for setting, want := range map[string]string{"listen_addresses": "", "fsync": "on", "synchronous_commit": "on"} {
			var got string
			if err := ca.QueryRow(ctx, "SELECT current_setting($1)", setting).Scan(&got); err != nil || got != want {
				t.Errorf("SHOW %s = %q, %v, want %q", setting, got, err, want)
			}
		}
		// A session left open past the test is ended with it.
		var err error
		if left, err = pgx.Connect(ctx, a); err != nil {
			t.Fatal(err)
		}
	})
	if left != nil {
		defer left.Close(ctx)
	}
	// The next test gets a database of the finished one, emptied.
	t.Run("reuse", func(t *testing.T) {
		u := s.NewDatabase(t)
		if u != used[0] && u != used[1] {
			t.Fatalf("NewDatabase() = %s, want one of %v again", u, used)
		}
		c := connect(t, u)
		var n int
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE n.nspname !~ '^pg_' AND n.nspname <> 'information_schema'`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("reused database holds %d relations, %v; want none", n, err)
		}
		if err := c.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n); err != nil || n != 0 {
			t.Fatalf("reused database has %d other sessions, %v; want none", n, err)
		}
		if _, err := c.Exec(ctx, `CREATE TABLE x (y int)`); err != nil {
			t.Fatalf("CREATE TABLE in the new public schema = %v", err)
		}
	})

	dir, pid := s.Dir(), s.PID()
	stopped = true
	if err := s.Stop(); err != nil {
		t.Fatalf("Stop() = %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Stop() left %s: %v", dir, err)
	}
	if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); !os.IsNotExist(err) {
		t.Errorf("Stop() left the server process %d", pid)
	}
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// processUID returns the real uid of process pid.
func processUID(t *testing.T, pid int) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "Uid:"); ok {
			var uid int
			fmt.Sscan(rest, &uid)
			return uid
		}
	}
	t.Fatalf("no Uid line in /proc/%d/status", pid)
	return -1
}
