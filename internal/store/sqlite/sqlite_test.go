package sqlite_test

import (
	"bufio"
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/store/storetest"
)

// The test binary re-executes itself as a second writer process; the
// environment variable names the role.
const childEnv = "AIRLOCK_SQLITE_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		if err := child(role, os.Args[len(os.Args)-1]); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func openAt(t testing.TB, path string, r store.Redactor) *sqlite.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Redactor: r})
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	return s
}

// factory makes stores for the conformance suite and the benchmarks, each
// on a file of its own in the test's temporary directory.
var factory = storetest.Factory{
	New: func(t testing.TB, r store.Redactor) store.Store {
		return openAt(t, filepath.Join(t.TempDir(), "airlock.db"), r)
	},
	Reopen: func(t *testing.T, s store.Store) store.Store {
		return openAt(t, s.(*sqlite.Store).Path(), store.NoRedaction)
	},
	NewAt: func(t *testing.T, now func() time.Time) store.Store {
		path := filepath.Join(t.TempDir(), "airlock.db")
		s, err := sqlite.Open(context.Background(), path, sqlite.Options{Redactor: store.NoRedaction, Now: now})
		if err != nil {
			t.Fatalf("Open(%s) = %v", path, err)
		}
		return s
	},
	Tamper: func(t *testing.T, s store.Store, runID string, seq int64, payload []byte) {
		db := rawDB(t, s.(*sqlite.Store).Path())
		res, err := db.Exec(`UPDATE events SET payload = ? WHERE run_id = ? AND seq = ?`, payload, runID, seq)
		if n, _ := res.RowsAffected(); err != nil || n != 1 {
			t.Fatalf("tamper: %v (%d rows)", err, n)
		}
	},
	Dump: func(t *testing.T, s store.Store) []byte {
		// The bytes of the file and its WAL, as the store left them (no
		// checkpoint or VACUUM here: the store's deletions must do what
		// it takes).
		path := s.(*sqlite.Store).Path()
		var all []byte
		for _, p := range []string{path, path + "-wal", path + "-shm"} {
			b, err := os.ReadFile(p)
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				t.Fatal(err)
			}
			all = append(all, b...)
		}
		return all
	},
}

func TestConformance(t *testing.T) { storetest.Run(t, factory) }

// BenchmarkStore: on a file with synchronous=FULL, every write is one
// fsync'd commit.
func BenchmarkStore(b *testing.B) { storetest.Bench(b, factory) }

// rawDB opens the file with the plain driver, bypassing the store.
func rawDB(t *testing.T, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+(&url.URL{Path: path}).EscapedPath()+"?_busy_timeout=10000")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func TestOpenNeedsRedactor(t *testing.T) {
	_, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err == nil || !strings.Contains(err.Error(), "Redactor") {
		t.Fatalf("Open(no Redactor) = %v, want an error naming Redactor", err)
	}
}

