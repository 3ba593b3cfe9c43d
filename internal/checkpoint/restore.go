package checkpoint

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// Tree is the workspace a checkpoint describes: its chain applied, in
// normal form (see Entries).
type Tree struct {
	// Digest is the checkpoint's.
	Digest string
	// Manifest is the checkpoint's own manifest (Entries are its
	// changes only when it is a delta).
	Manifest *Manifest

	s       *Store
	key     chunk.Key
	entries []*Entry
	bytes   int64
	index   map[string]*Entry
}

// Resolve returns the tree of the checkpoint digest, which must be
// tenant's: its chain loaded (parent after parent, up to a full
// checkpoint, at most MaxChain, each manifest checked, none another
// tenant's) and applied in order.
func (s *Store) Resolve(ctx context.Context, tenant, digest string) (*Tree, error) {
	key := chunk.TenantKey(tenant)
	t, m, err := s.resolve(ctx, key, digest)
	if err != nil {
		return nil, err
	}
	list, n := t.normalize()
	return &Tree{Digest: digest, Manifest: m, s: s, key: key, entries: list, bytes: n}, nil
}

// Entries returns the tree's entries in walk order (a directory before
// what is below it, names compared by component), in normal form: only
// File, Dir, Symlink, Hardlink and FIFO, and the files that share content
// through hard links are one File, the first in walk order, and Hardlinks
// to it. The caller must not modify them.
func (t *Tree) Entries() []*Entry { return t.entries }

// Bytes returns the bytes of file content in the tree (a hard-linked
// file's once).
func (t *Tree) Bytes() int64 { return t.bytes }

// Lookup returns the entry named name, or nil.
func (t *Tree) Lookup(name string) *Entry {
	if t.index == nil {
		t.index = make(map[string]*Entry, len(t.entries))
		for _, e := range t.entries {
			t.index[e.Name] = e
		}
	}
	return t.index[name]
}

// Restore writes the tree of the checkpoint digest, which must be
// tenant's, to w as a tar stream (see Tree.WriteTar).
func (s *Store) Restore(ctx context.Context, tenant, digest string, w io.Writer) error {
	t, err := s.Resolve(ctx, tenant, digest)
	if err != nil {
		return err
	}
	return t.WriteTar(ctx, w)
}

