package sqlite

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

var _ store.Secrets = (*Store)(nil)

// PutSecret implements store.Secrets.
func (s *Store) PutSecret(ctx context.Context, sec store.SealedSecret) error {
	if err := s.check("put secret", store.CheckSealedSecret(sec)); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return schema.SQLite.PutSecret(ctx, schemaTx{tx}, sec)
	})
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

// SealedSecret implements store.Secrets.
func (s *Store) SealedSecret(ctx context.Context, tenant, name string) (store.SealedSecret, error) {
	if err := s.check("get secret", nil); err != nil {
		return store.SealedSecret{}, err
	}
	var out store.SealedSecret
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = schema.SQLite.SealedSecret(ctx, schemaTx{tx}, tenant, name)
		return err
	})
	if err != nil {
		return store.SealedSecret{}, fmt.Errorf("sqlite: %w", err)
	}
	return out, nil
}

// ListSecrets implements store.Secrets.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]store.SealedSecret, error) {
	if err := s.check("list secrets", nil); err != nil {
		return nil, err
	}
	var out []store.SealedSecret
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		var err error
		out, err = schema.SQLite.ListSecrets(ctx, schemaTx{tx}, tenant)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	return out, nil
}

// DeleteSecret implements store.Secrets.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	if err := s.check("delete secret", nil); err != nil {
		return err
	}
	err := s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		return schema.SQLite.DeleteSecret(ctx, schemaTx{tx}, tenant, name)
	})
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}
