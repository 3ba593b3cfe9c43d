package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/chunk"
)

// A manifest is stored as a blob: the zstd compression of
//
//	magic "\x89ALCKPT\n", version (uvarint, 1)
//	key fingerprint (string), parent digest (string, "" for a full one),
//	flags (uvarint: 1 = full), depth, base entries, chain entries,
//	stats: tree entries, tree bytes, delta entries, delta bytes,
//	       new chunks, new bytes, shared chunks, shared bytes,
//	chunk table: count, then 32 bytes per chunk ID,
//	entries: count, then per entry
//	  kind (byte), name (string), mode, uid, gid (uvarints), mtime (varint),
//	  for a symlink or hardlink: link (string),
//	  for a file or hardlink: size, slice count, per slice
//	    chunk table index, offset, length (uvarints).
//
// Strings are a uvarint length and the bytes. Every integer is in its
// shortest form and the decoder refuses any other, so a manifest has one
// encoding: decoding and encoding again gives the same bytes.
const (
	manifestMagic   = "\x89ALCKPT\n"
	manifestVersion = 1
	flagFull        = 1
	// MaxManifest is the most bytes a manifest decompresses to.
	MaxManifest = 1 << 30
)

// Manifest is a checkpoint: a whole tree (Full) or the changes to its
// parent's, and what writing it cost.
type Manifest struct {
	// Key is the fingerprint of the tenant key its chunks are named
	// under (chunk.Key's Fingerprint).
	Key string
	// Parent is the digest of the checkpoint this one changes; "" for a
	// full one.
	Parent string
	// Full says Entries are a whole tree (no whiteouts, no opaque
	// directories), in the normal form Tree gives.
	Full bool
	// Depth counts the deltas from the last full checkpoint to this one
	// (0 for a full one); BaseEntries is that full checkpoint's entries,
	// ChainEntries the deltas' entries, this one's included. The writer
	// compacts by them (CompactDepth, CompactShare) without reading the
	// chain.
	Depth        int
	BaseEntries  int64
	ChainEntries int64
	// Stats is what the checkpoint held and cost when it was written.
	Stats Stats
	// Entries are in walk order (a directory before what is below it,
	// names compared by component), one per name.
	Entries []Entry
}

// Stats is what a checkpoint holds and what writing it stored.
type Stats struct {
	// TreeEntries and TreeBytes are the whole tree's entries and file
	// content bytes (a hard-linked file's once) once this checkpoint is
	// applied.
	TreeEntries int64
	TreeBytes   int64
	// DeltaEntries and DeltaBytes are what the stream it was written
	// from held: entries, and bytes of file content.
	DeltaEntries int64
	DeltaBytes   int64
	// NewChunks and NewBytes are the chunks the write stored, and their
	// bytes as stored (compressed).
	NewChunks int64
	NewBytes  int64
	// SharedChunks and SharedBytes are the chunks of the stream the store
	// held already (from an earlier checkpoint of the tenant, or earlier
	// in the same stream), and their bytes of content: what deduplication
	// saved.
	SharedChunks int64
	SharedBytes  int64
}

// encode returns m's encoding (uncompressed). m must be valid.
func (m *Manifest) encode() []byte {
	list := make([]*Entry, len(m.Entries))
	for i := range m.Entries {
		list[i] = &m.Entries[i]
	}
	return m.encodeEntries(list)
}

