// Package pgtest runs throwaway PostgreSQL servers for tests: a fresh
// cluster in a temporary directory, started from the PostgreSQL binaries
// installed on the machine, reachable only through a unix socket in that
// directory (no TCP listener at all), with trust authentication and the
// server's default durability settings (fsync on). Each test gets a
// database of its own, empty; once the test ends the database is emptied
// and handed to a later test, because making one (CREATE DATABASE copies
// and flushes a template) costs far more than the typical test. The server
// runs as an unprivileged user even when the tests run as root, because
// PostgreSQL refuses to run as root.
//
//	var pg *pgtest.Server
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m, &pg)) }
//
//	func TestX(t *testing.T) { url := pg.NewDatabase(t); ... }
//
// Where PostgreSQL is not installed, tests that ask for a database skip,
// except under CI (CI set) or as root, where Main fails instead: there
// scripts/ci-deps.sh installs it, so a missing server is a broken machine,
// not a reason to test less.
//
// Importers: tests, and bench/pgserver (a server for the benchmarks).
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNoPostgres reports that no PostgreSQL server binaries were found.
var ErrNoPostgres = errors.New("pgtest: no PostgreSQL server binaries (initdb, postgres) in PATH or /usr/lib/postgresql/*/bin")

// ErrPortInUse reports that the server could not listen on the TCP port
// given to StartTCP or StartTLS: something else holds it.
var ErrPortInUse = errors.New("pgtest: the TCP port is in use")

// Superuser is the name of the server's superuser; every URL connects as it.
const Superuser = "postgres"

// Server is a running throwaway PostgreSQL server, or, when PostgreSQL is
// missing and tests may skip, a stand-in whose NewDatabase skips.
type Server struct {
	dir  string // owned by the server's user: data/, the socket, the log
	port int    // of the TCP listener (StartTCP), which names the socket too; 0: none
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has exited
	// waitErr is cmd.Wait's result, readable once exit is closed.
	waitErr error
	// skip is why there is no server; nil for a real one.
	skip error

	mu sync.Mutex
	// dbs counts the databases made, to name the next. Guarded by mu.
	dbs int
	// free holds databases emptied after their test, for reuse. Guarded
	// by mu.
	free []string
}

// Required reports whether a missing PostgreSQL fails the tests rather than
// skipping them: under CI, and as root (where scripts/ci-deps.sh installs
// it).
func Required() bool {
	return os.Getenv("CI") != "" || os.Geteuid() == 0
}

