package checkpoint

import (
	"archive/tar"
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// Whiteout names (OCI image-layer whiteouts).
const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
)

// minTime and maxTime bound the modification times a stream may carry:
// what nanoseconds since 1970 in an int64 can hold.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// deltaReader reads a delta stream: it validates each entry, applies it to
// the tree it was given (the tree the delta changes, empty for a full
// stream), and, as an io.Reader, yields the content of the stream's
// files, one after the other, as one stream. What it read is in entries,
// and each file's place in the content stream in files.
type deltaReader struct {
	tr   *tar.Reader
	cr   *countingReader
	tree *tree
	full bool

	// entries are the stream's entries in stream order; a whiteout and an
	// opaque directory as such (Name the name deleted, or the directory).
	entries []*Entry
	// files are the stream's files with content and where it starts in
	// the content stream.
	files []fileRange
	// links are the stream's hard links to files of the stream, whose
	// content is known once the files' is.
	links []hardlinkRef
	// names are the stream's entries' names but whiteouts', in order;
	// whiteouts the names its whiteouts delete.
	names     []string
	whiteouts map[string]bool
	prev      string // the last name but a whiteout's
	prevDir   *Entry // the last entry, if it was a directory
	bytes     int64  // content bytes so far

	cur       *Entry // the file whose body is being read
	remaining int64
	endOfLast int64 // offset in the stream where the last entry's body ends
	done      bool
	err       error // sticky
}

type fileRange struct {
	e   *Entry
	off int64
}

type hardlinkRef struct {
	e, target *Entry
}

func newDeltaReader(r io.Reader, t *tree, full bool) *deltaReader {
	cr := &countingReader{r: bufio.NewReaderSize(r, 64<<10)}
	return &deltaReader{tr: tar.NewReader(cr), cr: cr, tree: t, full: full, whiteouts: map[string]bool{}}
}

// countingReader counts the bytes read through it, and keeps the error
// (but io.EOF) its reader returned.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && !errors.Is(err, io.EOF) && c.err == nil {
		c.err = err
	}
	return n, err
}

// fail returns the error of the stream's reading: the reader's own (a
// connection lost, ctx done), which says nothing of the stream, or else
// the stream's, wrapping ErrStream, built by format.
func (d *deltaReader) fail(format string, args ...any) error {
	if d.cr.err != nil {
		return fmt.Errorf("read delta stream: %w", d.cr.err)
	}
	return fmt.Errorf("%w: "+format, append([]any{ErrStream}, args...)...)
}

// Read implements io.Reader: the content of the stream's files, in order.
// It returns io.EOF once the stream ended well, and the stream's error
// otherwise.
func (d *deltaReader) Read(p []byte) (int, error) {
	for d.remaining == 0 {
		if d.err != nil {
			return 0, d.err
		}
		if d.done {
			return 0, io.EOF
		}
		if err := d.next(); err != nil {
			d.err = err
			return 0, err
		}
	}
	if int64(len(p)) > d.remaining {
		p = p[:d.remaining]
	}
	n, err := d.tr.Read(p)
	d.remaining -= int64(n)
	d.bytes += int64(n)
	switch {
	case d.remaining > 0 && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)):
		d.err = d.fail("entry %q: the stream ends %d bytes into its %d", clip(d.cur.Name), d.cur.Size-d.remaining, d.cur.Size)
		return n, d.err
	case err != nil && !errors.Is(err, io.EOF):
		d.err = d.fail("entry %q: %w", clip(d.cur.Name), err)
		return n, d.err
	}
	return n, nil
}

// run reads the whole stream, discarding the content: for a stream with
// no consumer of it (and the fuzz test).
func (d *deltaReader) run() error {
	_, err := io.Copy(io.Discard, d)
	return err
}

