package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"iter"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/blob"
)

// memBackend is a blob.Backend in memory that counts its writes; lie, when
// set, changes what Read returns.
type memBackend struct {
	mu     sync.Mutex
	blobs  map[string][]byte
	used   map[string]time.Time // last use: Write, Has
	writes int
	has    int // calls of Has
	fail   error
	lie    func(b []byte) ([]byte, int64)
	// beforeWrite, when set, runs at the start of each Write.
	beforeWrite func()
}

func newMem() *memBackend {
	return &memBackend{blobs: map[string][]byte{}, used: map[string]time.Time{}}
}

func (m *memBackend) Write(_ context.Context, digest string, size int64, r io.Reader) error {
	if m.beforeWrite != nil {
		m.beforeWrite()
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	if int64(len(b)) != size {
		return fmt.Errorf("got %d bytes, announced %d", len(b), size)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail != nil {
		return m.fail
	}
	m.writes++
	m.blobs[digest] = b
	m.used[digest] = time.Now()
	return nil
}

func (m *memBackend) Read(_ context.Context, digest string) (io.ReadCloser, int64, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	b, ok := m.blobs[digest]
	if !ok {
		return nil, 0, fmt.Errorf("mem: %w", blob.ErrNotFound)
	}
	size := int64(len(b))
	if m.lie != nil {
		b, size = m.lie(b)
	}
	return io.NopCloser(bytes.NewReader(b)), size, nil
}

func (m *memBackend) Has(_ context.Context, digest string) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.has++
	_, ok := m.blobs[digest]
	if ok {
		m.used[digest] = time.Now()
	}
	return ok, nil
}

func (m *memBackend) Expire(_ context.Context, digest string, before time.Time) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.blobs[digest]; !ok || !m.used[digest].Before(before) {
		return false, nil
	}
	delete(m.blobs, digest)
	return true, nil
}

func (m *memBackend) Digests(context.Context) iter.Seq2[string, error] {
	m.mu.Lock()
	ds := slices.Sorted(maps.Keys(m.blobs))
	m.mu.Unlock()
	return func(yield func(string, error) bool) {
		for _, d := range ds {
			if !yield(d, nil) {
				return
			}
		}
	}
}

func (m *memBackend) Delete(_ context.Context, digest string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.blobs[digest]; !ok {
		return blob.ErrNotFound
	}
	delete(m.blobs, digest)
	return nil
}

// TestBackend: with a Backend, blobs go to it (once per content), none to
// the directory, and come back checked; blobs the directory held before
// stay readable.
func TestBackend(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "blobs")
	legacy, err := blob.New(dir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := []byte("stored before the backend")
	oldDigest, _, err := legacy.Put(ctx, bytes.NewReader(old))
	if err != nil {
		t.Fatal(err)
	}
	mem := newMem()
	s, err := blob.New(dir, blob.Options{Backend: mem, MaxSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3<<20+17)
	rand.Read(big)
	for _, data := range [][]byte{nil, []byte("hello"), big} {
		d, n, err := s.Put(ctx, bytes.NewReader(data))
		if err != nil || d != digestOf(data) || n != int64(len(data)) {
			t.Fatalf("Put(%d bytes) = %s, %d, %v", len(data), d, n, err)
		}
		if got, err := readAll(t, s, d); err != nil || !bytes.Equal(got, data) {
			t.Fatalf("read back %d bytes: %d bytes, %v", len(data), len(got), err)
		}
		if ok, err := s.Has(ctx, d); !ok || err != nil {
			t.Errorf("Has(%s) = %v, %v", d, ok, err)
		}
	}
	writes := mem.writes
	if _, _, err := s.Put(ctx, bytes.NewReader([]byte("hello"))); err != nil || mem.writes != writes {
		t.Errorf("Put of stored content: %v, %d writes (was %d)", err, mem.writes, writes)
	}
	if _, err := os.Stat(filepath.Join(dir, "sha256", digestOf(big)[7:9], digestOf(big)[7:])); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a blob went to the directory too: %v", err)
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	// The directory's blob, from before the backend.
	if got, err := readAll(t, s, oldDigest); err != nil || !bytes.Equal(got, old) {
		t.Errorf("read of a blob kept before the backend: %q, %v", got, err)
	}
	if ok, err := s.Has(ctx, oldDigest); !ok || err != nil {
		t.Errorf("Has(old) = %v, %v", ok, err)
	}
	for _, d := range []string{oldDigest, digestOf(big)} {
		if err := s.Delete(ctx, d); err != nil {
			t.Errorf("Delete(%s) = %v", d, err)
		}
		if err := s.Delete(ctx, d); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("second Delete(%s) = %v, want ErrNotFound", d, err)
		}
		if _, err := s.Open(ctx, d); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("Open(deleted) = %v, want ErrNotFound", err)
		}
	}
}

