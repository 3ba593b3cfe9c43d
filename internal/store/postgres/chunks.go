package postgres

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

var _ chunk.Backend = (*Chunks)(nil)

// chunksPage is how many IDs one statement of Chunks.IDs reads: the
// listing holds no statement open between pages, however long its caller
// takes.
const chunksPage = 256

// Chunks keeps checkpoint chunks in the store's database (table chunks,
// one row a chunk), so that every airlock process on it restores what any
// other checkpointed: a chunk.Backend. Each Put commits on its own, with
// synchronous_commit off: a gigabyte of checkpoint is a thousand chunks,
// and a WAL flush each would cost more than writing them. Sync then waits
// for one flush that covers them all.
type Chunks struct {
	s *Store
}

// Chunks returns the store's chunk backend. Pass it to chunk.NewStore.
func (s *Store) Chunks() *Chunks { return &Chunks{s: s} }

// Put implements chunk.Backend.
func (c *Chunks) Put(ctx context.Context, id chunk.ID, data []byte) error {
	if len(data) == 0 || len(data) > chunk.MaxStored {
		return c.s.check("put chunk", fmt.Errorf("%s: %d bytes, want 1 to %d", id, len(data), chunk.MaxStored))
	}
	if err := c.s.check("put chunk", nil); err != nil {
		return err
	}
	err := c.s.write(ctx, func(tx pgx.Tx) error {
		// Committed without waiting for the WAL to reach the disk: Sync
		// waits for it once for all of them (see Sync).
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO chunks (id, size, data, created_ns) VALUES ($1, $2, $3, $4) ON CONFLICT (id) DO NOTHING`,
			id.String(), len(data), data, c.s.now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: put chunk %s: %w", id, err)
	}
	return nil
}

// Get implements chunk.Backend. The size is checked before the bytes are
// fetched, so a row that cannot be a chunk is never read whole.
func (c *Chunks) Get(ctx context.Context, id chunk.ID, dst []byte) ([]byte, error) {
	if err := c.s.check("get chunk", nil); err != nil {
		return dst[:0], err
	}
	var size int64
	var data []byte
	err := c.s.pool.QueryRow(ctx, `SELECT size, CASE WHEN size BETWEEN 1 AND $2 AND octet_length(data) = size THEN data END FROM chunks WHERE id = $1`,
		id.String(), chunk.MaxStored).Scan(&size, &data)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return dst[:0], fmt.Errorf("postgres: get chunk: %w: %s", chunk.ErrNotFound, id)
	case err != nil:
		return dst[:0], fmt.Errorf("postgres: get chunk %s: %w", id, err)
	case data == nil:
		return dst[:0], fmt.Errorf("postgres: get chunk: %w: %s: its row says %d bytes, want 1 to %d, as many as it holds", chunk.ErrCorrupt, id, size, chunk.MaxStored)
	}
	return append(dst[:0], data...), nil
}

// Has implements chunk.Backend.
func (c *Chunks) Has(ctx context.Context, id chunk.ID) (bool, error) {
	if err := c.s.check("stat chunk", nil); err != nil {
		return false, err
	}
	// Found and marked used in one statement, atomic with Expire's
	// delete (the row's lock orders them); created_ns is the chunk's last
	// use. Without waiting for the WAL, as Put: Sync's flush covers it
	// before anything refers to the chunk.
	var found bool
	err := c.s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL synchronous_commit = off`); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE chunks SET created_ns = GREATEST(created_ns, $2) WHERE id = $1`, id.String(), c.s.now().UnixNano())
		found = tag.RowsAffected() > 0
		return err
	})
	if err != nil {
		return false, fmt.Errorf("postgres: stat chunk %s: %w", id, err)
	}
	return found, nil
}

// Expire implements chunk.Backend: one statement, so a Has (an update of
// the same row) is before it, and keeps the chunk, or after it, and finds
// nothing.
func (c *Chunks) Expire(ctx context.Context, id chunk.ID, before time.Time) (bool, error) {
	if err := c.s.check("expire chunk", nil); err != nil {
		return false, err
	}
	tag, err := c.s.pool.Exec(ctx, `DELETE FROM chunks WHERE id = $1 AND created_ns < $2`, id.String(), before.UnixNano())
	if err != nil {
		return false, fmt.Errorf("postgres: expire chunk %s: %w", id, err)
	}
	return tag.RowsAffected() > 0, nil
}

// Delete implements chunk.Backend.
func (c *Chunks) Delete(ctx context.Context, id chunk.ID) error {
	if err := c.s.check("delete chunk", nil); err != nil {
		return err
	}
	tag, err := c.s.pool.Exec(ctx, `DELETE FROM chunks WHERE id = $1`, id.String())
	switch {
	case err != nil:
		return fmt.Errorf("postgres: delete chunk %s: %w", id, err)
	case tag.RowsAffected() == 0:
		return fmt.Errorf("postgres: delete chunk: %w: %s", chunk.ErrNotFound, id)
	}
	return nil
}

// IDs implements chunk.Backend: it reads chunksPage IDs a statement,
// after the last one yielded (ids compare by their bytes: the column's
// collation is "C"). A malformed id in the table is an error.
func (c *Chunks) IDs(ctx context.Context) iter.Seq2[chunk.ID, error] {
	return func(yield func(chunk.ID, error) bool) {
		after := ""
		for {
			if err := c.s.check("list chunks", nil); err != nil {
				yield(chunk.ID{}, err)
				return
			}
			page, err := c.page(ctx, after)
			if err != nil {
				yield(chunk.ID{}, fmt.Errorf("postgres: list chunks: %w", err))
				return
			}
			for _, s := range page {
				id, err := chunk.ParseID(s)
				if err != nil {
					yield(chunk.ID{}, fmt.Errorf("postgres: list chunks: %w", err))
					return
				}
				if !yield(id, nil) {
					return
				}
			}
			if len(page) < chunksPage {
				return
			}
			after = page[len(page)-1]
		}
	}
}

// page returns up to chunksPage ids greater than after, in order.
func (c *Chunks) page(ctx context.Context, after string) ([]string, error) {
	rows, err := c.s.pool.Query(ctx, `SELECT id FROM chunks WHERE id > $1 ORDER BY id LIMIT $2`, after, chunksPage)
	if err != nil {
		return nil, err
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, err
	}
	return slices.Clip(ids), nil
}

// Sync implements chunk.Backend: it commits a transaction that has a
// transaction ID, with synchronous_commit as the server has it (never
// off: Open checks), so the commit waits until the WAL is flushed up to
// its own commit record, which follows the records of every Put that
// returned before. If the server stops before that flush, those Puts'
// chunks are lost, and Sync fails: a checkpoint is never recorded on
// chunks a crash can lose.
func (c *Chunks) Sync(ctx context.Context, _ []chunk.ID) error {
	if err := c.s.check("sync chunks", nil); err != nil {
		return err
	}
	err := c.s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `SELECT txid_current()`)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: sync chunks: %w", err)
	}
	return nil
}