// next reads the next entry's header: validates it and applies it, and
// sets remaining to its content's length.
func (d *deltaReader) next() error {
	hdr, err := d.tr.Next()
	if errors.Is(err, io.EOF) {
		// A stream cut at an entry's end reads as a clean end to
		// archive/tar: require the two zero blocks that end an archive.
		if d.cr.n < d.endOfLast+2*512 {
			return d.fail("the stream ends without an end-of-archive marker (truncated?)")
		}
		d.done = true
		return nil
	}
	if err != nil {
		if n := len(d.entries); n > 0 {
			return d.fail("after entry %q: %w", clip(d.entries[n-1].Name), err)
		}
		return d.fail("%w", err)
	}
	e, err := d.entry(hdr)
	if err != nil {
		return fmt.Errorf("%w: entry %q: %w", ErrStream, clip(hdr.Name), err)
	}
	if e != nil && e.Kind == File && e.Size > 0 {
		d.cur, d.remaining = e, e.Size
		d.files = append(d.files, fileRange{e: e, off: d.bytes})
	}
	d.endOfLast = d.cr.n + (hdr.Size+511)/512*512
	if hdr.Typeflag != tar.TypeReg {
		d.endOfLast = d.cr.n
	}
	return nil
}

// entry validates hdr against the contract and the tree so far, applies
// it, and returns its entry (nil for an opaque marker, which changes the
// directory before it).
func (d *deltaReader) entry(hdr *tar.Header) (*Entry, error) {
	if len(d.entries) >= MaxEntries {
		return nil, fmt.Errorf("more than %d entries", MaxEntries)
	}
	name := hdr.Name
	kind := File
	switch hdr.Typeflag {
	case tar.TypeReg:
	case tar.TypeDir:
		kind = Dir
		name = strings.TrimSuffix(name, "/")
	case tar.TypeSymlink:
		kind = Symlink
	case tar.TypeLink:
		kind = Hardlink
	case tar.TypeFifo:
		kind = FIFO
	default:
		return nil, fmt.Errorf("type %q is not a delta stream's (regular file, directory, symlink, hard link, FIFO)", hdr.Typeflag)
	}
	if err := validName(name); err != nil {
		return nil, err
	}
	for k := range hdr.PAXRecords {
		// archive/tar makes a GNU sparse file's holes zeros: a few bytes
		// of stream could make a terabyte of content to chunk.
		if strings.HasPrefix(k, "GNU.sparse.") {
			return nil, errors.New("a sparse file (GNU.sparse PAX records): a delta stream's files carry their bytes")
		}
	}
	prevDir := d.prevDir
	d.prevDir = nil
	if kind != File && hdr.Size != 0 {
		return nil, fmt.Errorf("a %s with %d bytes of content", kind, hdr.Size)
	}
	if hdr.Size < 0 || hdr.Size > MaxFileSize {
		return nil, fmt.Errorf("size %d, the most is %d", hdr.Size, int64(MaxFileSize))
	}
	dir, base := parentName(name)
	if strings.HasPrefix(base, whiteoutPrefix) {
		// Whiteouts may come anywhere (a writer may put one where the
		// name it deletes was); the checks in whiteout make their place
		// irrelevant.
		return d.whiteout(hdr, kind, dir, base, prevDir)
	}
	// Everything else in walk order: so a directory comes before what is
	// below it, and the stream, applied in its order, makes the tree its
	// entries make applied in the manifest's (sorted) order.
	if d.prev != "" && compareNames(d.prev, name) >= 0 {
		return nil, fmt.Errorf("after %q: out of order or twice", clip(d.prev))
	}
	d.prev = name
	e := &Entry{Kind: kind, Name: name, Size: hdr.Size}
	if err := d.metadata(e, hdr); err != nil {
		return nil, err
	}
	switch kind {
	case Symlink:
		if err := validLink(hdr.Linkname); err != nil {
			return nil, err
		}
		e.Link = hdr.Linkname
	case Hardlink:
		if err := d.hardlink(e, hdr.Linkname); err != nil {
			return nil, err
		}
	default:
		if hdr.Linkname != "" {
			return nil, fmt.Errorf("a %s with a link name", kind)
		}
	}
	for a := name; a != ""; a, _ = parentName(a) {
		if d.whiteouts[a] {
			return nil, fmt.Errorf("below %q, which the stream deletes", clip(a))
		}
	}
	if err := d.tree.apply(e); err != nil {
		return nil, err
	}
	d.entries = append(d.entries, e)
	d.names = append(d.names, name)
	if kind == Dir {
		d.prevDir = e
	}
	return e, nil
}

