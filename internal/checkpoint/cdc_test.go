package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
	"testing/iotest"

	"github.com/restic/chunker"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// cuts returns the chunks c cuts r into, each copied.
func cuts(t testing.TB, r io.Reader, key chunk.Key) [][]byte {
	t.Helper()
	c := newCDC(r, newGearTable(key))
	var out [][]byte
	var buf []byte
	for {
		data, err := c.Next(buf)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("Next() = %v", err)
		}
		out = append(out, bytes.Clone(data))
		buf = data[:0]
	}
}

// TestCDC: the chunker's cuts are within its bounds, put together give
// the stream back, depend on the content only (not on how reads are
// split), follow the content (an insertion near the start leaves the
// later chunks as they were), and differ between tenants' gear tables.
func TestCDC(t *testing.T) {
	data := make([]byte, 40<<20)
	fill(data, 1)
	// A run of zeros longer than chunk.MaxSize: no cut in it but the
	// largest.
	clear(data[10<<20 : 10<<20+chunk.MaxSize+(1<<20)])
	key := chunk.TenantKey("acme")
	whole := cuts(t, bytes.NewReader(data), key)

	if got := bytes.Join(whole, nil); !bytes.Equal(got, data) {
		t.Fatalf("the chunks put together are %d bytes, not the stream's %d", len(got), len(data))
	}
	var sizes []int
	for i, c := range whole {
		if len(c) > chunk.MaxSize || (len(c) < minChunk && i != len(whole)-1) {
			t.Errorf("chunk %d holds %d bytes, want %d to %d", i, len(c), minChunk, chunk.MaxSize)
		}
		sizes = append(sizes, len(c))
	}
	if !slices.Contains(sizes, chunk.MaxSize) {
		t.Errorf("no chunk of %d bytes in a run of zeros longer than that: sizes %v", chunk.MaxSize, sizes)
	}
	if n := len(whole); n < 20 || n > 60 {
		t.Errorf("40 MiB cut into %d chunks, want about 1 MiB each", n)
	}

	for name, r := range map[string]io.Reader{
		"one byte a read": iotest.OneByteReader(bytes.NewReader(data[:6<<20])),
		"half reads":      iotest.HalfReader(bytes.NewReader(data[:6<<20])),
	} {
		small := cuts(t, bytes.NewReader(data[:6<<20]), key)
		if got := cuts(t, r, key); !slices.EqualFunc(got, small, bytes.Equal) {
			t.Errorf("%s: cut into %d chunks, the same stream read at once into %d, or elsewhere", name, len(got), len(small))
		}
	}

	edited := append([]byte("a few bytes inserted near the start"), data...)
	after := cuts(t, bytes.NewReader(edited), key)
	same := 0
	for _, c := range after {
		if slices.ContainsFunc(whole, func(w []byte) bool { return bytes.Equal(w, c) }) {
			same++
		}
	}
	if same < len(whole)-2 {
		t.Errorf("after an insertion at the start, %d of %d chunks are as before, want all but a chunk or two", same, len(whole))
	}

	other := cuts(t, bytes.NewReader(data), chunk.TenantKey("globex"))
	if slices.EqualFunc(other, whole, func(a, b []byte) bool { return len(a) == len(b) }) {
		t.Error("two tenants' gear tables cut the same stream at the same places")
	}
}

// TestCDCError: a read error is Next's error, not the end of the stream.
func TestCDCError(t *testing.T) {
	boom := errors.New("boom")
	c := newCDC(io.MultiReader(bytes.NewReader(make([]byte, 3<<20)), iotest.ErrReader(boom)), newGearTable(chunk.TenantKey("acme")))
	var err error
	for err == nil {
		_, err = c.Next(nil)
	}
	if !errors.Is(err, boom) {
		t.Errorf("Next() after a failing read = %v, want it", err)
	}
}