// TestPragmas checks, from outside, the settings durability rests on.
func TestPragmas(t *testing.T) {
	path := filepath.Join(t.TempDir(), "odd ?#% name.db")
	s := openAt(t, path, store.NoRedaction)
	defer s.Close()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database not at its path: %v", err)
	}
	var mode string
	if err := rawDB(t, path).QueryRow(`PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Fatalf("journal_mode = %q, %v, want wal", mode, err)
	}
}

// TestRedactionOnDisk looks for the secret in the raw database and WAL
// files after the conformance suite's redaction case.
func TestRedactionOnDisk(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "a.db")
	s := openAt(t, path, redactor{})
	ctx := context.Background()
	id := event.NewRunID(time.Now())
	if _, err := s.CreateRun(ctx, store.Run{ID: id, Tenant: "a", Status: event.StatusQueued, Task: "use " + storetest.Secret}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Append(ctx, id, 1, []event.Event{{Type: event.TypeToolFinished, Payload: []byte(`{"output":"` + storetest.Secret + `"}`)}}); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(path + "*")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(storetest.Secret)) {
			t.Errorf("%s holds the secret", filepath.Base(f))
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

type redactor struct{}

func (redactor) Bytes(b []byte) []byte {
	return bytes.ReplaceAll(b, []byte(storetest.Secret), []byte("[redacted]"))
}

// child runs in a re-executed test binary. Roles:
//
//	append W BATCHES SIZE RUN   print ready, wait for a line on stdin, then
//	                            AppendLoop as writer W and print its conflicts
//	forever RUN                 append 5-event batches until killed,
//	                            printing each committed last seq
func child(role, path string) error {
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		return err
	}
	defer s.Close()
	args := strings.Fields(role)
	ctx := context.Background()
	switch args[0] {
	case "append":
		// Start together with the other writers: the parent says go once
		// every process has the database open.
		fmt.Println("ready") //nolint:forbidigo // the child process answers its parent on stdout
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return err
		}
		w, _ := strconv.Atoi(args[1])
		batches, _ := strconv.Atoi(args[2])
		size, _ := strconv.Atoi(args[3])
		n, err := storetest.AppendLoop(ctx, s, args[4], w, batches, size)
		fmt.Printf("conflicts %d\n", n) //nolint:forbidigo // the child process answers its parent on stdout
		return err
	case "forever":
		out := bufio.NewWriter(os.Stdout)
		for b := 0; ; b++ {
			r, err := s.GetRun(ctx, args[1])
			if err != nil {
				return err
			}
			ds := make([]event.Event, 5)
			for i := range ds {
				ds[i] = event.Event{Type: event.TypeRetry, Payload: []byte(fmt.Sprintf(`{"b":%d,"i":%d,"pad":%q}`, b, i, strings.Repeat("x", 500)))}
			}
			evs, err := s.Append(ctx, args[1], r.LastSeq+1, ds)
			if err != nil {
				return err
			}
			// Only now is the batch durable; the parent may rely on it.
			fmt.Fprintf(out, "%d\n", evs[len(evs)-1].Seq)
			out.Flush()
		}
	}
	return fmt.Errorf("unknown role %q", role)
}

func childCmd(t *testing.T, role, path string) *exec.Cmd {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$", path)
	cmd.Env = append(os.Environ(), childEnv+"="+role)
	cmd.Stderr = os.Stderr
	return cmd
}

func newRun(t *testing.T, s store.Store) string {
	t.Helper()
	id := event.NewRunID(time.Now())
	if _, err := s.CreateRun(context.Background(), store.Run{ID: id, Tenant: "a", Status: event.StatusRunning}); err != nil {
		t.Fatal(err)
	}
	return id
}

// TestTwoProcesses runs writers in two other processes and one goroutine
// here, all appending to one run in one file: seqs have no gap, the chain
// verifies, and no batch is interleaved with another.
func TestTwoProcesses(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s := openAt(t, path, store.NoRedaction)
	defer s.Close()
	id := newRun(t, s)
	const batches, size = 30, 10
	var (
		wg     sync.WaitGroup
		errs   [3]error
		outs   [2]string
		starts []io.WriteCloser
	)
	for w := range 2 {
		cmd := childCmd(t, fmt.Sprintf("append %d %d %d %s", w, batches, size, id), path)
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer cmd.Process.Kill() // a no-op once it exited
		sc := bufio.NewScanner(stdout)
		if !sc.Scan() || sc.Text() != "ready" {
			t.Fatalf("child %d did not get ready: %q, %v", w, sc.Text(), sc.Err())
		}
		starts = append(starts, stdin)
		wg.Go(func() {
			for sc.Scan() {
				outs[w] += sc.Text()
			}
			errs[w] = cmd.Wait()
		})
	}
	for _, stdin := range starts {
		if _, err := io.WriteString(stdin, "go\n"); err != nil {
			t.Fatal(err)
		}
		stdin.Close()
	}
	wg.Go(func() { _, errs[2] = storetest.AppendLoop(context.Background(), s, id, 2, batches, size) })
	wg.Wait()
	if err := errors.Join(errs[:]...); err != nil {
		t.Fatal(err)
	}
	storetest.CheckBatches(t, s, id, 3, batches, size)
	t.Logf("child processes: %q, %q", outs[0], outs[1])
}

// TestKillDuringAppend SIGKILLs a process in the middle of appending, then
// reopens the file: every batch the child reported committed is there, the
// log has no gap and verifies, and appending goes on where it stopped.
func TestKillDuringAppend(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a.db")
	s := openAt(t, path, store.NoRedaction)
	id := newRun(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		cmd := childCmd(t, "forever "+id, path)
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		var acked int64
		// Let it commit a few batches, then kill it at a moment of its
		// choosing rather than ours: right after reading an ack it is
		// already inside its next Append.
		for i := 0; i < 5*(round+1) && sc.Scan(); i++ {
			acked, _ = strconv.ParseInt(sc.Text(), 10, 64)
		}
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		for sc.Scan() { // acks written before the kill landed
			acked, _ = strconv.ParseInt(sc.Text(), 10, 64)
		}
		_ = cmd.Wait()
		if acked == 0 {
			t.Fatalf("round %d: the child committed nothing", round)
		}
		s := openAt(t, path, store.NoRedaction)
		n, err := store.VerifyRun(context.Background(), s, id)
		if err != nil {
			t.Fatalf("round %d: VerifyRun after kill = %v", round, err)
		}
		if n < acked || n%5 != 0 {
			t.Fatalf("round %d: log has %d events; the child had %d committed, in batches of 5", round, n, acked)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestGroupCommit: writes that arrive together commit together, and each
// keeps its own outcome: a write that fails (a duplicate run, a cancelled
// caller) leaves nothing and fails nothing else; every write that returned
// success is in the database, also after it is opened again.
func TestGroupCommit(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "a.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	dup := event.NewRunID(time.Now())
	if _, err := st.CreateRun(ctx, store.Run{ID: dup, Tenant: "a", Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	const n = 300
	ids := make([]string, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		ids[i] = event.NewRunID(time.Now())
		wg.Go(func() {
			c, id := ctx, ids[i]
			switch i % 10 {
			case 3:
				id = dup
			case 7:
				c = cancelled
			}
			_, errs[i] = st.CreateRun(c, store.Run{ID: id, Tenant: "a", Status: event.StatusQueued})
			if errs[i] == nil && i%2 == 0 {
				_, errs[i] = st.Append(c, id, 1, []event.Event{{Type: event.TypeRetry, Payload: []byte(`{"what":"x"}`)}})
			}
		})
	}
	wg.Wait()
	st.Close()
	if st, err = sqlite.Open(ctx, path, sqlite.Options{Redactor: store.NoRedaction}); err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i, id := range ids {
		r, gerr := st.GetRun(ctx, id)
		switch i % 10 {
		case 3:
			if !errors.Is(errs[i], store.ErrExists) {
				t.Errorf("write %d (a duplicate) = %v, want ErrExists", i, errs[i])
			}
		case 7:
			if !errors.Is(errs[i], context.Canceled) || !errors.Is(gerr, store.ErrNotFound) {
				t.Errorf("write %d (cancelled) = %v, run %v", i, errs[i], gerr)
			}
		default:
			if errs[i] != nil || gerr != nil {
				t.Errorf("write %d = %v, run %v", i, errs[i], gerr)
			} else if want := int64(1 - i%2); r.LastSeq != want {
				t.Errorf("run %d has last seq %d, want %d", i, r.LastSeq, want)
			}
		}
	}
}
