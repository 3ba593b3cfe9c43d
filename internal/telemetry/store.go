package telemetry

import (
	"context"
	"errors"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// Store is a store.Store that times every call of the store it wraps into
// airlock_store_operation_duration_seconds{op,outcome}; it changes no
// argument, result or error. Every method of store.Store is here, written
// out by hand: a method the contract gains fails to compile until it is
// added.
type Store struct {
	s store.Store
	m *Metrics
}

var _ store.Store = (*Store)(nil)

// WrapStore returns s timed into m's metrics.
func (m *Metrics) WrapStore(s store.Store) *Store { return &Store{s: s, m: m} }

// Unwrap returns the store s wraps.
func (s *Store) Unwrap() store.Store { return s.s }

// observe records one call of op that began at start and ended with err.
func (s *Store) observe(op string, start time.Time, err error) {
	s.m.storeDuration.WithLabelValues(op, storeOutcome(err)).Observe(time.Since(start).Seconds())
}

// storeOutcome classifies an error of the store contract.
func storeOutcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, store.ErrNotFound):
		return "not_found"
	case errors.Is(err, store.ErrExists):
		return "exists"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, store.ErrInvalid):
		return "invalid"
	case errors.Is(err, store.ErrLeased):
		return "leased"
	case errors.Is(err, store.ErrLeaseLost):
		return "lease_lost"
	case errors.Is(err, store.ErrFinal):
		return "final"
	case errors.Is(err, store.ErrClosed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	}
	return "error"
}

// CreateRun implements store.Store.
func (s *Store) CreateRun(ctx context.Context, r store.Run) (store.Run, error) {
	start := time.Now()
	out, err := s.s.CreateRun(ctx, r)
	s.observe("CreateRun", start, err)
	return out, err
}

// CreateRunWith implements store.Store.
func (s *Store) CreateRunWith(ctx context.Context, r store.Run, first []event.Event) (store.Run, []event.Event, error) {
	start := time.Now()
	out, evs, err := s.s.CreateRunWith(ctx, r, first)
	s.observe("CreateRunWith", start, err)
	return out, evs, err
}

// GetRun implements store.Store.
func (s *Store) GetRun(ctx context.Context, id string) (store.Run, error) {
	start := time.Now()
	out, err := s.s.GetRun(ctx, id)
	s.observe("GetRun", start, err)
	return out, err
}

// ListRuns implements store.Store.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, error) {
	start := time.Now()
	out, err := s.s.ListRuns(ctx, f)
	s.observe("ListRuns", start, err)
	return out, err
}

// UpdateRunStatus implements store.Store.
func (s *Store) UpdateRunStatus(ctx context.Context, id string, from, to event.Status) (store.Run, error) {
	start := time.Now()
	out, err := s.s.UpdateRunStatus(ctx, id, from, to)
	s.observe("UpdateRunStatus", start, err)
	return out, err
}

// Append implements store.Store.
func (s *Store) Append(ctx context.Context, runID string, next int64, drafts []event.Event) ([]event.Event, error) {
	start := time.Now()
	out, err := s.s.Append(ctx, runID, next, drafts)
	s.observe("Append", start, err)
	return out, err
}

// AppendStatus implements store.Store.
func (s *Store) AppendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (store.Run, []event.Event, error) {
	start := time.Now()
	r, out, err := s.s.AppendStatus(ctx, runID, next, from, to, drafts)
	s.observe("AppendStatus", start, err)
	return r, out, err
}

// Events implements store.Store.
func (s *Store) Events(ctx context.Context, runID string, from int64, limit int) ([]event.Event, error) {
	start := time.Now()
	out, err := s.s.Events(ctx, runID, from, limit)
	s.observe("Events", start, err)
	return out, err
}

// LastEvent implements store.Store.
func (s *Store) LastEvent(ctx context.Context, runID string) (event.Event, error) {
	start := time.Now()
	out, err := s.s.LastEvent(ctx, runID)
	s.observe("LastEvent", start, err)
	return out, err
}

// AcquireLease implements store.Store.
func (s *Store) AcquireLease(ctx context.Context, runID, owner string, ttl time.Duration) (store.Lease, error) {
	start := time.Now()
	out, err := s.s.AcquireLease(ctx, runID, owner, ttl)
	s.observe("AcquireLease", start, err)
	return out, err
}

