package postgres

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

var _ store.CheckpointHolds = (*Store)(nil)

// maxHolder bounds a hold's holder name.
const maxHolder = 512

func checkHold(h store.CheckpointHold) error {
	switch {
	case h.Holder == "" || len(h.Holder) > maxHolder:
		return fmt.Errorf("%w: holder: 1 to %d bytes", store.ErrInvalid, maxHolder)
	case blob.ValidDigest(h.Digest) != nil:
		return fmt.Errorf("%w: digest %q", store.ErrInvalid, store.Clip(h.Digest))
	}
	return nil
}

// HoldCheckpoint implements store.CheckpointHolds.
func (s *Store) HoldCheckpoint(ctx context.Context, h store.CheckpointHold) error {
	if err := s.check("hold checkpoint", checkHold(h)); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `INSERT INTO checkpoint_holds (holder, tenant, digest, created_ns) VALUES ($1, $2, $3, $4)
			ON CONFLICT (holder) DO UPDATE SET tenant = EXCLUDED.tenant, digest = EXCLUDED.digest, created_ns = EXCLUDED.created_ns`,
			h.Holder, h.Tenant, h.Digest, s.now().UnixNano())
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: hold checkpoint %s: %w", clip(h.Holder), err)
	}
	return nil
}

// ReleaseCheckpoint implements store.CheckpointHolds.
func (s *Store) ReleaseCheckpoint(ctx context.Context, holder string) error {
	if err := s.check("release checkpoint", nil); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM checkpoint_holds WHERE holder = $1`, holder)
		return err
	})
	if err != nil {
		return fmt.Errorf("postgres: release checkpoint %s: %w", clip(holder), err)
	}
	return nil
}

// SyncCheckpointHolds implements store.CheckpointHolds.
func (s *Store) SyncCheckpointHolds(ctx context.Context, prefix string, hs []store.CheckpointHold) error {
	var invalid error
	for _, h := range hs {
		if err := checkHold(h); err != nil {
			invalid = err
			break
		}
		if !strings.HasPrefix(h.Holder, prefix) {
			invalid = fmt.Errorf("%w: holder %q does not start with %q", store.ErrInvalid, clip(h.Holder), clip(prefix))
			break
		}
	}
	if prefix == "" {
		invalid = fmt.Errorf("%w: an empty prefix", store.ErrInvalid)
	}
	if err := s.check("sync checkpoint holds", invalid); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		// starts_with, not LIKE: a prefix holds no wildcard then.
		if _, err := tx.Exec(ctx, `DELETE FROM checkpoint_holds WHERE starts_with(holder, $1)`, prefix); err != nil {
			return err
		}
		now := s.now().UnixNano()
		for _, h := range hs {
			_, err := tx.Exec(ctx, `INSERT INTO checkpoint_holds (holder, tenant, digest, created_ns) VALUES ($1, $2, $3, $4)
				ON CONFLICT (holder) DO UPDATE SET tenant = EXCLUDED.tenant, digest = EXCLUDED.digest`,
				h.Holder, h.Tenant, h.Digest, now)
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: sync checkpoint holds %s: %w", clip(prefix), err)
	}
	return nil
}

// ListCheckpointHolds implements store.CheckpointHolds.
func (s *Store) ListCheckpointHolds(ctx context.Context) ([]store.CheckpointHold, error) {
	if err := s.check("list checkpoint holds", nil); err != nil {
		return nil, err
	}
	rows, err := s.pool.Query(ctx, `SELECT holder, tenant, digest FROM checkpoint_holds ORDER BY holder`)
	var out []store.CheckpointHold
	if err == nil {
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (store.CheckpointHold, error) {
			var h store.CheckpointHold
			err := r.Scan(&h.Holder, &h.Tenant, &h.Digest)
			return h, err
		})
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: list checkpoint holds: %w", err)
	}
	return out, nil
}
