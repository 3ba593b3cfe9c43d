package postgres

import (
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store/blob"
)

var _ blob.Backend = (*Blobs)(nil)

// MaxChunk is the most bytes of a blob one row of blob_chunks holds, and
// so the most one statement writes or reads: a blob of any size streams
// through the store in pieces of at most this, never whole in memory.
const MaxChunk = 1 << 20

// chunkTimeout bounds each statement of a blob's read, which goes on
// after the context that opened it ended (see blob.Backend.Read).
const chunkTimeout = time.Minute

// Blobs keeps blob bytes in the store's database (tables blobs and
// blob_chunks), so that every airlock process on it reads the uploads,
// snapshots and artifacts any other stored: a blob.Backend. The bytes are
// checked against their digest by blob.Store as they are read.
type Blobs struct {
	s *Store
}

// Blobs returns the store's blob backend. Pass it as blob.Options.Backend.
func (s *Store) Blobs() *Blobs { return &Blobs{s: s} }

// Write implements blob.Backend: one transaction inserts the blob's row
// and its chunks, so a reader sees the whole blob or none of it. A
// concurrent Write of the same digest waits for this one's commit and
// then does nothing.
func (b *Blobs) Write(ctx context.Context, digest string, size int64, r io.Reader) error {
	if err := b.s.check("write blob", nil); err != nil {
		return err
	}
	if err := blob.ValidDigest(digest); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("postgres: write blob %s: negative size %d", digest, size)
	}
	err := b.s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO blobs (digest, size, created_ns) VALUES ($1, $2, $3) ON CONFLICT (digest) DO NOTHING`,
			digest, size, b.s.now().UnixNano())
		if err != nil || tag.RowsAffected() == 0 {
			return err // stored already: content addressing
		}
		buf := make([]byte, MaxChunk)
		var n, total int64
		for {
			k, err := io.ReadFull(r, buf)
			if k > 0 {
				if total += int64(k); total > size {
					return fmt.Errorf("more than the %d bytes announced", size)
				}
				if _, err := tx.Exec(ctx, `INSERT INTO blob_chunks (digest, n, data) VALUES ($1, $2, $3)`, digest, n, buf[:k]); err != nil {
					return fmt.Errorf("chunk %d: %w", n, err)
				}
				n++
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				break
			}
			if err != nil {
				return err
			}
		}
		if total != size {
			return fmt.Errorf("%d bytes, not the %d announced", total, size)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: write blob %s: %w", digest, err)
	}
	return nil
}

// Read implements blob.Backend: the reader fetches one chunk at a time.
// A chunk that is missing, empty, over MaxChunk, or past the blob's size
// is an error wrapping blob.ErrCorrupt. Deleting the blob while it is
// read makes the reader fail the same way.
func (b *Blobs) Read(ctx context.Context, digest string) (io.ReadCloser, int64, error) {
	if err := b.s.check("read blob", nil); err != nil {
		return nil, 0, err
	}
	if err := blob.ValidDigest(digest); err != nil {
		return nil, 0, err
	}
	var size int64
	err := b.s.pool.QueryRow(ctx, `SELECT size FROM blobs WHERE digest = $1`, digest).Scan(&size)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, 0, fmt.Errorf("postgres: read blob: %w: %s", blob.ErrNotFound, digest)
	}
	if err != nil {
		return nil, 0, fmt.Errorf("postgres: read blob %s: %w", digest, err)
	}
	return &chunkReader{b: b, ctx: context.WithoutCancel(ctx), digest: digest, size: size}, size, nil
}

// chunkReader reads a blob's chunks in order.
type chunkReader struct {
	b      *Blobs
	ctx    context.Context // values only: see blob.Backend.Read
	digest string
	size   int64
	// n is the next chunk, read the bytes returned so far, buf what is
	// left of the current chunk.
	n    int64
	read int64
	buf  []byte
	err  error // sticky
}

func (c *chunkReader) Read(p []byte) (int, error) {
	for len(c.buf) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if c.read == c.size {
			c.err = io.EOF
			return 0, c.err
		}
		c.err = c.next()
	}
	k := copy(p, c.buf)
	c.buf = c.buf[k:]
	return k, nil
}

// next fetches chunk c.n into c.buf.
func (c *chunkReader) next() error {
	if err := c.b.s.check("read blob", nil); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(c.ctx, chunkTimeout)
	defer cancel()
	var data []byte
	err := c.b.s.pool.QueryRow(ctx, `SELECT data FROM blob_chunks WHERE digest = $1 AND n = $2`, c.digest, c.n).Scan(&data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("postgres: read blob: %w: %s: chunk %d is missing, %d of %d bytes read", blob.ErrCorrupt, c.digest, c.n, c.read, c.size)
	case err != nil:
		return fmt.Errorf("postgres: read blob %s: chunk %d: %w", c.digest, c.n, err)
	case len(data) == 0 || len(data) > MaxChunk || int64(len(data)) > c.size-c.read:
		return fmt.Errorf("postgres: read blob: %w: %s: chunk %d holds %d bytes, %d of %d read", blob.ErrCorrupt, c.digest, c.n, len(data), c.read, c.size)
	}
	c.n++
	c.read += int64(len(data))
	c.buf = data
	return nil
}

// Close implements io.Closer; the reader holds no connection between
// reads.
func (c *chunkReader) Close() error {
	if c.err == nil {
		c.err = errors.New("postgres: read blob: closed")
	}
	c.buf = nil
	return nil
}

// Has implements blob.Backend: found and marked used in one statement,
// atomic with Expire's (the row's lock orders them); created_ns is the
// blob's last use. Without waiting for the WAL: a lost mark after a crash
// only makes the blob look older to a collector, which keeps whatever a
// recorded reference names.
func (b *Blobs) Has(ctx context.Context, digest string) (bool, error) {
	if err := b.s.check("stat blob", nil); err != nil {
		return false, err
	}
	if err := blob.ValidDigest(digest); err != nil {
		return false, err
	}
	var found bool
	err := b.s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE blobs SET created_ns = GREATEST(created_ns, $2) WHERE digest = $1`, digest, b.s.now().UnixNano())
		found = tag.RowsAffected() > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: stat blob %s: %w", digest, err)
	}
	return found, nil
}