// RenewLease implements store.Store.
func (s *Store) RenewLease(ctx context.Context, runID, owner string, token int64, ttl time.Duration) (store.Lease, error) {
	start := time.Now()
	out, err := s.s.RenewLease(ctx, runID, owner, token, ttl)
	s.observe("RenewLease", start, err)
	return out, err
}

// ReleaseLease implements store.Store.
func (s *Store) ReleaseLease(ctx context.Context, runID, owner string, token int64) error {
	start := time.Now()
	err := s.s.ReleaseLease(ctx, runID, owner, token)
	s.observe("ReleaseLease", start, err)
	return err
}

// PutArtifact implements store.Store.
func (s *Store) PutArtifact(ctx context.Context, a store.Artifact) (store.Artifact, error) {
	start := time.Now()
	out, err := s.s.PutArtifact(ctx, a)
	s.observe("PutArtifact", start, err)
	return out, err
}

// GetArtifact implements store.Store.
func (s *Store) GetArtifact(ctx context.Context, runID, name string) (store.Artifact, error) {
	start := time.Now()
	out, err := s.s.GetArtifact(ctx, runID, name)
	s.observe("GetArtifact", start, err)
	return out, err
}

// ListArtifacts implements store.Store.
func (s *Store) ListArtifacts(ctx context.Context, runID string) ([]store.Artifact, error) {
	start := time.Now()
	out, err := s.s.ListArtifacts(ctx, runID)
	s.observe("ListArtifacts", start, err)
	return out, err
}

// AddLedgerEntry implements store.Store.
func (s *Store) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	start := time.Now()
	out, err := s.s.AddLedgerEntry(ctx, e)
	s.observe("AddLedgerEntry", start, err)
	return out, err
}

// Balance implements store.Store.
func (s *Store) Balance(ctx context.Context, tenant string) (int64, error) {
	start := time.Now()
	out, err := s.s.Balance(ctx, tenant)
	s.observe("Balance", start, err)
	return out, err
}

// LedgerEntries implements store.Store.
func (s *Store) LedgerEntries(ctx context.Context, tenant string, after int64, limit int) ([]store.LedgerEntry, error) {
	start := time.Now()
	out, err := s.s.LedgerEntries(ctx, tenant, after, limit)
	s.observe("LedgerEntries", start, err)
	return out, err
}

// PutPolicy implements store.Store.
func (s *Store) PutPolicy(ctx context.Context, v store.PolicyVersion) (store.PolicyVersion, bool, error) {
	start := time.Now()
	out, created, err := s.s.PutPolicy(ctx, v)
	s.observe("PutPolicy", start, err)
	return out, created, err
}

// PolicyVersions implements store.Store.
func (s *Store) PolicyVersions(ctx context.Context, tenant, name string) ([]store.PolicyVersion, error) {
	start := time.Now()
	out, err := s.s.PolicyVersions(ctx, tenant, name)
	s.observe("PolicyVersions", start, err)
	return out, err
}

// GetPolicy implements store.Store.
func (s *Store) GetPolicy(ctx context.Context, tenant, name, ref string) (store.PolicyVersion, error) {
	start := time.Now()
	out, err := s.s.GetPolicy(ctx, tenant, name, ref)
	s.observe("GetPolicy", start, err)
	return out, err
}

// ListPolicies implements store.Store.
func (s *Store) ListPolicies(ctx context.Context, tenant string) ([]store.PolicyVersion, error) {
	start := time.Now()
	out, err := s.s.ListPolicies(ctx, tenant)
	s.observe("ListPolicies", start, err)
	return out, err
}

// PutTemplate implements store.Store.
func (s *Store) PutTemplate(ctx context.Context, v store.TemplateVersion) (store.TemplateVersion, bool, error) {
	start := time.Now()
	out, created, err := s.s.PutTemplate(ctx, v)
	s.observe("PutTemplate", start, err)
	return out, created, err
}

// TemplateVersions implements store.Store.
func (s *Store) TemplateVersions(ctx context.Context, tenant, name string) ([]store.TemplateVersion, error) {
	start := time.Now()
	out, err := s.s.TemplateVersions(ctx, tenant, name)
	s.observe("TemplateVersions", start, err)
	return out, err
}

