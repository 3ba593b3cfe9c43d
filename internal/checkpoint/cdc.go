package checkpoint

import (
	"encoding/binary"
	"errors"
	"io"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// The chunker's parameters (FastCDC with normalized chunking: Xia et al.,
// "FastCDC", USENIX ATC 2016): no cut before minChunk bytes (they are not
// even hashed); from there to normalChunk a cut where the top cdcBitsS bits
// of the gear hash are zero (a chance of 2^-20 a byte), past it where the
// top cdcBitsL bits are (2^-18); at chunk.MaxSize (8 MiB) a cut anyway.
// Chunks are about 1 MiB on average, and closer to it than with one mask.
// The top bits of the hash depend on the last 64 bytes; the low ones on
// fewer.
const (
	minChunk    = 512 << 10
	normalChunk = 1 << 20
	cdcBitsS    = 20
	cdcBitsL    = 18
	maskS       = uint64(1<<cdcBitsS-1) << (64 - cdcBitsS)
	maskL       = uint64(1<<cdcBitsL-1) << (64 - cdcBitsL)
)

// cdcRead is how much the chunker reads at a time: the most a chunk's
// reading goes past its cut, which the next chunk then copies.
const cdcRead = 128 << 10

// gearTable is the gear hash's table of one tenant: 256 random 64-bit
// values derived from the tenant's key (so a tenant's trees are cut the
// same way on every host and run, and where another tenant's are cut says
// nothing about them).
type gearTable [256]uint64

// newGearTable derives the gear table of key.
func newGearTable(key chunk.Key) *gearTable {
	ks := &keyStream{seed: key.Derive("chunker gear table")}
	var b [8 * 256]byte
	io.ReadFull(ks, b[:]) // a keyStream never fails
	var g gearTable
	for i := range g {
		g[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return &g
}

// cdc cuts a stream into content-defined chunks with a gear table. The
// cuts depend on the content and the table only, never on how the reader
// splits its reads.
type cdc struct {
	r    io.Reader
	gear *gearTable
	// carry holds bytes read past the last cut: the next chunk's start.
	carry []byte
	err   error
}

func newCDC(r io.Reader, gear *gearTable) *cdc {
	return &cdc{r: r, gear: gear} // carry: made by the first cut, if any
}

// Next reads the next chunk into buf (its room reused, grown to
// chunk.MaxSize at most) and returns it, or io.EOF after the last.
func (c *cdc) Next(buf []byte) ([]byte, error) {
	buf = append(buf[:0], c.carry...)
	c.carry = c.carry[:0]
	var h uint64
	scanned := 0
	for {
		if cut := c.scan(buf, &h, &scanned); cut > 0 {
			c.carry = append(c.carry, buf[cut:]...)
			return buf[:cut], nil
		}
		if c.err != nil {
			if len(buf) > 0 {
				return buf, nil
			}
			if errors.Is(c.err, io.EOF) {
				return nil, io.EOF
			}
			return nil, c.err
		}
		n := min(cdcRead, chunk.MaxSize-len(buf))
		if cap(buf)-len(buf) < n {
			nb := make([]byte, len(buf), min(chunk.MaxSize, max(2*cap(buf), len(buf)+n)))
			copy(nb, buf)
			buf = nb
		}
		// Reads until n bytes are in (or an error): how the reader
		// splits them does not matter, fewer scans do.
		for want := len(buf) + n; len(buf) < want && c.err == nil; {
			m, err := c.r.Read(buf[len(buf):want])
			buf = buf[:len(buf)+m]
			c.err = err
		}
	}
}

// scan goes on hashing buf from *scanned with the hash *h and returns
// where the chunk ends, or 0 when buf holds no end yet (then *scanned and
// *h say where it stopped).
func (c *cdc) scan(buf []byte, h *uint64, scanned *int) int {
	i := max(*scanned, minChunk)
	if i >= len(buf) {
		return 0
	}
	g := c.gear
	hv := *h
	if i < normalChunk {
		for j, b := range buf[i:min(len(buf), normalChunk)] {
			hv = hv<<1 + g[b]
			if hv&maskS == 0 {
				return i + j + 1
			}
		}
		i = min(len(buf), normalChunk)
	}
	if i < chunk.MaxSize {
		for j, b := range buf[i:min(len(buf), chunk.MaxSize)] {
			hv = hv<<1 + g[b]
			if hv&maskL == 0 {
				return i + j + 1
			}
		}
		i = min(len(buf), chunk.MaxSize)
	}
	if i == chunk.MaxSize {
		return i
	}
	*h, *scanned = hv, i
	return 0
}

// gearTable returns the gear table of key, derived once per Store.
func (s *Store) gearTable(key chunk.Key) *gearTable {
	if g, ok := s.gears.Load(key); ok {
		return g.(*gearTable)
	}
	g := newGearTable(key)
	s.gears.Store(key, g)
	return g
}