// encodeEntries returns the encoding of m with entries in place of
// m.Entries: a compaction encodes the tree's entries as they are, without
// copying them into a manifest first.
func (m *Manifest) encodeEntries(entries []*Entry) []byte {
	index := make(map[chunk.ID]uint64, len(entries))
	var table []chunk.ID
	for _, e := range entries {
		for _, s := range e.Slices {
			if _, ok := index[s.Chunk]; !ok {
				index[s.Chunk] = uint64(len(table))
				table = append(table, s.Chunk)
			}
		}
	}
	// Room for all of it (an entry's fixed fields take at most 43 bytes,
	// a slice 15): a compaction's buffer grown by appends cost it as
	// much memory again as the manifest, in copies.
	size := 256 + len(table)*32
	for _, e := range entries {
		size += 48 + len(e.Name) + len(e.Link) + 15*len(e.Slices)
	}
	b := make([]byte, 0, size)
	b = append(b, manifestMagic...)
	b = binary.AppendUvarint(b, manifestVersion)
	b = appendString(b, m.Key)
	b = appendString(b, m.Parent)
	flags := uint64(0)
	if m.Full {
		flags |= flagFull
	}
	b = binary.AppendUvarint(b, flags)
	b = binary.AppendUvarint(b, uint64(m.Depth))
	b = binary.AppendUvarint(b, uint64(m.BaseEntries))
	b = binary.AppendUvarint(b, uint64(m.ChainEntries))
	for _, v := range m.Stats.fields() {
		b = binary.AppendUvarint(b, uint64(*v))
	}
	b = binary.AppendUvarint(b, uint64(len(table)))
	for _, id := range table {
		b = append(b, id[:]...)
	}
	b = binary.AppendUvarint(b, uint64(len(entries)))
	for _, e := range entries {
		b = append(b, byte(e.Kind))
		b = appendString(b, e.Name)
		b = binary.AppendUvarint(b, uint64(e.Mode))
		b = binary.AppendUvarint(b, uint64(e.UID))
		b = binary.AppendUvarint(b, uint64(e.GID))
		b = binary.AppendVarint(b, e.MTime)
		if e.Kind == Symlink || e.Kind == Hardlink {
			b = appendString(b, e.Link)
		}
		if e.hasContent() {
			b = binary.AppendUvarint(b, uint64(e.Size))
			b = binary.AppendUvarint(b, uint64(len(e.Slices)))
			for _, s := range e.Slices {
				b = binary.AppendUvarint(b, index[s.Chunk])
				b = binary.AppendUvarint(b, uint64(s.Offset))
				b = binary.AppendUvarint(b, uint64(s.Length))
			}
		}
	}
	return b
}

func (s *Stats) fields() []*int64 {
	return []*int64{&s.TreeEntries, &s.TreeBytes, &s.DeltaEntries, &s.DeltaBytes, &s.NewChunks, &s.NewBytes, &s.SharedChunks, &s.SharedBytes}
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// decoder reads an encoding, remembering the first error.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
	}
}

