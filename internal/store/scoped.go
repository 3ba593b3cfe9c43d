package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/event"
)

// TenantStore is one tenant's view of a Store: every read and write of
// runs, events, artifacts, the credit ledger and policies is checked
// against the tenant, so code that serves a tenant (the API) cannot reach
// another tenant's objects by passing their id, whatever its handlers do.
// Another tenant's run answers exactly like a run that does not exist
// (an error wrapping ErrNotFound, with the same text), so ids cannot be
// probed. Runs created through the view belong to its tenant. It is safe
// for concurrent use, like the Store under it.
//
// Leases are not part of the view: they are the business of the workers
// that drive runs, not of a tenant.
type TenantStore struct {
	s      Store
	tenant string
}

// ForTenant returns tenant's view of s. A malformed tenant gives a view
// whose every call fails with an error wrapping ErrInvalid.
func ForTenant(s Store, tenant string) *TenantStore {
	return &TenantStore{s: s, tenant: tenant}
}

// Tenant is the tenant the view is scoped to.
func (t *TenantStore) Tenant() string { return t.tenant }

// notFound is the error of a run the tenant does not own: the same as for
// a run id nothing has (the text names only the id the caller gave).
func notFound(id string) error {
	return fmt.Errorf("store: run %q: %w", clip(id), ErrNotFound)
}

// run returns run id if it is the tenant's.
func (t *TenantStore) run(ctx context.Context, id string) (Run, error) {
	if err := validTenant(t.tenant); err != nil {
		return Run{}, err
	}
	if event.ValidRunID(id) != nil {
		return Run{}, notFound(id)
	}
	r, err := t.s.GetRun(ctx, id)
	if errors.Is(err, ErrNotFound) {
		return Run{}, notFound(id)
	}
	if err != nil {
		return Run{}, err
	}
	if r.Tenant != t.tenant {
		return Run{}, notFound(id)
	}
	return r, nil
}

// CreateRun is Store.CreateRun for a run of the view's tenant: r.Tenant
// must be empty or the tenant, and a parent must be the tenant's too.
func (t *TenantStore) CreateRun(ctx context.Context, r Run) (Run, error) {
	r, err := t.ownRun(ctx, r)
	if err != nil {
		return Run{}, err
	}
	return t.s.CreateRun(ctx, r)
}

// CreateRunWith is Store.CreateRunWith for a run of the view's tenant, as
// CreateRun.
func (t *TenantStore) CreateRunWith(ctx context.Context, r Run, first []event.Event) (Run, []event.Event, error) {
	r, err := t.ownRun(ctx, r)
	if err != nil {
		return Run{}, nil, err
	}
	return t.s.CreateRunWith(ctx, r, first)
}

// ownRun checks new run r for CreateRun and makes it the tenant's.
func (t *TenantStore) ownRun(ctx context.Context, r Run) (Run, error) {
	if err := validTenant(t.tenant); err != nil {
		return Run{}, err
	}
	if r.Tenant != "" && r.Tenant != t.tenant {
		return Run{}, fmt.Errorf("%w: run %s: tenant %q is not the view's", ErrInvalid, r.ID, clip(r.Tenant))
	}
	r.Tenant = t.tenant
	if r.ParentRunID != "" {
		if _, err := t.run(ctx, r.ParentRunID); err != nil {
			return Run{}, err
		}
	}
	return r, nil
}

// GetRun is Store.GetRun: another tenant's run is not found.
func (t *TenantStore) GetRun(ctx context.Context, id string) (Run, error) {
	return t.run(ctx, id)
}

// ListRuns is Store.ListRuns of the tenant's runs only: f.Tenant must be
// empty or the tenant.
func (t *TenantStore) ListRuns(ctx context.Context, f RunFilter) ([]Run, error) {
	if err := validTenant(t.tenant); err != nil {
		return nil, err
	}
	if f.Tenant != "" && f.Tenant != t.tenant {
		return nil, fmt.Errorf("%w: list runs: tenant %q is not the view's", ErrInvalid, clip(f.Tenant))
	}
	f.Tenant = t.tenant
	return t.s.ListRuns(ctx, f)
}