// Main is the TestMain of a package whose tests need PostgreSQL: it starts
// a server and stores it in *srv, runs the tests, stops the server, and
// returns the exit code for os.Exit. Without PostgreSQL it runs the tests
// with a stand-in that makes them skip, unless Required.
func Main(m *testing.M, srv **Server) int {
	s, err := Start(context.Background())
	switch {
	case errors.Is(err, ErrNoPostgres) && !Required():
		*srv = &Server{skip: err}
		return m.Run()
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	*srv = s
	code := m.Run()
	if err := s.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Start creates a cluster in a new temporary directory and starts a server
// on it, returning once it accepts connections. The caller must Stop it.
func Start(ctx context.Context) (*Server, error) {
	return start(ctx, 0, nil, nil, nil)
}

// StartTCP is Start with a TCP listener besides the socket: on
// 127.0.0.1:port alone, for clients that cannot reach the socket (pods of
// the test cluster, whose connections the machine rewrites to loopback,
// their source address kept). Logins over TCP are by password
// (scram-sha-256, for roles the test makes) and only from the networks
// nets (CIDRs), not even from loopback; the socket keeps trust for the
// superuser.
func StartTCP(ctx context.Context, port int, nets []string) (*Server, error) {
	if port <= 0 || len(nets) == 0 {
		return nil, fmt.Errorf("pgtest: StartTCP needs a port and networks")
	}
	return start(ctx, port, nets, nil, nil)
}

// StartTLS is StartTCP with TLS: the server presents certPEM (its key
// keyPEM: PEM files as PostgreSQL reads them) and lets in over TCP only
// connections that use TLS (hostssl lines: a password login without TLS
// from the networks nets is refused too).
func StartTLS(ctx context.Context, port int, nets []string, certPEM, keyPEM []byte) (*Server, error) {
	if port <= 0 || len(nets) == 0 || len(certPEM) == 0 || len(keyPEM) == 0 {
		return nil, fmt.Errorf("pgtest: StartTLS needs a port, networks, a certificate and its key")
	}
	return start(ctx, port, nets, certPEM, keyPEM)
}

// OnFreePort calls start (a StartTCP or StartTLS) with a port that was
// free on 127.0.0.1 a moment ago, and again with another while start
// fails with ErrPortInUse, up to 5 times. The server binds the port only
// after initdb, seconds later (more on a loaded machine), and meanwhile
// any socket of the machine may take it: every outgoing connection and
// every listener on port 0 draws from the same ephemeral range.
func OnFreePort(start func(port int) (*Server, error)) (*Server, error) {
	var err error
	for range 5 {
		var l net.Listener
		l, err = net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		if err = l.Close(); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		var s *Server
		s, err = start(port)
		if !errors.Is(err, ErrPortInUse) {
			return s, err
		}
	}
	return nil, err
}

func start(ctx context.Context, port int, nets []string, certPEM, keyPEM []byte) (_ *Server, err error) {
	bin, err := findBin()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "airlock-pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	data := filepath.Join(dir, "data")
	// --no-sync only skips flushing the new cluster's files (nothing in
	// them is worth a crash-safe copy); the server itself keeps fsync on.
	// With a TCP listener, initdb's host lines (loopback) reject: only the
	// networks given below may log in over TCP.
	auth := []string{"--auth=trust"}
	if port > 0 {
		auth = []string{"--auth-local=trust", "--auth-host=reject"}
	}
	initArgs := []string{"-D", data, "-U", Superuser, "--encoding=UTF8", "--locale=C", "--no-sync"}
	initdb := command(cred, dir, filepath.Join(bin, "initdb"), append(initArgs, auth...)...)
	if out, err := initdb.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("pgtest: initdb: %w\n%s", err, out)
	}
	listen := []string{"-c", "listen_addresses="} // no TCP: only the socket below
	if port > 0 {
		listen = []string{"-c", "listen_addresses=127.0.0.1", "-c", "port=" + strconv.Itoa(port)}
		// First: the first line that matches a connection decides.
		hba := filepath.Join(data, "pg_hba.conf")
		old, err := os.ReadFile(hba)
		if err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		hostType := "host"
		if certPEM != nil {
			hostType = "hostssl"
			for name, b := range map[string][]byte{"server.crt": certPEM, "server.key": keyPEM} {
				f := filepath.Join(dir, name)
				if err := os.WriteFile(f, b, 0o600); err != nil {
					return nil, fmt.Errorf("pgtest: %w", err)
				}
				if cred != nil {
					if err := os.Chown(f, int(cred.Uid), int(cred.Gid)); err != nil {
						return nil, fmt.Errorf("pgtest: %w", err)
					}
				}
			}
			listen = append(listen, "-c", "ssl=on",
				"-c", "ssl_cert_file="+filepath.Join(dir, "server.crt"),
				"-c", "ssl_key_file="+filepath.Join(dir, "server.key"))
		}
		var lines strings.Builder
		for _, n := range nets {
			fmt.Fprintf(&lines, "%s all all %s scram-sha-256\n", hostType, n)
		}
		if err := os.WriteFile(hba, append([]byte(lines.String()), old...), 0o600); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "postgres.log"))
	if err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	defer logf.Close() // the child has its own copy
	args := append([]string{"-D", data}, listen...)
	cmd := command(cred, dir, filepath.Join(bin, "postgres"), append(args,
		"-c", "unix_socket_directories="+dir,
		"-c", "max_connections=200",
		"-c", "logging_collector=off",
	)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Should the test binary die without Stop, take the server with it
	// (SIGQUIT: immediate shutdown, children included).
	cmd.SysProcAttr.Pdeathsig = syscall.SIGQUIT
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s := &Server{dir: dir, port: port, cmd: cmd, exit: make(chan struct{})}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.exit)
	}()
	if err := s.waitReady(ctx); err != nil {
		if port > 0 && strings.Contains(s.logTail(), "Address already in use") {
			err = fmt.Errorf("%w (%d): %w", ErrPortInUse, port, err)
		}
		return nil, errors.Join(err, s.Stop())
	}
	return s, nil
}