// Expire implements blob.Backend: one transaction locks the blob's row if
// it was last used before the time before (a Has, an update of the row,
// is then either before it and keeps the blob, or after it and finds
// nothing), and deletes its chunks and the row.
func (b *Blobs) Expire(ctx context.Context, digest string, before time.Time) (bool, error) {
	if err := b.s.check("expire blob", nil); err != nil {
		return false, err
	}
	if err := blob.ValidDigest(digest); err != nil {
		return false, err
	}
	gone := false
	err := b.s.write(ctx, func(tx pgx.Tx) error {
		gone = false
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM blobs WHERE digest = $1 AND created_ns < $2 FOR UPDATE`, digest, before.UnixNano()).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil // used since, or not stored
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM blob_chunks WHERE digest = $1`, digest); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `DELETE FROM blobs WHERE digest = $1`, digest); err != nil {
			return err
		}
		gone = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("postgres: expire blob %s: %w", digest, err)
	}
	return gone, nil
}

// blobsPage is how many digests one statement of Digests reads: the
// listing holds no statement open between pages.
const blobsPage = 256

// Digests implements blob.Backend: blobsPage digests a statement, after
// the last one yielded. A malformed digest in the table is an error.
func (b *Blobs) Digests(ctx context.Context) iter.Seq2[string, error] {
	return func(yield func(string, error) bool) {
		after := ""
		for {
			if err := b.s.check("list blobs", nil); err != nil {
				yield("", err)
				return
			}
			rows, err := b.s.pool.Query(ctx, `SELECT digest FROM blobs WHERE digest > $1 ORDER BY digest LIMIT $2`, after, blobsPage)
			var page []string
			if err == nil {
				page, err = pgx.CollectRows(rows, pgx.RowTo[string])
			}
			if err != nil {
				yield("", fmt.Errorf("postgres: list blobs: %w", err))
				return
			}
			for _, d := range page {
				if err := blob.ValidDigest(d); err != nil {
					yield("", fmt.Errorf("postgres: list blobs: %w", err))
					return
				}
				if !yield(d, nil) {
					return
				}
			}
			if len(page) < blobsPage {
				return
			}
			after = page[len(page)-1]
		}
	}
}

// Delete implements blob.Backend: the blob's row and chunks go in one
// transaction.
func (b *Blobs) Delete(ctx context.Context, digest string) error {
	if err := b.s.check("delete blob", nil); err != nil {
		return err
	}
	if err := blob.ValidDigest(digest); err != nil {
		return err
	}
	err := b.s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `DELETE FROM blob_chunks WHERE digest = $1`, digest); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `DELETE FROM blobs WHERE digest = $1`, digest)
		if err == nil && tag.RowsAffected() == 0 {
			return blob.ErrNotFound
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: delete blob %s: %w", digest, err)
	}
	return nil
}
