package blob_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/blob"
)

func newStore(t *testing.T, opts blob.Options) *blob.Store {
	t.Helper()
	s, err := blob.New(filepath.Join(t.TempDir(), "blobs"), opts)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func digestOf(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

func readAll(t *testing.T, s *blob.Store, d string) ([]byte, error) {
	t.Helper()
	r, err := s.Open(context.Background(), d)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(r)
}

// tempFiles lists what is left in the store's temporary directory.
func tempFiles(t *testing.T, s *blob.Store) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(s.Dir(), "tmp"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

func TestPutOpen(t *testing.T) {
	big := make([]byte, 3<<20+17)
	rand.Read(big)
	tests := []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"small", []byte("hello, world\n")},
		{"binary", []byte{0, 1, 2, 0xff, 0}},
		{"3 MiB", big},
	}
	s := newStore(t, blob.Options{})
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, n, err := s.Put(ctx, bytes.NewReader(tt.data))
			if err != nil || d != digestOf(tt.data) || n != int64(len(tt.data)) {
				t.Fatalf("Put() = %s, %d, %v, want %s, %d", d, n, err, digestOf(tt.data), len(tt.data))
			}
			if ok, err := s.Has(ctx, d); !ok || err != nil {
				t.Fatalf("Has(%s) = %v, %v", d, ok, err)
			}
			r, err := s.Open(ctx, d)
			if err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(r)
			r.Close()
			if err != nil || !bytes.Equal(got, tt.data) || r.Size() != int64(len(tt.data)) {
				t.Fatalf("Open(%s): %d bytes, size %d, %v; want the %d bytes put", d, len(got), r.Size(), err, len(tt.data))
			}
			// The layout is part of the contract: DIR/sha256/XX/HEX.
			h := d[len("sha256:"):]
			info, err := os.Stat(filepath.Join(s.Dir(), "sha256", h[:2], h))
			if err != nil || info.Mode().Perm() != 0o400 {
				t.Fatalf("blob file: %v, %v; want mode 0400", info, err)
			}
		})
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestPutDedup(t *testing.T) {
	s := newStore(t, blob.Options{})
	ctx := context.Background()
	d1, _, err := s.Put(ctx, strings.NewReader("same"))
	if err != nil {
		t.Fatal(err)
	}
	d2, n, err := s.Put(ctx, strings.NewReader("same"))
	if err != nil || d2 != d1 || n != 4 {
		t.Fatalf("second Put() = %s, %d, %v, want %s, 4", d2, n, err, d1)
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// TestConcurrentPut has goroutines put the same content and different
// content at once: all succeed and every blob reads back whole.
func TestConcurrentPut(t *testing.T) {
	s := newStore(t, blob.Options{})
	same := bytes.Repeat([]byte("snapshot "), 100000)
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			data := same
			if i%2 == 1 {
				data = append([]byte{byte(i)}, same...)
			}
			d, _, err := s.Put(context.Background(), bytes.NewReader(data))
			if err == nil && d != digestOf(data) {
				err = errors.New("wrong digest " + d)
			}
			if err == nil {
				var got []byte
				got, err = readAll(t, s, d)
				if err == nil && !bytes.Equal(got, data) {
					err = errors.New("content differs")
				}
			}
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

func TestPutLimits(t *testing.T) {
	s := newStore(t, blob.Options{MaxSize: 10})
	ctx := context.Background()
	if _, n, err := s.Put(ctx, strings.NewReader("0123456789")); err != nil || n != 10 {
		t.Fatalf("Put(10 bytes, limit 10) = %d, %v", n, err)
	}
	_, _, err := s.Put(ctx, strings.NewReader("0123456789a"))
	if !errors.Is(err, blob.ErrTooLarge) {
		t.Fatalf("Put(11 bytes, limit 10) = %v, want ErrTooLarge", err)
	}
	if ok, _ := s.Has(ctx, digestOf([]byte("0123456789a"))); ok {
		t.Fatal("an oversized blob was stored")
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
}

// failingReader yields some bytes, then an error.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, errors.New("disk on fire")
	}
	n := min(len(p), r.n)
	r.n -= n
	return n, nil
}

// cancellingReader cancels its context after the first read.
type cancellingReader struct{ cancel func() }

func (r *cancellingReader) Read(p []byte) (int, error) {
	r.cancel()
	return copy(p, "partial"), nil
}

func TestPutFailure(t *testing.T) {
	s := newStore(t, blob.Options{})
	if _, _, err := s.Put(context.Background(), &failingReader{n: 100000}); err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("Put(failing reader) = %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if _, _, err := s.Put(ctx, &cancellingReader{cancel: cancel}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Put(cancelled) = %v, want context.Canceled", err)
	}
	if left := tempFiles(t, s); len(left) != 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	entries, _ := os.ReadDir(filepath.Join(s.Dir(), "sha256"))
	if len(entries) != 0 {
		t.Fatalf("a failed Put stored something: %v", entries)
	}
}

// TestCorrupt changes a stored blob behind the store's back: reading it
// fails with ErrCorrupt at the end, never with a clean EOF.
func TestCorrupt(t *testing.T) {
	data := bytes.Repeat([]byte("abc"), 5000)
	tests := []struct {
		name   string
		damage func(path string) error
	}{
		{"flipped byte", func(p string) error {
			b, _ := os.ReadFile(p)
			b[100] ^= 1
			return os.WriteFile(p, b, 0o600)
		}},
		{"truncated", func(p string) error { return os.Truncate(p, 10) }},
		{"extended", func(p string) error {
			f, err := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = f.Write([]byte("x"))
			return err
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newStore(t, blob.Options{})
			d, _, err := s.Put(context.Background(), bytes.NewReader(data))
			if err != nil {
				t.Fatal(err)
			}
			h := d[len("sha256:"):]
			p := filepath.Join(s.Dir(), "sha256", h[:2], h)
			if err := os.Chmod(p, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := tt.damage(p); err != nil {
				t.Fatal(err)
			}
			if _, err := readAll(t, s, d); !errors.Is(err, blob.ErrCorrupt) {
				t.Fatalf("reading a damaged blob = %v, want ErrCorrupt", err)
			}
		})
	}
}

func TestMissingAndDelete(t *testing.T) {
	s := newStore(t, blob.Options{})
	ctx := context.Background()
	missing := digestOf([]byte("never stored"))
	if _, err := s.Open(ctx, missing); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Open(missing) = %v, want ErrNotFound", err)
	}
	if ok, err := s.Has(ctx, missing); ok || err != nil {
		t.Fatalf("Has(missing) = %v, %v", ok, err)
	}
	if err := s.Delete(ctx, missing); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("Delete(missing) = %v, want ErrNotFound", err)
	}
	d, _, err := s.Put(ctx, strings.NewReader("to delete"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Open(ctx, d)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := s.Delete(ctx, d); err != nil {
		t.Fatalf("Delete() = %v", err)
	}
	if ok, _ := s.Has(ctx, d); ok {
		t.Fatal("Has() after Delete = true")
	}
	// A reader opened before the delete still reads the whole blob.
	if got, err := io.ReadAll(r); err != nil || string(got) != "to delete" {
		t.Fatalf("read after Delete = %q, %v", got, err)
	}
	// And the content can be stored again.
	if d2, _, err := s.Put(ctx, strings.NewReader("to delete")); err != nil || d2 != d {
		t.Fatalf("Put after Delete = %s, %v", d2, err)
	}
}

func TestBadDigest(t *testing.T) {
	s := newStore(t, blob.Options{})
	ctx := context.Background()
	good := digestOf([]byte("x"))
	for _, d := range []string{
		"", "sha256:", good[:len(good)-1], good + "0", strings.ToUpper(good),
		"sha512:" + good[7:], "sha256:../../../../../../etc/passwd" + strings.Repeat("0", 30),
		"sha256:" + strings.Repeat("g", 64), "sha256:" + strings.Repeat("0", 62) + "/x",
	} {
		if _, err := s.Open(ctx, d); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Open(%q) = %v, want ErrDigest", d, err)
		}
		if _, err := s.Has(ctx, d); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Has(%q) = %v, want ErrDigest", d, err)
		}
		if err := s.Delete(ctx, d); !errors.Is(err, blob.ErrDigest) {
			t.Errorf("Delete(%q) = %v, want ErrDigest", d, err)
		}
	}
}

