package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

var _ store.Uploads = (*Store)(nil)

// PutUpload implements store.Uploads.
func (s *Store) PutUpload(ctx context.Context, u store.Upload, budget int64) (store.Upload, error) {
	if err := s.check("put upload", schema.CheckUpload(u)); err != nil {
		return u, err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		u, err = schema.SQLite.PutUpload(ctx, schemaTx{tx}, u, budget, s.now().UnixNano())
		return err
	})
	if err != nil {
		return u, fmt.Errorf("sqlite: %w", err)
	}
	return u, nil
}

// GetUpload implements store.Uploads.
func (s *Store) GetUpload(ctx context.Context, tenant, id string) (store.Upload, error) {
	if err := s.check("get upload", nil); err != nil {
		return store.Upload{}, err
	}
	var u store.Upload
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		u, err = schema.SQLite.GetUpload(ctx, schemaTx{tx}, tenant, id)
		return err
	})
	if err != nil {
		return store.Upload{}, fmt.Errorf("sqlite: %w", err)
	}
	return u, nil
}

// UploadUsage implements store.Uploads.
func (s *Store) UploadUsage(ctx context.Context, tenant string) (n, bytes int64, err error) {
	if err := s.check("upload usage", nil); err != nil {
		return 0, 0, err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, bytes, err = schema.SQLite.UploadUsage(ctx, schemaTx{tx}, tenant)
		return err
	})
	if err != nil {
		return 0, 0, fmt.Errorf("sqlite: %w", err)
	}
	return n, bytes, nil
}

// ExpireUploads implements store.Uploads.
func (s *Store) ExpireUploads(ctx context.Context, tenant string, before time.Time) (n int64, free []string, err error) {
	if err := s.check("expire uploads", nil); err != nil {
		return 0, nil, err
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		n, free, err = schema.SQLite.ExpireUploads(ctx, schemaTx{tx}, tenant, before)
		return err
	})
	if err != nil {
		return 0, nil, fmt.Errorf("sqlite: %w", err)
	}
	return n, free, nil
}

// UploadDigests implements store.Uploads.
func (s *Store) UploadDigests(ctx context.Context) ([]string, error) {
	if err := s.check("upload digests", nil); err != nil {
		return nil, err
	}
	var out []string
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = schema.SQLite.UploadDigests(ctx, schemaTx{tx})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return out, nil
}