// rabin is the chunker checkpoints were cut with before FastCDC
// (restic's Rabin fingerprints, 512 KiB to 8 MiB): a cutter for the test
// that such checkpoints still restore.
type rabin struct{ c *chunker.Chunker }

func (r rabin) Next(buf []byte) ([]byte, error) {
	ch, err := r.c.Next(buf)
	return ch.Data, err
}

// TestOtherChunker: a restore reads the slices a manifest records, so
// checkpoints cut by another chunker (the Rabin chunker of the releases
// before FastCDC) restore, diff and take deltas as ever; the chunks of a
// tree the new chunker cuts elsewhere are stored again once.
func TestOtherChunker(t *testing.T) {
	s := newTestStore(t)
	s.newCutter = func(r io.Reader, key chunk.Key) cutter {
		pol, err := chunker.DerivePolynomial(&keyStream{seed: key.Derive("chunker polynomial")})
		if err != nil {
			t.Fatal(err)
		}
		c := chunker.NewWithBoundaries(r, pol, 512<<10, chunk.MaxSize)
		c.SetAverageBits(19)
		return rabin{c}
	}
	ents := treeFiles(12<<20, 3)
	stream := tarStream(t, ents...)
	old := write(t, s, "acme", "", true, stream)
	oldTree := restoreTar(t, s, "acme", old.Digest)

	s.newCutter = nil
	if got := restoreTar(t, s, "acme", old.Digest); !slices.Equal(got, oldTree) {
		t.Fatal("a checkpoint cut by the old chunker restores differently")
	}
	again := write(t, s, "acme", "", true, stream)
	if again.Stats.NewChunks == 0 {
		t.Error("the new chunker cut the tree where the old one did: this test does not tell them apart")
	}
	if got := restoreTar(t, s, "acme", again.Digest); !slices.Equal(got, oldTree) {
		t.Error("the same tree cut by FastCDC restores differently")
	}
	if ch, err := s.Changed(t.Context(), "acme", old.Digest, again.Digest); err != nil || len(ch) != 0 {
		t.Errorf("Changed(old chunker's, new chunker's checkpoint of one tree) = %v, %v; want nothing", ch, err)
	}
	// A delta on the old checkpoint, as a run's next step after an
	// upgrade.
	edit := reg(ents[5].name, "edited")
	delta := write(t, s, "acme", old.Digest, false, tarStream(t, edit))
	want := slices.Clone(ents)
	want[5] = edit
	whole := write(t, s, "acme", "", true, tarStream(t, want...))
	if got := restoreTar(t, s, "acme", delta.Digest); !slices.Equal(got, restoreTar(t, s, "acme", whole.Digest)) {
		t.Error("a delta on the old chunker's checkpoint restores another tree than the full checkpoint of the same tree")
	}
}

// BenchmarkChunker: cutting 64 MiB of random bytes, FastCDC against the
// Rabin chunker it replaced (both into reused buffers, as Write does).
func BenchmarkChunker(b *testing.B) {
	data := make([]byte, 64<<20)
	fill(data, 1)
	key := chunk.TenantKey("bench")
	pol, err := chunker.DerivePolynomial(&keyStream{seed: key.Derive("chunker polynomial")})
	if err != nil {
		b.Fatal(err)
	}
	for name, newCutter := range map[string]func(io.Reader) cutter{
		"fastcdc": func(r io.Reader) cutter { return newCDC(r, newGearTable(key)) },
		"rabin": func(r io.Reader) cutter {
			c := chunker.NewWithBoundaries(r, pol, 512<<10, chunk.MaxSize)
			c.SetAverageBits(19)
			return rabin{c}
		},
	} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			buf := make([]byte, 0, chunk.MaxSize)
			for b.Loop() {
				c := newCutter(bytes.NewReader(data))
				for {
					d, err := c.Next(buf)
					if err != nil {
						break
					}
					buf = d[:0]
				}
			}
		})
	}
}