// UpdateRunStatus is Store.UpdateRunStatus on one of the tenant's runs.
func (t *TenantStore) UpdateRunStatus(ctx context.Context, id string, from, to event.Status) (Run, error) {
	if _, err := t.run(ctx, id); err != nil {
		return Run{}, err
	}
	return t.s.UpdateRunStatus(ctx, id, from, to)
}

// Append is Store.Append on one of the tenant's runs.
func (t *TenantStore) Append(ctx context.Context, runID string, next int64, drafts []event.Event) ([]event.Event, error) {
	if _, err := t.run(ctx, runID); err != nil {
		return nil, err
	}
	return t.s.Append(ctx, runID, next, drafts)
}

// AppendStatus is Store.AppendStatus on one of the tenant's runs.
func (t *TenantStore) AppendStatus(ctx context.Context, runID string, next int64, from, to event.Status, drafts []event.Event) (Run, []event.Event, error) {
	if _, err := t.run(ctx, runID); err != nil {
		return Run{}, nil, err
	}
	return t.s.AppendStatus(ctx, runID, next, from, to, drafts)
}

// Events is Store.Events of one of the tenant's runs.
func (t *TenantStore) Events(ctx context.Context, runID string, from int64, limit int) ([]event.Event, error) {
	if _, err := t.run(ctx, runID); err != nil {
		return nil, err
	}
	return t.s.Events(ctx, runID, from, limit)
}

// LastEvent is Store.LastEvent of one of the tenant's runs.
func (t *TenantStore) LastEvent(ctx context.Context, runID string) (event.Event, error) {
	if _, err := t.run(ctx, runID); err != nil {
		return event.Event{}, err
	}
	return t.s.LastEvent(ctx, runID)
}

// PutArtifact is Store.PutArtifact for one of the tenant's runs.
func (t *TenantStore) PutArtifact(ctx context.Context, a Artifact) (Artifact, error) {
	if _, err := t.run(ctx, a.RunID); err != nil {
		return Artifact{}, err
	}
	return t.s.PutArtifact(ctx, a)
}

// GetArtifact is Store.GetArtifact of one of the tenant's runs.
func (t *TenantStore) GetArtifact(ctx context.Context, runID, name string) (Artifact, error) {
	if _, err := t.run(ctx, runID); err != nil {
		return Artifact{}, err
	}
	return t.s.GetArtifact(ctx, runID, name)
}

// ListArtifacts is Store.ListArtifacts of one of the tenant's runs.
func (t *TenantStore) ListArtifacts(ctx context.Context, runID string) ([]Artifact, error) {
	if _, err := t.run(ctx, runID); err != nil {
		return nil, err
	}
	return t.s.ListArtifacts(ctx, runID)
}

// AddLedgerEntry is Store.AddLedgerEntry on the tenant's ledger: e.Tenant
// must be empty or the tenant (a run it names must be the tenant's, which
// the store checks too).
func (t *TenantStore) AddLedgerEntry(ctx context.Context, e LedgerEntry) (LedgerEntry, error) {
	if err := validTenant(t.tenant); err != nil {
		return LedgerEntry{}, err
	}
	if e.Tenant != "" && e.Tenant != t.tenant {
		return LedgerEntry{}, fmt.Errorf("%w: ledger entry: tenant %q is not the view's", ErrInvalid, clip(e.Tenant))
	}
	e.Tenant = t.tenant
	return t.s.AddLedgerEntry(ctx, e)
}

// Balance is Store.Balance of the tenant.
func (t *TenantStore) Balance(ctx context.Context) (int64, error) {
	if err := validTenant(t.tenant); err != nil {
		return 0, err
	}
	return t.s.Balance(ctx, t.tenant)
}

// LedgerEntries is Store.LedgerEntries of the tenant.
func (t *TenantStore) LedgerEntries(ctx context.Context, after int64, limit int) ([]LedgerEntry, error) {
	if err := validTenant(t.tenant); err != nil {
		return nil, err
	}
	return t.s.LedgerEntries(ctx, t.tenant, after, limit)
}

// PutPolicy is Store.PutPolicy on the tenant's policies: v.Tenant must be
// empty or the tenant.
func (t *TenantStore) PutPolicy(ctx context.Context, v PolicyVersion) (PolicyVersion, bool, error) {
	if err := validTenant(t.tenant); err != nil {
		return PolicyVersion{}, false, err
	}
	if v.Tenant != "" && v.Tenant != t.tenant {
		return PolicyVersion{}, false, fmt.Errorf("%w: policy %s: tenant %q is not the view's", ErrInvalid, clip(v.Name), clip(v.Tenant))
	}
	v.Tenant = t.tenant
	return t.s.PutPolicy(ctx, v)
}