// GetTemplate implements store.Store.
func (s *Store) GetTemplate(ctx context.Context, tenant, name string, version int64) (store.TemplateVersion, error) {
	start := time.Now()
	out, err := s.s.GetTemplate(ctx, tenant, name, version)
	s.observe("GetTemplate", start, err)
	return out, err
}

// ListTemplates implements store.Store.
func (s *Store) ListTemplates(ctx context.Context, tenant string) ([]store.TemplateVersion, error) {
	start := time.Now()
	out, err := s.s.ListTemplates(ctx, tenant)
	s.observe("ListTemplates", start, err)
	return out, err
}

// DeleteTemplate implements store.Store.
func (s *Store) DeleteTemplate(ctx context.Context, tenant, name string) (int64, error) {
	start := time.Now()
	n, err := s.s.DeleteTemplate(ctx, tenant, name)
	s.observe("DeleteTemplate", start, err)
	return n, err
}

// CreateTenant implements store.Store.
func (s *Store) CreateTenant(ctx context.Context, name string) (store.Tenant, error) {
	start := time.Now()
	out, err := s.s.CreateTenant(ctx, name)
	s.observe("CreateTenant", start, err)
	return out, err
}

// GetTenant implements store.Store.
func (s *Store) GetTenant(ctx context.Context, name string) (store.Tenant, error) {
	start := time.Now()
	out, err := s.s.GetTenant(ctx, name)
	s.observe("GetTenant", start, err)
	return out, err
}

// ListTenants implements store.Store.
func (s *Store) ListTenants(ctx context.Context) ([]store.Tenant, error) {
	start := time.Now()
	out, err := s.s.ListTenants(ctx)
	s.observe("ListTenants", start, err)
	return out, err
}

// MarkTenantDeleting implements store.Store.
func (s *Store) MarkTenantDeleting(ctx context.Context, name string) (store.Tenant, error) {
	start := time.Now()
	out, err := s.s.MarkTenantDeleting(ctx, name)
	s.observe("MarkTenantDeleting", start, err)
	return out, err
}

// CreateAPIKey implements store.Store.
func (s *Store) CreateAPIKey(ctx context.Context, k store.APIKey) error {
	start := time.Now()
	err := s.s.CreateAPIKey(ctx, k)
	s.observe("CreateAPIKey", start, err)
	return err
}

// APIKeyByHash implements store.Store.
func (s *Store) APIKeyByHash(ctx context.Context, hash []byte) (store.APIKey, error) {
	start := time.Now()
	out, err := s.s.APIKeyByHash(ctx, hash)
	s.observe("APIKeyByHash", start, err)
	return out, err
}

// ListAPIKeys implements store.Store.
func (s *Store) ListAPIKeys(ctx context.Context, tenant string) ([]store.APIKey, error) {
	start := time.Now()
	out, err := s.s.ListAPIKeys(ctx, tenant)
	s.observe("ListAPIKeys", start, err)
	return out, err
}

// RevokeAPIKey implements store.Store.
func (s *Store) RevokeAPIKey(ctx context.Context, tenant, id string) error {
	start := time.Now()
	err := s.s.RevokeAPIKey(ctx, tenant, id)
	s.observe("RevokeAPIKey", start, err)
	return err
}

// TouchAPIKey implements store.Store.
func (s *Store) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	start := time.Now()
	err := s.s.TouchAPIKey(ctx, id, at)
	s.observe("TouchAPIKey", start, err)
	return err
}

// Close implements store.Store.
func (s *Store) Close() error {
	start := time.Now()
	err := s.s.Close()
	s.observe("Close", start, err)
	return err
}

// AppendSandboxEvents implements store.Store.
func (s *Store) AppendSandboxEvents(ctx context.Context, es []store.SandboxEvent) error {
	start := time.Now()
	err := s.s.AppendSandboxEvents(ctx, es)
	s.observe("AppendSandboxEvents", start, err)
	return err
}

// SandboxEvents implements store.Store.
func (s *Store) SandboxEvents(ctx context.Context, tenant, sandbox string, after uint64, limit int) ([]store.SandboxEvent, error) {
	start := time.Now()
	out, err := s.s.SandboxEvents(ctx, tenant, sandbox, after, limit)
	s.observe("SandboxEvents", start, err)
	return out, err
}

