package telemetry

import (
	"context"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// TombstonePayloads implements store.Store.
func (s *Store) TombstonePayloads(ctx context.Context, runID string, at time.Time, reason string) (int64, int64, []string, error) {
	start := time.Now()
	n, kept, free, err := s.s.TombstonePayloads(ctx, runID, at, reason)
	s.observe("TombstonePayloads", start, err)
	return n, kept, free, err
}

// TombstoneCheckpoints implements store.Store.
func (s *Store) TombstoneCheckpoints(ctx context.Context, runID string, at time.Time, reason string) (int64, error) {
	start := time.Now()
	n, err := s.s.TombstoneCheckpoints(ctx, runID, at, reason)
	s.observe("TombstoneCheckpoints", start, err)
	return n, err
}

// DeleteArtifacts implements store.Store.
func (s *Store) DeleteArtifacts(ctx context.Context, runID string, at time.Time, reason string) (int64, []string, error) {
	start := time.Now()
	n, free, err := s.s.DeleteArtifacts(ctx, runID, at, reason)
	s.observe("DeleteArtifacts", start, err)
	return n, free, err
}

// PurgeRun implements store.Store.
func (s *Store) PurgeRun(ctx context.Context, runID string, d store.Deletion) (store.Deletion, []string, error) {
	start := time.Now()
	out, free, err := s.s.PurgeRun(ctx, runID, d)
	s.observe("PurgeRun", start, err)
	return out, free, err
}

// DeleteTenant implements store.Store.
func (s *Store) DeleteTenant(ctx context.Context, tenant string, d store.Deletion) (store.Deletion, []string, error) {
	start := time.Now()
	out, free, err := s.s.DeleteTenant(ctx, tenant, d)
	s.observe("DeleteTenant", start, err)
	return out, free, err
}

// RecordDeletion implements store.Store.
func (s *Store) RecordDeletion(ctx context.Context, d store.Deletion) (store.Deletion, error) {
	start := time.Now()
	out, err := s.s.RecordDeletion(ctx, d)
	s.observe("RecordDeletion", start, err)
	return out, err
}

// ExpireDeletions implements store.Store.
func (s *Store) ExpireDeletions(ctx context.Context, before time.Time, tenants []string, others bool) (int64, error) {
	start := time.Now()
	n, err := s.s.ExpireDeletions(ctx, before, tenants, others)
	s.observe("ExpireDeletions", start, err)
	return n, err
}

// ListDeletions implements store.Store.
func (s *Store) ListDeletions(ctx context.Context, tenant string, limit int) ([]store.Deletion, error) {
	start := time.Now()
	out, err := s.s.ListDeletions(ctx, tenant, limit)
	s.observe("ListDeletions", start, err)
	return out, err
}
