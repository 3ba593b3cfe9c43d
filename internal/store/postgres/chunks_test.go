package postgres

import (
	"context"
	"errors"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/chunk"
	"github.com/airlockrun/airlock/internal/store/chunk/chunktest"
)

// TestChunks: the chunk table passes the suite every chunk backend
// passes (chunk.Dir's too).
func TestChunks(t *testing.T) {
	chunktest.Run(t, func(t *testing.T) chunk.Backend { return newStore(t, store.NoRedaction).Chunks() })
}

// TestChunksSharedAndChecked: a chunk one host process puts, another on
// the same database reads; a row whose size disagrees with its bytes, or
// is past the most a chunk may hold, is corrupt and not read.
func TestChunksSharedAndChecked(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, store.NoRedaction)
	other := openURL(t, mustURL(t, st), store.NoRedaction)
	key := chunk.TenantKey("t")
	a, err := chunk.NewStore(st.Chunks())
	if err != nil {
		t.Fatal(err)
	}
	b, err := chunk.NewStore(other.Chunks())
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("shared content")
	id := key.Hasher().Sum(data)
	if _, err := a.Put(ctx, id, data); err != nil {
		t.Fatal(err)
	}
	if got, err := b.Get(ctx, key, id, nil); err != nil || string(got) != string(data) {
		t.Fatalf("Get() from another process = %q, %v", got, err)
	}
	conn := rawConn(t, st)
	for name, stmt := range map[string]string{
		"size disagrees": `UPDATE chunks SET size = size + 1 WHERE id = $1`,
		"too large":      `UPDATE chunks SET size = 9000000, data = decode(repeat('00', 9000000), 'hex') WHERE id = $1`,
	} {
		if _, err := conn.Exec(ctx, stmt, id.String()); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := b.Get(ctx, key, id, nil); !errors.Is(err, chunk.ErrCorrupt) {
			t.Errorf("%s: Get() = %v, want ErrCorrupt", name, err)
		}
	}
	st.Close()
	if err := st.Chunks().Put(ctx, id, data); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Put() on a closed store = %v, want ErrClosed", err)
	}
}