// WriteTar writes the tree to w as a tar stream for the sandbox to unpack
// into an empty /workspace: its entries in walk order, with their names
// (directories with a trailing "/"), modes, owners and modification times
// to the nanosecond; PAX records where a field does not fit ustar (long
// names, names that are not ASCII, times with a fraction), hard links as
// tar hard links to their group's first file. Chunks are read ahead by
// one worker per CPU, each decompressed once for all the consecutive
// slices that use it, and checked against its ID.
func (t *Tree) WriteTar(ctx context.Context, w io.Writer) error {
	var seq []chunk.ID
	for _, e := range t.entries {
		if e.Kind == File {
			seq = appendChunks(seq, e.Slices)
		}
	}
	f := t.s.newFetcher(ctx, t.key, seq)
	defer f.close()
	bw := bufio.NewWriterSize(w, 256<<10)
	tw := tar.NewWriter(bw)
	for _, e := range t.entries {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("checkpoint: restore %s: %w", t.Digest, err)
		}
		if err := tw.WriteHeader(tarHeader(e)); err != nil {
			return fmt.Errorf("checkpoint: restore %s: entry %q: %w", t.Digest, clip(e.Name), err)
		}
		if e.Kind != File {
			continue
		}
		for _, sl := range e.Slices {
			data, err := f.slice(sl)
			if err == nil {
				_, err = tw.Write(data)
			}
			if err != nil {
				return fmt.Errorf("checkpoint: restore %s: entry %q: %w", t.Digest, clip(e.Name), err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("checkpoint: restore %s: %w", t.Digest, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("checkpoint: restore %s: %w", t.Digest, err)
	}
	return nil
}

// TarStream returns the tree's tar stream (WriteTar) as a reader that can
// also write itself out: a consumer that takes an io.WriterTo (the
// executor connection's input, execconn) gets WriteTar's writes as they
// are made, with no pipe, goroutine or copy between; one that reads gets
// them through an io.Pipe. The stream is made once: read it or write it
// out, not both, and Close it when done.
func (t *Tree) TarStream(ctx context.Context) *TarStream {
	return &TarStream{ctx: ctx, t: t}
}

// TarStream is a tree's tar stream (see Tree.TarStream).
type TarStream struct {
	ctx context.Context
	t   *Tree

	mu      sync.Mutex
	started bool
	pr      *io.PipeReader // set when read
	err     error          // what WriteTar returned
}

// errStreamUsed: a TarStream is made once.
var errStreamUsed = errors.New("checkpoint: the tar stream was read already")

// start marks the stream started and reports whether it was not.
func (s *TarStream) start() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return false
	}
	s.started = true
	return true
}

// end records what WriteTar returned.
func (s *TarStream) end(err error) {
	s.mu.Lock()
	s.err = err
	s.mu.Unlock()
}

// WriteTo writes the tar stream to w (io.WriterTo).
func (s *TarStream) WriteTo(w io.Writer) (int64, error) {
	if !s.start() {
		return 0, errStreamUsed
	}
	cw := &countingWriter{w: w}
	err := s.t.WriteTar(s.ctx, cw)
	s.end(err)
	return cw.n, err
}

// Read reads the tar stream (io.Reader), made by WriteTar in a goroutine
// of its own on the first Read.
func (s *TarStream) Read(p []byte) (int, error) {
	s.mu.Lock()
	if !s.started {
		s.started = true
		pr, pw := io.Pipe()
		s.pr = pr
		go func() {
			err := s.t.WriteTar(s.ctx, pw)
			s.end(err)
			pw.CloseWithError(err)
		}()
	}
	pr := s.pr
	s.mu.Unlock()
	if pr == nil {
		return 0, errStreamUsed
	}
	return pr.Read(p)
}

// Close stops a stream being read: WriteTar's next write fails and it
// returns. A stream written out ends with its WriteTo.
func (s *TarStream) Close() error {
	s.mu.Lock()
	pr := s.pr
	s.mu.Unlock()
	if pr != nil {
		pr.CloseWithError(errors.New("checkpoint: tar stream closed"))
	}
	return nil
}

// Err returns the error WriteTar returned, once it did (nil before, and
// when it wrote the whole stream). A consumer that unpacked the stream
// with success may have taken one cut at an entry's end (a chunk that
// failed its check) for a whole one, as tar unpackers do; this says. A
// failed WriteTar has returned by the time its consumer sees the stream
// end: its error is recorded before the stream is closed.
func (s *TarStream) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// countingWriter counts the bytes written through it.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// appendChunks appends the chunks of slices to seq, but not one that is
// already last.
func appendChunks(seq []chunk.ID, slices []Slice) []chunk.ID {
	for _, sl := range slices {
		if len(seq) == 0 || seq[len(seq)-1] != sl.Chunk {
			seq = append(seq, sl.Chunk)
		}
	}
	return seq
}

// tarHeader returns the tar header of e.
func tarHeader(e *Entry) *tar.Header {
	h := &tar.Header{
		Name:    e.Name,
		Mode:    int64(e.Mode),
		Uid:     int(e.UID),
		Gid:     int(e.GID),
		ModTime: time.Unix(0, e.MTime),
		Format:  tar.FormatPAX,
	}
	switch e.Kind {
	case File:
		h.Typeflag, h.Size = tar.TypeReg, e.Size
	case Dir:
		h.Typeflag, h.Name = tar.TypeDir, e.Name+"/"
	case Symlink:
		h.Typeflag, h.Linkname = tar.TypeSymlink, e.Link
	case Hardlink:
		h.Typeflag, h.Linkname = tar.TypeLink, e.Link
	case FIFO:
		h.Typeflag = tar.TypeFifo
	}
	return h
}

// Open returns a reader of the content of e, a File or Hardlink of a tree
// of tenant's (from Resolve or Changed). Each chunk is checked against its
// ID as it is read.
func (s *Store) Open(ctx context.Context, tenant string, e *Entry) (io.ReadCloser, error) {
	if !e.hasContent() {
		return nil, fmt.Errorf("checkpoint: open %s: not a file", e)
	}
	if err := checkContent(e); err != nil {
		return nil, fmt.Errorf("checkpoint: open %s: %w", e, err)
	}
	return &contentReader{f: s.newFetcher(ctx, chunk.TenantKey(tenant), appendChunks(nil, e.Slices)), e: e}, nil
}

// contentReader reads a file's slices in order.
type contentReader struct {
	f    *fetcher
	e    *Entry
	i    int    // the slice being read
	rest []byte // what is left of it
	err  error
}

func (r *contentReader) Read(p []byte) (int, error) {
	for len(r.rest) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		if r.i == len(r.e.Slices) {
			r.err = io.EOF
			return 0, io.EOF
		}
		data, err := r.f.slice(r.e.Slices[r.i])
		if err != nil {
			r.err = fmt.Errorf("checkpoint: read %s: %w", r.e, err)
			return 0, r.err
		}
		r.rest = data
		r.i++
	}
	n := copy(p, r.rest)
	r.rest = r.rest[n:]
	return n, nil
}

