package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

var _ store.UISessions = (*Store)(nil)

// CreateUISession implements store.UISessions.
func (s *Store) CreateUISession(ctx context.Context, u store.UISession, most int) error {
	if err := s.check("create ui session", store.CheckUISession(u)); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return schema.SQLite.CreateUISession(ctx, schemaTx{tx}, u, most)
	})
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// UISession implements store.UISessions.
func (s *Store) UISession(ctx context.Context, hash []byte, now time.Time) (store.UISession, error) {
	if err := s.check("get ui session", nil); err != nil {
		return store.UISession{}, err
	}
	var (
		u  store.UISession
		ok bool
	)
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		u, ok, err = schema.SQLite.UISession(ctx, schemaTx{tx}, hash, now)
		return err
	})
	if err == nil && !ok {
		err = schema.ErrNoUISession
	}
	if err != nil {
		return store.UISession{}, fmt.Errorf("sqlite: %w", err)
	}
	return u, nil
}

// TouchUISession implements store.UISessions.
func (s *Store) TouchUISession(ctx context.Context, hash []byte, used, expires time.Time) error {
	if err := s.check("touch ui session", nil); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return schema.SQLite.TouchUISession(ctx, schemaTx{tx}, hash, used, expires)
	})
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// DeleteUISession implements store.UISessions.
func (s *Store) DeleteUISession(ctx context.Context, hash []byte) error {
	if err := s.check("delete ui session", nil); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return schema.SQLite.DeleteUISession(ctx, schemaTx{tx}, hash)
	})
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// ExpireUISessions implements store.UISessions.
func (s *Store) ExpireUISessions(ctx context.Context, now time.Time) (int64, error) {
	if err := s.check("expire ui sessions", nil); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, err = schema.SQLite.ExpireUISessions(ctx, schemaTx{tx}, now)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	return n, nil
}