// metadata sets e's mode, owner and time from hdr.
func (d *deltaReader) metadata(e *Entry, hdr *tar.Header) error {
	switch {
	case hdr.Mode&^0o7777 != 0:
		return fmt.Errorf("mode %#o has more than permission bits", hdr.Mode)
	case hdr.Uid < 0 || hdr.Uid > math.MaxUint32 || hdr.Gid < 0 || hdr.Gid > math.MaxUint32:
		return fmt.Errorf("uid %d or gid %d out of range", hdr.Uid, hdr.Gid)
	case hdr.ModTime.Before(minTime) || hdr.ModTime.After(maxTime):
		return fmt.Errorf("modification time %v out of range", hdr.ModTime)
	}
	e.Mode, e.UID, e.GID = uint32(hdr.Mode), uint32(hdr.Uid), uint32(hdr.Gid)
	e.MTime = hdr.ModTime.UnixNano()
	return nil
}

// hardlink makes e a hard link to target, a file of the tree so far.
func (d *deltaReader) hardlink(e *Entry, target string) error {
	if err := validName(target); err != nil {
		return fmt.Errorf("hard link to %q: %w", clip(target), err)
	}
	if target == e.Name {
		return errors.New("hard link to itself")
	}
	n := d.tree.lookup(target)
	if n == nil || !n.e.hasContent() {
		return fmt.Errorf("hard link to %q, which is not a file of the tree", clip(target))
	}
	e.Link = target
	t := n.e
	e.Size = t.Size
	if t.Size > 0 && t.Slices == nil {
		// A file of this stream, whose slices are known only once its
		// content is chunked.
		d.links = append(d.links, hardlinkRef{e: e, target: t})
	} else {
		e.Slices = t.Slices
	}
	return nil
}

// whiteout handles an entry named DIR/.wh.NAME: the deletion of DIR/NAME,
// or (.wh..wh..opq) the mark that DIR, the entry before, is opaque.
func (d *deltaReader) whiteout(hdr *tar.Header, kind Kind, dir, base string, prevDir *Entry) (*Entry, error) {
	switch {
	case d.full:
		return nil, errors.New("a whiteout in a full stream")
	case kind != File || hdr.Size != 0 || hdr.Linkname != "":
		return nil, errors.New("a whiteout that is not an empty regular file")
	}
	if base == opaqueMarker {
		if dir == "" || prevDir == nil || prevDir.Name != dir {
			return nil, errors.New("an opaque marker not right after its directory's entry")
		}
		prevDir.Kind = OpaqueDir
		if n := d.tree.lookup(dir); n != nil && n.children != nil {
			d.tree.dropChildren(n)
			n.e = withKind(prevDir, Dir)
		}
		return nil, nil
	}
	target := base[len(whiteoutPrefix):]
	if strings.HasPrefix(target, whiteoutPrefix) {
		return nil, fmt.Errorf("a whiteout of %q, a reserved name", clip(target))
	}
	if target == "" || target == "." || target == ".." {
		return nil, fmt.Errorf("a whiteout of %q", target)
	}
	name := target
	if dir != "" {
		name = dir + "/" + target
	}
	if d.whiteouts[name] {
		return nil, errors.New("a second whiteout of its name")
	}
	// The stream's entries so far are in walk order: those at name or
	// below it are together, from the first not before name.
	i, _ := slices.BinarySearchFunc(d.names, name, compareNames)
	if i < len(d.names) && (d.names[i] == name || under(d.names[i], name)) {
		return nil, fmt.Errorf("a whiteout of %q, which the stream also writes", clip(d.names[i]))
	}
	d.whiteouts[name] = true
	e := &Entry{Kind: Whiteout, Name: name}
	if err := d.tree.apply(e); err != nil {
		return nil, err
	}
	d.entries = append(d.entries, e)
	return e, nil
}

// clip shortens untrusted text quoted in an error message.
func clip(s string) string {
	const limit = 200
	if len(s) > limit {
		return s[:limit] + "..."
	}
	return s
}
