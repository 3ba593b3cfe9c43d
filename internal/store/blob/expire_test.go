package blob_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/blob"
)

// TestExpire: Expire removes only a blob last used before the cut; a Has
// or a Put of the same bytes after the cut keeps it; Digests lists what
// is stored, in order; in the directory and through a Backend (with a
// blob the directory held before the backend, which both list and expire).
func TestExpire(t *testing.T) {
	for _, tc := range []struct {
		name    string
		backend bool
	}{{"dir", false}, {"backend", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			dir := filepath.Join(t.TempDir(), "blobs")
			var legacy string
			opts := blob.Options{}
			if tc.backend {
				pre, err := blob.New(dir, blob.Options{})
				if err != nil {
					t.Fatal(err)
				}
				if legacy, _, err = pre.Put(ctx, strings.NewReader("kept in the directory before the backend")); err != nil {
					t.Fatal(err)
				}
				opts.Backend = newMem()
			}
			s, err := blob.New(dir, opts)
			if err != nil {
				t.Fatal(err)
			}
			put := func(b string) string {
				t.Helper()
				d, _, err := s.Put(ctx, strings.NewReader(b))
				if err != nil {
					t.Fatal(err)
				}
				return d
			}
			old, touched, reput := put("old"), put("found by a writer"), put("put again")
			big := put(strings.Repeat("large blob ", 20000)) // past the in-memory path
			cut := time.Now()
			if ok, err := s.Has(ctx, touched); err != nil || !ok {
				t.Fatalf("Has = %v, %v", ok, err)
			}
			if d := put("put again"); d != reput {
				t.Fatal("same bytes, another digest")
			}
			young := put("written after the cut")

			var listed []string
			for d, err := range s.Digests(ctx) {
				if err != nil {
					t.Fatal(err)
				}
				listed = append(listed, d)
			}
			want := []string{old, touched, reput, big, young}
			if legacy != "" {
				want = append(want, legacy)
			}
			for _, d := range want {
				if !slices.Contains(listed, d) {
					t.Errorf("Digests did not list %s: %v", d, listed)
				}
			}
			if len(listed) != len(want) {
				t.Errorf("Digests listed %d blobs, want %d", len(listed), len(want))
			}

			for _, tt := range []struct {
				digest     string
				gone, kept bool
			}{
				{old, true, false},
				{big, true, false},
				{legacy, true, false},
				{touched, false, true},
				{reput, false, true},
				{young, false, true},
				{"sha256:" + strings.Repeat("0", 64), false, false}, // not stored
			} {
				if tt.digest == "" {
					continue
				}
				gone, err := s.Expire(ctx, tt.digest, cut)
				if err != nil || gone != tt.gone {
					t.Errorf("Expire(%s) = %v, %v; want %v", tt.digest, gone, err, tt.gone)
				}
				if ok, _ := s.Has(ctx, tt.digest); ok != tt.kept {
					t.Errorf("after Expire(%s), Has = %v", tt.digest, ok)
				}
			}
			if _, err := s.Expire(ctx, "sha256:../x", cut); err == nil {
				t.Error("Expire accepted a malformed digest")
			}
			// An expired blob stored again reads back.
			if d := put("old"); d != old {
				t.Fatal("same bytes, another digest")
			}
			if got, err := readAll(t, s, old); err != nil || string(got) != "old" {
				t.Errorf("the blob put again after Expire reads %q, %v", got, err)
			}
			if tmp := tempFiles(t, s); len(tmp) != 0 {
				t.Errorf("Expire left %v in tmp", tmp)
			}
		})
	}
}

// TestExpireKilled: a process killed between moving a blob aside and
// deciding leaves it in tmp; the next New puts it back, readable, and a
// later Expire decides again.
func TestExpireKilled(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "blobs")
	s, err := blob.New(dir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	data := []byte("moved aside when the collector died")
	d, _, err := s.Put(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	h := d[len("sha256:"):]
	final := filepath.Join(dir, "sha256", h[:2], h)
	if err := os.Rename(final, filepath.Join(dir, "tmp", "expire-"+h)); err != nil {
		t.Fatal(err)
	}
	if ok, _ := s.Has(ctx, d); ok {
		t.Fatal("a blob moved aside is found")
	}
	s, err = blob.New(dir, blob.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := readAll(t, s, d); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("after New, the blob reads %q, %v", got, err)
	}
	if gone, err := s.Expire(ctx, d, time.Now()); err != nil || !gone {
		t.Errorf("a later Expire = %v, %v; want it gone", gone, err)
	}
}
