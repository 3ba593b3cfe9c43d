package checkpoint

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/postgres"
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
	if benchTree.dir != "" {
		os.RemoveAll(filepath.Dir(benchTree.dir))
	}
	os.Exit(code)
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
		url := pgServer(t).NewDatabase(t)
		st, err := postgres.Open(context.Background(), url, postgres.Options{Redactor: store.NoRedaction})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		bl, err := blob.New(filepath.Join(t.TempDir(), "spool"), blob.Options{Backend: st.Blobs()})
		if err != nil {
			t.Fatal(err)
		}
		ts := newTestStoreOn(t, bl, st.Chunks())
		ts.reopen = []string{"CKPT_CHILD_PG=" + url}
		return ts
	}},
}
