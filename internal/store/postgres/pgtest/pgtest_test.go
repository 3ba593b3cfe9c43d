package pgtest_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
	"github.com/airlockrun/airlock/internal/testpki"
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

// TestServerTCP: StartTCP listens on 127.0.0.1 at the port given, and over
// TCP lets in only a role's password login from the networks given: a
// wrong password, the superuser (no password) and any address outside
// them are refused; the socket keeps its trust for the superuser.
func TestServerTCP(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		nets []string
		in   bool // a password login from 127.0.0.1 gets in
	}{
		{[]string{"127.0.0.1/32"}, true},
		{[]string{"10.244.0.0/24"}, false},
	} {
		t.Run(tc.nets[0], func(t *testing.T) {
			var port int
			s, err := pgtest.OnFreePort(func(p int) (*pgtest.Server, error) {
				port = p
				return pgtest.StartTCP(ctx, p, tc.nets)
			})
			pgtest.ForTest(t, s, err)
			if s.Port() != port {
				t.Errorf("Port() = %d, want %d", s.Port(), port)
			}
			admin := connect(t, s.URL("postgres")) // the socket
			if _, err := admin.Exec(ctx, "CREATE ROLE app LOGIN PASSWORD 'right'"); err != nil {
				t.Fatal(err)
			}
			login := func(user string) error {
				c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=10", user, port))
				if err == nil {
					c.Close(ctx)
				}
				return err
			}
			if err := login("app:right"); (err == nil) != tc.in {
				t.Errorf("password login from 127.0.0.1 with nets %v: %v, want in %v", tc.nets, err, tc.in)
			}
			for _, user := range []string{"app:wrong", "postgres", "app"} {
				if err := login(user); err == nil {
					t.Errorf("login as %q over TCP got in", user)
				}
			}
		})
	}
	if _, err := pgtest.StartTCP(ctx, 0, []string{"127.0.0.1/32"}); err == nil {
		t.Error("StartTCP with no port started")
	}
}

// TestServerPortInUse: StartTCP on a port something else holds fails with
// ErrPortInUse (postgres binds it only after initdb, seconds after the
// caller chose it), and OnFreePort then starts the server on another.
func TestServerPortInUse(t *testing.T) {
	ctx := context.Background()
	nets := []string{"127.0.0.1/32"}
	// A connected socket, as any outgoing connection of the machine holds
	// its ephemeral port, not only a listener.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	held, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	heldPort := held.LocalAddr().(*net.TCPAddr).Port
	_, err = pgtest.StartTCP(ctx, heldPort, nets)
	if errors.Is(err, pgtest.ErrNoPostgres) && !pgtest.Required() {
		t.Skip(err)
	}
	if !errors.Is(err, pgtest.ErrPortInUse) {
		t.Fatalf("StartTCP on a port in use = %v, want ErrPortInUse", err)
	}
	var ports []int
	s, err := pgtest.OnFreePort(func(p int) (*pgtest.Server, error) {
		if len(ports) == 0 {
			p = heldPort // taken between the choice and the bind
		}
		ports = append(ports, p)
		return pgtest.StartTCP(ctx, p, nets)
	})
	if err != nil {
		t.Fatalf("OnFreePort = %v after ports %v", err, ports)
	}
	defer s.Stop()
	if len(ports) != 2 || s.Port() != ports[1] {
		t.Errorf("OnFreePort tried ports %v and started on %d, want a second port after %d", ports, s.Port(), heldPort)
	}
}

// TestServerTLS: StartTLS lets in a password login over TCP only with TLS:
// verify-full against the server's CA and name gets in; without TLS, with
// another CA, or with a name the certificate does not hold, the login
// fails (the last two in the client, before the password is sent).
func TestServerTLS(t *testing.T) {
	ctx := context.Background()
	ca, err := testpki.New("pgtest TLS CA")
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.New("another CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.ServerPEM("postgres.test", "127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string][]byte{"ca.crt": ca.PEM, "other.crt": other.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var port int
	s, err := pgtest.OnFreePort(func(p int) (*pgtest.Server, error) {
		port = p
		return pgtest.StartTLS(ctx, p, []string{"127.0.0.1/32"}, cert, key)
	})
	pgtest.ForTest(t, s, err)
	admin := connect(t, s.URL("postgres")) // the socket
	if _, err := admin.Exec(ctx, "CREATE ROLE app LOGIN PASSWORD 'right'"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, query string
		in          bool
	}{
		{"verify-full", "sslmode=verify-full&sslrootcert=" + filepath.Join(dir, "ca.crt"), true},
		{"require", "sslmode=require", true},
		{"disable", "sslmode=disable", false},
		{"other CA", "sslmode=verify-full&sslrootcert=" + filepath.Join(dir, "other.crt"), false},
		{"wrong name", "sslmode=verify-full&sslrootcert=" + filepath.Join(dir, "ca.crt") + "&host=localhost", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://app:right@127.0.0.1:%d/postgres?connect_timeout=10&%s", port, tc.query))
			if (err == nil) != tc.in {
				t.Fatalf("%s: %v, want in %v", tc.query, err, tc.in)
			}
			if err != nil {
				return
			}
			defer c.Close(ctx)
			var ssl bool
			if err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&ssl); err != nil || !ssl {
				t.Errorf("%s: in, TLS %v (%v); want TLS", tc.query, ssl, err)
			}
		})
	}
	if _, err := pgtest.StartTLS(ctx, port, []string{"127.0.0.1/32"}, nil, nil); err == nil {
		t.Error("StartTLS with no certificate started")
	}
}
