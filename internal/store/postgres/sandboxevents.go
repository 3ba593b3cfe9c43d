package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/schema"
)

var _ store.SandboxEvents = (*Store)(nil)

// AppendSandboxEvents implements store.SandboxEvents.
func (s *Store) AppendSandboxEvents(ctx context.Context, es []store.SandboxEvent) error {
	if err := s.check("append sandbox events", schema.CheckSandboxEvents(es)); err != nil {
		return err
	}
	if len(es) == 0 {
		return nil
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		return schema.Postgres.AppendSandboxEvents(ctx, schemaTx{tx}, es)
	})
	if err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// SandboxEvents implements store.SandboxEvents.
func (s *Store) SandboxEvents(ctx context.Context, tenant, sandbox string, after uint64, limit int) ([]store.SandboxEvent, error) {
	if err := s.check("sandbox events", nil); err != nil {
		return nil, err
	}
	var out []store.SandboxEvent
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		out, err = schema.Postgres.SandboxEvents(ctx, schemaTx{tx}, tenant, sandbox, after, limit)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	return out, nil
}

// ExpireSandboxEvents implements store.SandboxEvents.
func (s *Store) ExpireSandboxEvents(ctx context.Context, tenant string, before time.Time) (int64, error) {
	if err := s.check("expire sandbox events", nil); err != nil {
		return 0, err
	}
	var n int64
	err := s.write(ctx, func(tx pgx.Tx) error {
		var err error
		n, err = schema.Postgres.ExpireSandboxEvents(ctx, schemaTx{tx}, tenant, before)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	return n, nil
}
