package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/postgres/pgtest"
)

// pg is the package's throwaway PostgreSQL server: the checkpoint tests
// that run on every backend run on its blob and chunk tables too.
var pg *pgtest.Server

func TestMain(m *testing.M) {
	code := pgtest.Main(m, &pg)
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
		st, err := postgres.Open(context.Background(), pg.NewDatabase(t), postgres.Options{Redactor: store.NoRedaction})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		bl, err := blob.New(filepath.Join(t.TempDir(), "spool"), blob.Options{Backend: st.Blobs()})
		if err != nil {
			t.Fatal(err)
		}
		return newTestStoreOn(t, bl, st.Chunks())
	}},
}