// command builds a command run as cred (nil: as this process's user) in
// dir, with a minimal environment.
func command(cred *syscall.Credential, dir, path string, args ...string) *exec.Cmd {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LC_ALL=C", "TZ=UTC"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	return cmd
}

// findBin returns the directory holding initdb and postgres: that of the
// postgres in PATH, else the newest /usr/lib/postgresql/N/bin (Debian's
// layout, which keeps them out of PATH).
func findBin() (string, error) {
	var dirs []string
	if p, err := exec.LookPath("postgres"); err == nil {
		if p, err := filepath.EvalSymlinks(p); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	versions, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(versions, func(a, b string) int { return version(b) - version(a) })
	dirs = append(dirs, versions...)
	for _, d := range dirs {
		if executable(filepath.Join(d, "initdb")) && executable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", ErrNoPostgres
}

// version returns N of /usr/lib/postgresql/N/bin, or 0.
func version(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

func executable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// serverUser returns the credentials to run the server with: nil when this
// process is not root, else those of user nobody or, where that is
// missing, of a system user airlock-pgtest, created if needed.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		u, err = user.Lookup("airlock-pgtest")
	}
	if err != nil {
		out, aerr := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "airlock-pgtest").CombinedOutput()
		if aerr != nil {
			return nil, fmt.Errorf("pgtest: no user nobody, and useradd airlock-pgtest: %w: %s", aerr, out)
		}
		if u, err = user.Lookup("airlock-pgtest"); err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user %s: uid %q: %w", u.Username, u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtest: user %s: gid %q: %w", u.Username, u.Gid, err)
	}
	if uid == 0 {
		return nil, fmt.Errorf("pgtest: user %s is root", u.Username)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

// waitReady waits until the server accepts connections, fails, or a
// minute has passed.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.URL("postgres"))
		if err == nil {
			return c.Close(ctx)
		}
		select {
		case <-s.exit:
			if s.waitErr != nil {
				return fmt.Errorf("pgtest: postgres exited before it was ready: %w\n%s", s.waitErr, s.logTail())
			}
			return fmt.Errorf("pgtest: postgres exited before it was ready:\n%s", s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("pgtest: postgres not ready: %w\n%s", err, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (s *Server) logTail() string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "postgres.log"))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// PID returns the process id of the server (the postmaster).
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Dir returns the server's directory, which holds its unix socket.
func (s *Server) Dir() string { return s.dir }

// URL returns the URL of database db on the server, as the superuser.
func (s *Server) URL(db string) string {
	u := URL(s.dir, db)
	if s.port != 0 {
		u += "&port=" + strconv.Itoa(s.port) // the socket's name has the port
	}
	return u
}

// Port returns the port of the TCP listener on 127.0.0.1 (StartTCP); 0
// without one.
func (s *Server) Port() int { return s.port }

// URL returns the URL of database db on the server whose unix socket is in
// directory dir (as "host", in libpq's manner), as the superuser. Tests
// that put something between the store and the server use it with a
// directory of their own.
func URL(dir, db string) string {
	q := url.Values{"host": {dir}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", User: url.User(Superuser), Path: "/" + db, RawQuery: q.Encode()}).String()
}

// ForTest gives t the server s that Start, StartTCP, StartTLS or
// OnFreePort returned with err: it skips t when there is no PostgreSQL here
// and none is required (ErrNoPostgres), fails t on any other error, and
// stops the server when t ends.
func ForTest(t testing.TB, s *Server, err error) {
	t.Helper()
	switch {
	case errors.Is(err, ErrNoPostgres) && !Required():
		t.Skip(err)
	case err != nil:
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(); err != nil {
			t.Error(err)
		}
	})
}

// NewDatabase returns the URL of an empty database for t alone: a new one,
// or one a finished test used, emptied. When t ends (after the cleanups t
// registers later, so close stores in those), the sessions still on it are
// ended and every schema in it dropped, and it waits for the next test.
// Without a server it skips t.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	if s.skip != nil {
		t.Skipf("%v (install Debian's postgresql package: scripts/ci-deps.sh)", s.skip)
	}
	ctx := context.Background()
	s.mu.Lock()
	var name string
	n := len(s.free)
	if n > 0 {
		name, s.free = s.free[n-1], s.free[:n-1]
	} else {
		s.dbs++
		name = "test_" + strconv.Itoa(s.dbs)
	}
	s.mu.Unlock()
	if n == 0 {
		if err := s.admin(ctx, "CREATE DATABASE "+name); err != nil {
			t.Fatalf("pgtest: %v", err)
		}
	}
	t.Cleanup(func() {
		if err := s.empty(ctx, name); err != nil {
			t.Errorf("pgtest: empty database %s: %v", name, err)
			return // not reused
		}
		s.mu.Lock()
		s.free = append(s.free, name)
		s.mu.Unlock()
	})
	return s.URL(name)
}