// uvarint reads an unsigned integer of at most limit, in its shortest
// form.
func (d *decoder) uvarint(what string, limit uint64) uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	switch {
	case n <= 0:
		d.fail("%s: truncated or overlong integer", what)
		return 0
	case n != uvarintLen(v):
		d.fail("%s: integer not in its shortest form", what)
		return 0
	case v > limit:
		d.fail("%s: %d, the most is %d", what, v, limit)
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint(what string) int64 {
	u := d.uvarint(what, math.MaxUint64)
	// Zigzag, as binary.Varint: the shortest form of u is the shortest
	// of the value.
	v := int64(u >> 1)
	if u&1 != 0 {
		v = ^v
	}
	return v
}

func uvarintLen(v uint64) int {
	n := 1
	for v >= 0x80 {
		v >>= 7
		n++
	}
	return n
}

func (d *decoder) bytes(what string, n int) []byte {
	if d.err != nil {
		return nil
	}
	if n > len(d.b) {
		d.fail("%s: %d bytes, %d left", what, n, len(d.b))
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) string(what string, limit int) string {
	n := d.uvarint(what, uint64(limit))
	return string(d.bytes(what, int(n)))
}

// count reads a count of items of at least min bytes each: no more than
// the bytes left can hold, so a forged count cannot make the decoder
// allocate more than the manifest's size.
func (d *decoder) count(what string, minBytes int, limit uint64) int {
	n := d.uvarint(what, limit)
	if d.err == nil && n > uint64(len(d.b)/minBytes) {
		d.fail("%s: %d, more than the %d bytes left can hold", what, n, len(d.b))
		return 0
	}
	return int(n)
}

// decodeManifest decodes and validates an encoding (uncompressed): every
// name, kind, size and slice, the order of the entries, and, in a full
// manifest, that every entry's directory and every hard link's file come
// before it. Errors wrap ErrCorrupt and name the entry.
func decodeManifest(b []byte) (*Manifest, error) {
	if len(b) < len(manifestMagic) || string(b[:len(manifestMagic)]) != manifestMagic {
		return nil, fmt.Errorf("%w: not a checkpoint manifest (no magic)", ErrCorrupt)
	}
	d := &decoder{b: b[len(manifestMagic):]}
	if v := d.uvarint("version", math.MaxUint32); d.err == nil && v != manifestVersion {
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrCorrupt, v, manifestVersion)
	}
	m := &Manifest{}
	m.Key = d.string("key", 64)
	m.Parent = d.string("parent", 71)
	flags := d.uvarint("flags", flagFull)
	m.Full = flags&flagFull != 0
	m.Depth = int(d.uvarint("depth", MaxChain))
	m.BaseEntries = int64(d.uvarint("base entries", MaxEntries))
	m.ChainEntries = int64(d.uvarint("chain entries", math.MaxInt64))
	for _, v := range m.Stats.fields() {
		*v = int64(d.uvarint("stats", math.MaxInt64))
	}
	if d.err != nil {
		return nil, d.err
	}
	switch {
	case len(m.Key) != 16:
		return nil, fmt.Errorf("%w: key fingerprint %q", ErrCorrupt, m.Key)
	case m.Full && (m.Parent != "" || m.Depth != 0 || m.ChainEntries != 0):
		return nil, fmt.Errorf("%w: a full manifest with parent %q, depth %d, chain entries %d", ErrCorrupt, m.Parent, m.Depth, m.ChainEntries)
	case !m.Full && m.Depth == 0:
		return nil, fmt.Errorf("%w: a delta manifest of depth 0", ErrCorrupt)
	}
	if !m.Full {
		if err := blob.ValidDigest(m.Parent); err != nil {
			return nil, fmt.Errorf("%w: parent: %w", ErrCorrupt, err)
		}
	}
	table := make([]chunk.ID, d.count("chunks", len(chunk.ID{}), math.MaxUint32))
	seen := make(map[chunk.ID]struct{}, len(table))
	for i := range table {
		copy(table[i][:], d.bytes("chunk", len(chunk.ID{})))
		if _, dup := seen[table[i]]; dup && d.err == nil {
			return nil, fmt.Errorf("%w: chunk %s twice in the table", ErrCorrupt, table[i])
		}
		seen[table[i]] = struct{}{}
	}
	// used counts the chunks the slices so far use: a chunk is first
	// used in table order (as encode writes it), so a manifest has one
	// encoding.
	used := 0
	// minEntry is the fewest bytes an entry takes: kind, name of one
	// byte, mode, uid, gid, mtime.
	const minEntry = 7
	if n := d.count("entries", minEntry, MaxEntries); n > 0 {
		m.Entries = make([]Entry, n)
	}
	v := newValidator(m.Full)
	for i := range m.Entries {
		e := &m.Entries[i]
		e.Kind = Kind(d.uvarint("kind", uint64(OpaqueDir)))
		e.Name = d.string("name", MaxName)
		e.Mode = uint32(d.uvarint("mode", 0o7777))
		e.UID = uint32(d.uvarint("uid", math.MaxUint32))
		e.GID = uint32(d.uvarint("gid", math.MaxUint32))
		e.MTime = d.varint("mtime")
		if e.Kind == Symlink || e.Kind == Hardlink {
			e.Link = d.string("link", max(MaxLink, MaxName))
		}
		if e.hasContent() {
			e.Size = int64(d.uvarint("size", MaxFileSize))
			if n := d.count("slices", 3, math.MaxUint32); n > 0 {
				e.Slices = make([]Slice, n)
			}
			for j := range e.Slices {
				k := d.uvarint("chunk index", uint64(used))
				e.Slices[j] = Slice{
					Offset: uint32(d.uvarint("offset", chunk.MaxSize)),
					Length: uint32(d.uvarint("length", chunk.MaxSize)),
				}
				if d.err != nil {
					break
				}
				if k == uint64(used) {
					if used == len(table) {
						d.fail("entry %q: a slice of chunk %d of the %d in the table", clip(e.Name), k, len(table))
						break
					}
					used++
				}
				e.Slices[j].Chunk = table[k]
			}
		}
		if d.err != nil {
			return nil, fmt.Errorf("entry %d: %w", i, d.err)
		}
		if err := v.check(e); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if d.err != nil {
		return nil, d.err
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the last entry", ErrCorrupt, len(d.b))
	}
	if used != len(table) {
		return nil, fmt.Errorf("%w: chunk %s in the table and in no slice", ErrCorrupt, table[used])
	}
	return m, nil
}

// validator checks a manifest's entries one by one, in order.
type validator struct {
	full bool
	prev string
	// dirs is the path of directories that hold the last entry (full
	// manifests), innermost last.
	dirs []string
	// files are the files met so far, by name (full manifests): what a
	// hard link may name.
	files map[string]*Entry
}

func newValidator(full bool) *validator {
	v := &validator{full: full}
	if full {
		v.files = map[string]*Entry{}
	}
	return v
}

func (v *validator) check(e *Entry) error {
	if err := validName(e.Name); err != nil {
		return fmt.Errorf("entry %q: %w", e.Name, err)
	}
	if v.prev != "" && compareNames(v.prev, e.Name) >= 0 {
		return fmt.Errorf("entry %q: after %q, out of order or twice", e.Name, v.prev)
	}
	v.prev = e.Name
	if err := checkEntry(e, v.full); err != nil {
		return fmt.Errorf("entry %q: %w", e.Name, err)
	}
	if !v.full {
		return nil
	}
	dir, _ := parentName(e.Name)
	for len(v.dirs) > 0 && v.dirs[len(v.dirs)-1] != dir {
		v.dirs = v.dirs[:len(v.dirs)-1]
	}
	if dir != "" && len(v.dirs) == 0 {
		return fmt.Errorf("entry %q: its directory is not in the tree", e.Name)
	}
	switch e.Kind {
	case Dir:
		v.dirs = append(v.dirs, e.Name)
	case File:
		v.files[e.Name] = e
	case Hardlink:
		t, ok := v.files[e.Link]
		if !ok || !sameContent(t, e) {
			return fmt.Errorf("entry %q: hard link to %q, which is not a file before it with the same content", e.Name, e.Link)
		}
	}
	return nil
}

// checkEntry checks what an entry holds for its kind, in a full tree or a
// delta.
func checkEntry(e *Entry, full bool) error {
	switch e.Kind {
	case File, Dir, Symlink, Hardlink, FIFO:
	case Whiteout, OpaqueDir:
		if full {
			return fmt.Errorf("a %s in a full checkpoint", e.Kind)
		}
	default:
		return fmt.Errorf("unknown kind %d", uint8(e.Kind))
	}
	if e.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %#o has more than permission bits", e.Mode)
	}
	if e.hasContent() {
		if err := checkContent(e); err != nil {
			return err
		}
	} else if e.Size != 0 || len(e.Slices) != 0 {
		return fmt.Errorf("a %s with content", e.Kind)
	}
	switch e.Kind {
	case Symlink:
		return validLink(e.Link)
	case Hardlink:
		if err := validName(e.Link); err != nil {
			return fmt.Errorf("hard link: %w", err)
		}
		if e.Link == e.Name {
			return errors.New("hard link to itself")
		}
	default:
		if e.Link != "" {
			return fmt.Errorf("a %s with a link", e.Kind)
		}
	}
	return nil
}

// ChunkIDs returns the chunks m's entries refer to, each once, in the
// order of first use: what a collector keeps while m is live (with every
// manifest of its chain).
func (m *Manifest) ChunkIDs() []chunk.ID {
	seen := map[chunk.ID]bool{}
	var ids []chunk.ID
	for i := range m.Entries {
		for _, s := range m.Entries[i].Slices {
			if !seen[s.Chunk] {
				seen[s.Chunk] = true
				ids = append(ids, s.Chunk)
			}
		}
	}
	return ids
}