// ExpireSandboxEvents implements store.Store.
func (s *Store) ExpireSandboxEvents(ctx context.Context, tenant string, before time.Time) (int64, error) {
	start := time.Now()
	n, err := s.s.ExpireSandboxEvents(ctx, tenant, before)
	s.observe("ExpireSandboxEvents", start, err)
	return n, err
}

// PutUpload implements store.Store.
func (s *Store) PutUpload(ctx context.Context, u store.Upload, budget int64) (store.Upload, error) {
	start := time.Now()
	u, err := s.s.PutUpload(ctx, u, budget)
	s.observe("PutUpload", start, err)
	return u, err
}

// GetUpload implements store.Store.
func (s *Store) GetUpload(ctx context.Context, tenant, id string) (store.Upload, error) {
	start := time.Now()
	u, err := s.s.GetUpload(ctx, tenant, id)
	s.observe("GetUpload", start, err)
	return u, err
}

// UploadUsage implements store.Store.
func (s *Store) UploadUsage(ctx context.Context, tenant string) (n, bytes int64, err error) {
	start := time.Now()
	n, bytes, err = s.s.UploadUsage(ctx, tenant)
	s.observe("UploadUsage", start, err)
	return n, bytes, err
}

// ExpireUploads implements store.Store.
func (s *Store) ExpireUploads(ctx context.Context, tenant string, before time.Time) (n int64, free []string, err error) {
	start := time.Now()
	n, free, err = s.s.ExpireUploads(ctx, tenant, before)
	s.observe("ExpireUploads", start, err)
	return n, free, err
}

// UploadDigests implements store.Store.
func (s *Store) UploadDigests(ctx context.Context) ([]string, error) {
	start := time.Now()
	out, err := s.s.UploadDigests(ctx)
	s.observe("UploadDigests", start, err)
	return out, err
}

// CreateUISession implements store.Store.
func (s *Store) CreateUISession(ctx context.Context, u store.UISession, most int) error {
	start := time.Now()
	err := s.s.CreateUISession(ctx, u, most)
	s.observe("CreateUISession", start, err)
	return err
}

// UISession implements store.Store.
func (s *Store) UISession(ctx context.Context, hash []byte, now time.Time) (store.UISession, error) {
	start := time.Now()
	u, err := s.s.UISession(ctx, hash, now)
	s.observe("UISession", start, err)
	return u, err
}

// TouchUISession implements store.Store.
func (s *Store) TouchUISession(ctx context.Context, hash []byte, used, expires time.Time) error {
	start := time.Now()
	err := s.s.TouchUISession(ctx, hash, used, expires)
	s.observe("TouchUISession", start, err)
	return err
}

// DeleteUISession implements store.Store.
func (s *Store) DeleteUISession(ctx context.Context, hash []byte) error {
	start := time.Now()
	err := s.s.DeleteUISession(ctx, hash)
	s.observe("DeleteUISession", start, err)
	return err
}

// ExpireUISessions implements store.Store.
func (s *Store) ExpireUISessions(ctx context.Context, now time.Time) (int64, error) {
	start := time.Now()
	n, err := s.s.ExpireUISessions(ctx, now)
	s.observe("ExpireUISessions", start, err)
	return n, err
}

// PutSecret implements store.Store.
func (s *Store) PutSecret(ctx context.Context, sec store.SealedSecret) error {
	start := time.Now()
	err := s.s.PutSecret(ctx, sec)
	s.observe("PutSecret", start, err)
	return err
}

// SealedSecret implements store.Store.
func (s *Store) SealedSecret(ctx context.Context, tenant, name string) (store.SealedSecret, error) {
	start := time.Now()
	sec, err := s.s.SealedSecret(ctx, tenant, name)
	s.observe("SealedSecret", start, err)
	return sec, err
}

// ListSecrets implements store.Store.
func (s *Store) ListSecrets(ctx context.Context, tenant string) ([]store.SealedSecret, error) {
	start := time.Now()
	out, err := s.s.ListSecrets(ctx, tenant)
	s.observe("ListSecrets", start, err)
	return out, err
}

// DeleteSecret implements store.Store.
func (s *Store) DeleteSecret(ctx context.Context, tenant, name string) error {
	start := time.Now()
	err := s.s.DeleteSecret(ctx, tenant, name)
	s.observe("DeleteSecret", start, err)
	return err
}