// empty ends the sessions on database name and drops everything a test
// may have made in it: its schemas (public is made anew) and settings.
func (s *Server) empty(ctx context.Context, name string) error {
	if err := s.admin(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1`, name); err != nil {
		return err
	}
	if err := s.admin(ctx, "ALTER DATABASE "+name+" RESET ALL"); err != nil {
		return err
	}
	c, err := pgx.Connect(ctx, s.URL(name))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	// One transaction; the DROPs wait for the locks of sessions that are
	// still ending.
	_, err = c.Exec(ctx, `DO $$
		DECLARE n name;
		BEGIN
			FOR n IN SELECT nspname FROM pg_namespace WHERE nspname !~ '^pg_' AND nspname <> 'information_schema' LOOP
				EXECUTE format('DROP SCHEMA %I CASCADE', n);
			END LOOP;
			CREATE SCHEMA public;
		END $$`)
	return err
}

// admin runs one statement in the postgres database.
func (s *Server) admin(ctx context.Context, sql string, args ...any) error {
	c, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		return fmt.Errorf("%s: %w", strings.Fields(sql)[0], err)
	}
	return nil
}

// Stop shuts the server down (fast shutdown: open transactions roll back),
// waits for it, and removes its directory.
func (s *Server) Stop() error {
	if s.skip != nil {
		return nil
	}
	var errs []error
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-s.exit:
	case <-time.After(30 * time.Second):
		errs = append(errs, fmt.Errorf("pgtest: postgres did not stop in 30s; killed:\n%s", s.logTail()))
		_ = s.cmd.Process.Signal(syscall.SIGQUIT) // immediate shutdown
		select {
		case <-s.exit:
		case <-time.After(10 * time.Second):
			_ = s.cmd.Process.Kill()
			<-s.exit
		}
	}
	var ee *exec.ExitError
	if s.waitErr != nil && !errors.As(s.waitErr, &ee) {
		errs = append(errs, fmt.Errorf("pgtest: wait for postgres: %w", s.waitErr))
	}
	if err := os.RemoveAll(s.dir); err != nil {
		errs = append(errs, fmt.Errorf("pgtest: %w", err))
	}
	return errors.Join(errs...)
}