// TestConcurrentPutOnce: Puts of the same small content at once write it
// once; the others wait for that write and share its outcome. The first
// write waits until every Put has looked for the blob (and found none),
// so without the coalescing each of them would write it.
func TestConcurrentPutOnce(t *testing.T) {
	const n = 20
	mem := newMem()
	all := make(chan struct{})
	mem.beforeWrite = func() {
		for {
			mem.mu.Lock()
			has := mem.has
			mem.mu.Unlock()
			if has >= n {
				break
			}
			select {
			case <-all:
				return
			default:
				runtime.Gosched()
			}
		}
	}
	s, err := blob.New(filepath.Join(t.TempDir(), "blobs"), blob.Options{Backend: mem})
	if err != nil {
		t.Fatal(err)
	}
	script := []byte("turns:\n  - text: the same script for every run\n")
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			d, _, err := s.Put(context.Background(), bytes.NewReader(script))
			if err == nil && d != digestOf(script) {
				err = fmt.Errorf("digest %s", d)
			}
			errs <- err
		})
	}
	wg.Wait()
	close(all)
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if mem.writes != 1 {
		t.Errorf("%d Puts of one content at once wrote it %d times, want once", n, mem.writes)
	}
	if got, err := readAll(t, s, digestOf(script)); err != nil || !bytes.Equal(got, script) {
		t.Errorf("read back: %q, %v", got, err)
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestConcurrentPutFailure: when the write others wait for fails, each of
// them gets an error of its own, and a later Put stores the blob.
func TestConcurrentPutFailure(t *testing.T) {
	mem := newMem()
	mem.fail = errors.New("backend down")
	s, err := blob.New(filepath.Join(t.TempDir(), "blobs"), blob.Options{Backend: mem})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("small")
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, _, err := s.Put(context.Background(), bytes.NewReader(data)); err == nil {
				t.Error("Put succeeded with the backend down")
			}
		})
	}
	wg.Wait()
	mem.mu.Lock()
	mem.fail = nil
	mem.mu.Unlock()
	if d, _, err := s.Put(context.Background(), bytes.NewReader(data)); err != nil || d != digestOf(data) {
		t.Fatalf("Put after the failure: %s, %v", d, err)
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestBackendLies: what a backend returns is checked: other bytes, more
// bytes than it said, or a size past MaxSize are ErrCorrupt.
func TestBackendLies(t *testing.T) {
	ctx := context.Background()
	data := []byte("the true content of the blob")
	tests := []struct {
		name string
		lie  func(b []byte) ([]byte, int64)
		// atOpen: Open itself fails.
		atOpen bool
	}{
		{"other bytes", func(b []byte) ([]byte, int64) {
			c := bytes.Clone(b)
			c[0] ^= 1
			return c, int64(len(c))
		}, false},
		{"truncated", func(b []byte) ([]byte, int64) { return b[:len(b)-1], int64(len(b)) }, false},
		{"more than its size", func(b []byte) ([]byte, int64) { return append(bytes.Clone(b), 'x'), int64(len(b)) }, false},
		{"size past the most", func(b []byte) ([]byte, int64) { return b, 1 << 40 }, true},
		{"negative size", func(b []byte) ([]byte, int64) { return b, -1 }, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			mem := newMem()
			s := newStore(t, blob.Options{Backend: mem})
			d, _, err := s.Put(ctx, bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			mem.lie = tt.lie
			r, err := s.Open(ctx, d)
			if tt.atOpen {
				if !errors.Is(err, blob.ErrCorrupt) {
					t.Fatalf("Open = %v, want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer r.Close()
			if _, err := io.ReadAll(r); !errors.Is(err, blob.ErrCorrupt) {
				t.Errorf("read = %v, want ErrCorrupt", err)
			}
		})
	}
}

// TestBackendFailure: a backend that cannot write fails the Put, which
// leaves nothing behind.
func TestBackendFailure(t *testing.T) {
	ctx := context.Background()
	mem := newMem()
	mem.fail = errors.New("disk on fire")
	s := newStore(t, blob.Options{Backend: mem, MaxSize: 10})
	if _, _, err := s.Put(ctx, bytes.NewReader([]byte("data"))); err == nil {
		t.Error("Put with a failing backend succeeded")
	}
	if _, _, err := s.Put(ctx, bytes.NewReader(make([]byte, 11))); !errors.Is(err, blob.ErrTooLarge) {
		t.Errorf("Put past MaxSize = %v, want ErrTooLarge", err)
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Errorf("temporary files left: %v", left)
	}
	if len(mem.blobs) != 0 {
		t.Errorf("the backend holds %d blobs", len(mem.blobs))
	}
}