// TestStaleTemps: New removes the temporary files of a crashed Put, but
// not those young enough to belong to a Put still running elsewhere.
func TestStaleTemps(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "blobs")
	if _, err := blob.New(dir, blob.Options{}); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "tmp", "put-old")
	young := filepath.Join(dir, "tmp", "put-young")
	for _, p := range []string{old, young} {
		if err := os.WriteFile(p, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	past := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(old, past, past); err != nil {
		t.Fatal(err)
	}
	if _, err := blob.New(dir, blob.Options{}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(old); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("stale temporary file still there: %v", err)
	}
	if _, err := os.Stat(young); err != nil {
		t.Errorf("young temporary file removed: %v", err)
	}
}

// FuzzValidDigest: whatever ValidDigest accepts names a file inside the
// fan-out directories, so a digest can never escape the store.
func FuzzValidDigest(f *testing.F) {
	f.Add(digestOf(nil))
	f.Add("sha256:../" + strings.Repeat("0", 61))
	f.Add("SHA256:" + strings.Repeat("A", 64))
	f.Fuzz(func(t *testing.T, d string) {
		if blob.ValidDigest(d) != nil {
			return
		}
		h := d[len("sha256:"):]
		if len(h) != 64 || strings.ContainsAny(h, "/\\.") || filepath.Base(h) != h {
			t.Fatalf("ValidDigest accepted %q", d)
		}
		if _, err := hex.DecodeString(h); err != nil || strings.ToLower(h) != h {
			t.Fatalf("ValidDigest accepted non-hex %q", d)
		}
	})
}