// PolicyVersions is Store.PolicyVersions of the tenant's policy name.
func (t *TenantStore) PolicyVersions(ctx context.Context, name string) ([]PolicyVersion, error) {
	if err := validTenant(t.tenant); err != nil {
		return nil, err
	}
	return t.s.PolicyVersions(ctx, t.tenant, name)
}

// GetPolicy is Store.GetPolicy of the tenant's policy name.
func (t *TenantStore) GetPolicy(ctx context.Context, name, ref string) (PolicyVersion, error) {
	if err := validTenant(t.tenant); err != nil {
		return PolicyVersion{}, err
	}
	return t.s.GetPolicy(ctx, t.tenant, name, ref)
}

// ListPolicies is Store.ListPolicies of the tenant.
func (t *TenantStore) ListPolicies(ctx context.Context) ([]PolicyVersion, error) {
	if err := validTenant(t.tenant); err != nil {
		return nil, err
	}
	return t.s.ListPolicies(ctx, t.tenant)
}

// PutTemplate is Store.PutTemplate on the tenant's templates: v.Tenant
// must be empty or the tenant.
func (t *TenantStore) PutTemplate(ctx context.Context, v TemplateVersion) (TemplateVersion, bool, error) {
	if err := validTenant(t.tenant); err != nil {
		return TemplateVersion{}, false, err
	}
	if v.Tenant != "" && v.Tenant != t.tenant {
		return TemplateVersion{}, false, fmt.Errorf("%w: template %s: tenant %q is not the view's", ErrInvalid, clip(v.Name), clip(v.Tenant))
	}
	v.Tenant = t.tenant
	return t.s.PutTemplate(ctx, v)
}

// TemplateVersions is Store.TemplateVersions of the tenant's template.
func (t *TenantStore) TemplateVersions(ctx context.Context, name string) ([]TemplateVersion, error) {
	if err := validTenant(t.tenant); err != nil {
		return nil, err
	}
	return t.s.TemplateVersions(ctx, t.tenant, name)
}

// GetTemplate is Store.GetTemplate of the tenant's template.
func (t *TenantStore) GetTemplate(ctx context.Context, name string, version int64) (TemplateVersion, error) {
	if err := validTenant(t.tenant); err != nil {
		return TemplateVersion{}, err
	}
	return t.s.GetTemplate(ctx, t.tenant, name, version)
}

// ListTemplates is Store.ListTemplates of the tenant.
func (t *TenantStore) ListTemplates(ctx context.Context) ([]TemplateVersion, error) {
	if err := validTenant(t.tenant); err != nil {
		return nil, err
	}
	return t.s.ListTemplates(ctx, t.tenant)
}

// DeleteTemplate is Store.DeleteTemplate of the tenant's template.
func (t *TenantStore) DeleteTemplate(ctx context.Context, name string) (int64, error) {
	if err := validTenant(t.tenant); err != nil {
		return 0, err
	}
	return t.s.DeleteTemplate(ctx, t.tenant, name)
}

// PutUpload stores u as the tenant's upload (u.Tenant is set to it),
// within budget bytes (Uploads.PutUpload).
func (t *TenantStore) PutUpload(ctx context.Context, u Upload, budget int64) (Upload, error) {
	if err := validTenant(t.tenant); err != nil {
		return Upload{}, err
	}
	u.Tenant = t.tenant
	return t.s.PutUpload(ctx, u, budget)
}

// GetUpload returns the tenant's upload id; another tenant's answers
// ErrNotFound, as one that does not exist.
func (t *TenantStore) GetUpload(ctx context.Context, id string) (Upload, error) {
	if err := validTenant(t.tenant); err != nil {
		return Upload{}, err
	}
	return t.s.GetUpload(ctx, t.tenant, id)
}

// UploadUsage returns how many uploads the tenant keeps and their bytes.
func (t *TenantStore) UploadUsage(ctx context.Context) (n, bytes int64, err error) {
	if err := validTenant(t.tenant); err != nil {
		return 0, 0, err
	}
	return t.s.UploadUsage(ctx, t.tenant)
}
