package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// blobsOn returns a blob store on s's database, spooling in a directory of
// its own, as another host process's would be.
func blobsOn(t *testing.T, s *Store) *blob.Store {
	t.Helper()
	b, err := blob.New(filepath.Join(t.TempDir(), "blobs"), blob.Options{Backend: s.Blobs()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func readBlob(s *blob.Store, d string) ([]byte, error) {
	r, err := s.Open(context.Background(), d)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// TestBlobs: a blob one host process stores, in chunks of at most
// MaxChunk, every other one reads, checked; deleting it removes every
// chunk.
func TestBlobs(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, store.NoRedaction)
	a, b := blobsOn(t, st), blobsOn(t, openURL(t, mustURL(t, st), store.NoRedaction))
	exact := make([]byte, 2*MaxChunk)
	big := make([]byte, 3*MaxChunk+17)
	rand.Read(exact)
	rand.Read(big)
	tests := []struct {
		name   string
		data   []byte
		chunks int
	}{
		{"empty", nil, 0},
		{"small", []byte("hello, world\n"), 1},
		{"two full chunks", exact, 2},
		{"three chunks and a bit", big, 4},
	}
	c := rawConn(t, st)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, n, err := a.Put(ctx, bytes.NewReader(tt.data))
			if err != nil || d != sum(tt.data) || n != int64(len(tt.data)) {
				t.Fatalf("Put() = %s, %d, %v", d, n, err)
			}
			got, err := readBlob(b, d)
			if err != nil || !bytes.Equal(got, tt.data) {
				t.Fatalf("the other process reads %d bytes, %v; want %d", len(got), err, len(tt.data))
			}
			var chunks, most int
			if err := c.QueryRow(ctx, `SELECT count(*), COALESCE(max(length(data)), 0) FROM blob_chunks WHERE digest = $1`, d).Scan(&chunks, &most); err != nil {
				t.Fatal(err)
			}
			if chunks != tt.chunks || most > MaxChunk {
				t.Errorf("%d chunks of at most %d bytes; want %d of at most %d", chunks, most, tt.chunks, MaxChunk)
			}
			// Stored again, by either: nothing new.
			if _, _, err := b.Put(ctx, bytes.NewReader(tt.data)); err != nil {
				t.Fatal(err)
			}
			var rows int
			if err := c.QueryRow(ctx, `SELECT count(*) FROM blob_chunks WHERE digest = $1`, d).Scan(&rows); err != nil || rows != tt.chunks {
				t.Errorf("after a second Put: %d chunks, %v", rows, err)
			}
		})
	}
	d := sum(big)
	if err := b.Delete(ctx, d); err != nil {
		t.Fatal(err)
	}
	if ok, err := a.Has(ctx, d); ok || err != nil {
		t.Errorf("Has(deleted) = %v, %v", ok, err)
	}
	if _, err := a.Open(ctx, d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Open(deleted) = %v, want ErrNotFound", err)
	}
	if err := a.Delete(ctx, d); !errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Delete(deleted) = %v, want ErrNotFound", err)
	}
	var rows int
	if err := c.QueryRow(ctx, `SELECT count(*) FROM blob_chunks WHERE digest = $1`, d).Scan(&rows); err != nil || rows != 0 {
		t.Errorf("chunks left after Delete: %d, %v", rows, err)
	}
}

// mustURL returns the URL the tests opened s with.
func mustURL(t *testing.T, s *Store) string {
	t.Helper()
	u, ok := urls.Load(s)
	if !ok {
		t.Fatal("a store the tests did not open")
	}
	return u.(string)
}

// TestBlobsConcurrentPut: processes storing the same content at once
// store it once, and every one of them gets it back.
func TestBlobsConcurrentPut(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, store.NoRedaction)
	data := make([]byte, MaxChunk+1)
	rand.Read(data)
	var wg sync.WaitGroup
	errs := make([]error, 6)
	for i := range errs {
		bs := blobsOn(t, st)
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _, errs[i] = bs.Put(ctx, bytes.NewReader(data))
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := rawConn(t, st).QueryRow(ctx, `SELECT count(*) FROM blob_chunks`).Scan(&n); err != nil || n != 2 {
		t.Errorf("%d chunks stored, %v; want 2", n, err)
	}
	if got, err := readBlob(blobsOn(t, st), sum(data)); err != nil || !bytes.Equal(got, data) {
		t.Errorf("read back: %d bytes, %v", len(got), err)
	}
}

// TestBlobsCorrupt: rows changed behind the store's back are caught as the
// blob is read: a flipped byte, a missing chunk, an oversized or extra
// chunk, a wrong size.
func TestBlobsCorrupt(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		sql  string
	}{
		{"flipped byte", `UPDATE blob_chunks SET data = set_byte(data, 0, get_byte(data, 0) # 1) WHERE digest = $1 AND n = 1`},
		{"missing chunk", `DELETE FROM blob_chunks WHERE digest = $1 AND n = 1`},
		{"oversized chunk", `UPDATE blob_chunks SET data = data || data WHERE digest = $1 AND n = 0`},
		{"empty chunk", `UPDATE blob_chunks SET data = ''::bytea WHERE digest = $1 AND n = 1`},
		{"size too small", `UPDATE blobs SET size = size - 1 WHERE digest = $1`},
		{"size too large", `UPDATE blobs SET size = size + 1 WHERE digest = $1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := newStore(t, store.NoRedaction)
			bs := blobsOn(t, st)
			data := make([]byte, MaxChunk+100)
			rand.Read(data)
			d, _, err := bs.Put(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rawConn(t, st).Exec(ctx, tt.sql, d); err != nil {
				t.Fatal(err)
			}
			if _, err := readBlob(bs, d); !errors.Is(err, blob.ErrCorrupt) {
				t.Errorf("read = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestBlobsReadOutlivesItsContext: a reader goes on after the context
// that opened it ends (blob.Backend's contract), and fails once its store
// is closed.
func TestBlobsReadOutlivesItsContext(t *testing.T) {
	st := newStore(t, store.NoRedaction)
	bs := blobsOn(t, st)
	data := make([]byte, 2*MaxChunk+1)
	rand.Read(data)
	d, _, err := bs.Put(context.Background(), bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := bs.Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	got, err := io.ReadAll(r)
	r.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read after the context ended: %d bytes, %v", len(got), err)
	}
	r, err = bs.Open(context.Background(), d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	st.Close()
	if _, err := io.ReadAll(r); !errors.Is(err, store.ErrClosed) {
		t.Errorf("read after Close = %v, want ErrClosed", err)
	}
	if _, err := st.Blobs().Has(context.Background(), d); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Has after Close = %v, want ErrClosed", err)
	}
}
