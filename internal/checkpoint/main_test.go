package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// pg is the package's throwaway PostgreSQL server, started by the first
// test that runs on it (not by TestMain: the fuzz workers, which run
// TestMain too, never need it).
var pg struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

func pgServer(t *testing.T) *pgtest.Server {
	t.Helper()
	pg.once.Do(func() { pg.srv, pg.err = pgtest.Start(context.Background()) })
	if errors.Is(pg.err, pgtest.ErrNoPostgres) && !pgtest.Required() {
		t.Skip(pg.err)
	}
	if pg.err != nil {
		t.Fatal(pg.err)
	}
	return pg.srv
}

func TestMain(m *testing.M) {
	if os.Getenv("CKPT_CHILD_ROOTS") != "" {
		collectChild()
		return
	}
	code := m.Run()
	if pg.srv != nil {
		if err := pg.srv.Stop(); err != nil && code == 0 {
			code = 1
		}
	}
	if restoreBench.close != nil {
		restoreBench.close()
	}
	if benchTree.dir != "" {
		os.RemoveAll(filepath.Dir(benchTree.dir))
	}
	os.Exit(code)
}

// storeCase is a test that runs on each of the backends: run gets the
// function that opens a new store of the backend.
type storeCase struct {
	name string
	run  func(*testing.T, func(*testing.T) *testStore)
}

// runOnBackends runs each case on each backend, as subtests named
// BACKEND/CASE.
func runOnBackends(t *testing.T, cases []storeCase) {
	for _, b := range backends {
		for _, c := range cases {
			t.Run(b.name+"/"+c.name, func(t *testing.T) { c.run(t, b.open) })
		}
	}
}

// backends are the stores a test runs on: on disk (blob and chunk
// directories, one host), and on PostgreSQL (the blob and chunk tables a
// replica shares; the directory only spools).
var backends = []struct {
	name string
	open func(t *testing.T) *testStore
}{
	{"dir", func(t *testing.T) *testStore { return newTestStore(t) }},
	{"postgres", func(t *testing.T) *testStore {
		return openTestStore(t, []string{"CKPT_CHILD_PG=" + pgServer(t).NewDatabase(t)})
	}},
}