func (r *contentReader) Close() error {
	r.f.close()
	if r.err == nil {
		r.err = errors.New("checkpoint: read: closed")
	}
	return nil
}

// fetcher reads a sequence of chunks ahead of their use, in parallel, and
// hands them out in order.
type fetcher struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// slots carries, in sequence order, one channel per chunk, which
	// receives the chunk once read.
	slots chan chan fetched
	cur   fetched
	have  bool
	pool  *sync.Pool
}

type fetched struct {
	id   chunk.ID
	data []byte
	err  error
}

// fetchBufs holds *[]byte buffers of decompressed chunks.
var fetchBufs sync.Pool

// newFetcher starts reading the chunks of seq ahead: up to two per CPU at
// once (a read waits on the store about as long as it decompresses and
// hashes), and up to four per CPU read and not yet used. So a restore
// holds at most 6 chunks per CPU, and a tar unpacking at its own pace
// never waits for one.
func (s *Store) newFetcher(ctx context.Context, key chunk.Key, seq []chunk.ID) *fetcher {
	ctx, cancel := context.WithCancel(ctx)
	f := &fetcher{cancel: cancel, slots: make(chan chan fetched, 4*s.workers), pool: &fetchBufs}
	f.wg.Go(func() {
		defer close(f.slots)
		sem := make(chan struct{}, 2*s.workers)
		// One Hasher per read at once, each kept for the next chunk: it
		// tries the kind of ID its last chunk had first (chunk.Hasher).
		hashers := make(chan *chunk.Hasher, 2*s.workers)
		for range 2 * s.workers {
			hashers <- key.Hasher()
		}
		for _, id := range seq {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				return
			}
			c := make(chan fetched, 1)
			select {
			case f.slots <- c:
			case <-ctx.Done():
				<-sem
				return
			}
			// Every channel in slots gets its chunk or an error.
			f.wg.Go(func() {
				defer func() { <-sem }()
				var buf []byte
				if b, ok := f.pool.Get().(*[]byte); ok {
					buf = *b
				}
				h := <-hashers
				data, err := s.chunks.GetWith(ctx, h, id, buf)
				hashers <- h
				c <- fetched{id: id, data: data, err: err}
			})
		}
	})
	return f
}

// chunk returns the content of chunk id, the current one or the next in
// the sequence. It is valid until the next call.
func (f *fetcher) chunk(id chunk.ID) ([]byte, error) {
	if f.have && f.cur.id == id {
		return f.cur.data, f.cur.err
	}
	if f.have && f.cur.data != nil {
		b := f.cur.data[:0]
		f.pool.Put(&b)
	}
	c, ok := <-f.slots
	if !ok {
		return nil, fmt.Errorf("chunk %s: not read (cancelled?)", id)
	}
	f.cur, f.have = <-c, true
	switch {
	case f.cur.err != nil:
		return nil, f.cur.err
	case f.cur.id != id:
		// The sequence is built from the same slices: a bug, not data.
		return nil, fmt.Errorf("chunk %s: read %s in its place", id, f.cur.id)
	}
	return f.cur.data, nil
}

// slice returns the bytes of sl, valid until the next call.
func (f *fetcher) slice(sl Slice) ([]byte, error) {
	data, err := f.chunk(sl.Chunk)
	if err != nil {
		return nil, err
	}
	if end := uint64(sl.Offset) + uint64(sl.Length); end > uint64(len(data)) {
		return nil, fmt.Errorf("%w: a slice to byte %d of chunk %s, which holds %d", ErrCorrupt, end, sl.Chunk, len(data))
	}
	return data[sl.Offset : sl.Offset+sl.Length], nil
}

// close stops reading ahead and waits for the workers.
func (f *fetcher) close() {
	f.cancel()
	f.wg.Wait()
}
