package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// TestTarStream: a tree's TarStream, read or written out, is WriteTar's
// stream byte for byte; it is made once (taken again, an error); a chunk that fails its check
// ends it, and Err says so even to a consumer that took what it got for
// a whole stream; Close stops a stream being read.
func TestTarStream(t *testing.T) {
	ctx := context.Background()
	s := newTestStore(t)
	big := make([]byte, 3<<20+77)
	fill(big, 9)
	base := write(t, s, "acme", "", true, tarStream(t, dir("src"), reg("src/a", "first"), reg("src/big", string(big)), reg("z", "last")))
	delta := write(t, s, "acme", base.Digest, false, tarStream(t, reg("src/new", "new content")))
	resolve := func(t *testing.T) *Tree {
		t.Helper()
		tree, err := s.Resolve(ctx, "acme", delta.Digest)
		if err != nil {
			t.Fatal(err)
		}
		return tree
	}
	var want bytes.Buffer
	if err := resolve(t).WriteTar(ctx, &want); err != nil {
		t.Fatal(err)
	}
	// How a consumer takes the stream: as execconn does (WriteTo), or
	// by reading it (io.Copy would take WriteTo: hide it).
	takes := []struct {
		name string
		take func(src *TarStream, w io.Writer) error
	}{
		{"written out", func(src *TarStream, w io.Writer) error { _, err := src.WriteTo(w); return err }},
		{"read", func(src *TarStream, w io.Writer) error {
			_, err := io.Copy(w, struct{ io.Reader }{src})
			return err
		}},
	}
	for _, tk := range takes {
		t.Run(tk.name, func(t *testing.T) {
			src := resolve(t).TarStream(ctx)
			defer src.Close()
			var got bytes.Buffer
			if err := tk.take(src, &got); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Bytes(), want.Bytes()) {
				t.Errorf("the stream is %d bytes, WriteTar's %d, or they differ", got.Len(), want.Len())
			}
			if err := src.Err(); err != nil {
				t.Errorf("Err() = %v, want nil", err)
			}
			// Taken again: an error, but reading on where a read ended
			// (at the end: nothing, as any reader).
			for _, again := range takes {
				var more bytes.Buffer
				err := again.take(src, &more)
				if tk.name == "read" && again.name == "read" {
					if err != nil || more.Len() != 0 {
						t.Errorf("read on after the end = %d bytes, %v; want 0, nil", more.Len(), err)
					}
				} else if !errors.Is(err, errStreamUsed) || more.Len() != 0 {
					t.Errorf("taken again (%s) = %d bytes, %v; want errStreamUsed", again.name, more.Len(), err)
				}
			}
		})
	}
	m, err := s.Manifest(ctx, "acme", delta.Digest)
	if err != nil {
		t.Fatal(err)
	}
	victim := m.ChunkIDs()[0].String()
	path := filepath.Join(s.chunks.Path(), victim[:2], victim)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	bad := bytes.Clone(good)
	bad[len(bad)-1] ^= 1
	os.Chmod(path, 0o600)
	if err := os.WriteFile(path, bad, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tk := range takes {
		t.Run(tk.name+", a chunk flipped", func(t *testing.T) {
			src := resolve(t).TarStream(ctx)
			defer src.Close()
			var got bytes.Buffer
			err := tk.take(src, &got)
			if !errors.Is(err, chunk.ErrCorrupt) {
				t.Errorf("take = %v, want chunk.ErrCorrupt", err)
			}
			if err := src.Err(); !errors.Is(err, chunk.ErrCorrupt) {
				t.Errorf("Err() = %v, want chunk.ErrCorrupt", err)
			}
			if got.Len() >= want.Len() {
				t.Errorf("the consumer got %d bytes of %d", got.Len(), want.Len())
			}
		})
	}
	if err := os.WriteFile(path, good, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Run("closed while read", func(t *testing.T) {
		src := resolve(t).TarStream(ctx)
		p := make([]byte, 1024)
		if _, err := io.ReadFull(src, p); err != nil {
			t.Fatal(err)
		}
		src.Close()
		if _, err := io.Copy(io.Discard, struct{ io.Reader }{src}); err == nil {
			t.Error("reading a closed stream: no error")
		}
	})
}
