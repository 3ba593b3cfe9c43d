package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
)

// The tenants' policies, credits, secrets and API keys on this host, as its
// command line manages them.

// ValidPolicyName checks a policy's name before anything is opened: nil,
// or what is wrong.
func ValidPolicyName(name string) error { return store.ValidatePolicyName(name) }

// ValidTenantName checks a tenant's name as ValidPolicyName does a policy's.
func ValidTenantName(name string) error { return store.ValidateTenantName(name) }

// ValidKeyName checks an API key's name as ValidPolicyName does a policy's.
func ValidKeyName(name string) error { return store.ValidateKeyName(name) }

// ValidKeyID checks an API key's id as ValidPolicyName does a policy's name.
func ValidKeyID(id string) error { return store.ValidateAPIKeyID(id) }

// ValidPolicyRef checks the part of a policy argument after its '@': vN or
// a hash prefix ("" names the latest version).
func ValidPolicyRef(ref string) error {
	_, err := store.ParsePolicyRef(ref)
	return err
}

// Name bounds and forms, for messages.
const (
	MaxPolicyNameLen = store.MaxPolicyNameLen
	MaxTenantNameLen = store.MaxTenantNameLen
	MaxKeyNameLen    = store.MaxKeyNameLen
	APIKeyIDPrefix   = store.APIKeyIDPrefix
)

// PolicyNotFoundError reports a stored policy, or a version of one, that
// does not exist.
type PolicyNotFoundError struct{ Name, Ref string }

func (e *PolicyNotFoundError) Error() string {
	if e.Ref == "" {
		return fmt.Sprintf("no stored policy %q (airlock policy ls lists them)", e.Name)
	}
	return fmt.Sprintf("policy %s has no version %s (airlock policy history %s lists them)", e.Name, e.Ref, e.Name)
}

// Policy reads the stored version of tenant's policy arg names
// (NAME[@vN|@HASHPREFIX]), with its document. A malformed argument is an
// InputError; a name or version that does not exist a
// PolicyNotFoundError.
func (h *Host) Policy(ctx context.Context, tenant, arg string) (api.PolicyVersion, error) {
	rs, err := h.run()
	if err != nil {
		return api.PolicyVersion{}, err
	}
	name, ref, _ := strings.Cut(arg, "@")
	v, err := rs.store.GetPolicy(ctx, tenant, name, ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return api.PolicyVersion{}, &PolicyNotFoundError{Name: name, Ref: ref}
	case errors.Is(err, store.ErrInvalid):
		return api.PolicyVersion{}, &InputError{Err: err}
	case err != nil:
		return api.PolicyVersion{}, err
	}
	vs := []store.PolicyVersion{v}
	fillPolicyHashes(ctx, rs.store, tenant, vs)
	out := server.PolicyVersionOf(vs[0])
	out.Document = string(v.Document)
	return out, nil
}

// PutPolicy stores doc, read from source, as the next version of tenant's
// policy name, by by, unless it is the name's latest version already
// (then out.New is false).
func (h *Host) PutPolicy(ctx context.Context, tenant, name, source, by string, doc []byte) (api.PolicyVersion, error) {
	rs, err := h.run()
	if err != nil {
		return api.PolicyVersion{}, err
	}
	hash, err := policy.HashOf(doc)
	if err != nil {
		return api.PolicyVersion{}, &InputError{Err: fmt.Errorf("%s: %w", source, err)}
	}
	v, created, err := rs.store.PutPolicy(ctx, store.PolicyVersion{Tenant: tenant, Name: name, Document: doc, PolicyHash: hash, Source: source, By: by})
	if errors.Is(err, store.ErrInvalid) {
		return api.PolicyVersion{}, &InputError{Err: err}
	}
	if err != nil {
		return api.PolicyVersion{}, err
	}
	out := server.PolicyVersionOf(v)
	out.New = &created
	return out, nil
}

// PolicyVersions lists the versions of tenant's policy name, newest first;
// a PolicyNotFoundError when there is no such policy.
func (h *Host) PolicyVersions(ctx context.Context, tenant, name string) ([]api.PolicyVersion, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	vs, err := rs.store.PolicyVersions(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) {
		return nil, &PolicyNotFoundError{Name: name}
	}
	if err != nil {
		return nil, err
	}
	return policyVersionsOf(ctx, rs.store, tenant, vs), nil
}

// Policies lists tenant's stored policies at their latest versions.
func (h *Host) Policies(ctx context.Context, tenant string) ([]api.PolicyVersion, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	vs, err := rs.store.ListPolicies(ctx, tenant)
	if err != nil {
		return nil, err
	}
	return policyVersionsOf(ctx, rs.store, tenant, vs), nil
}

func policyVersionsOf(ctx context.Context, st store.Store, tenant string, vs []store.PolicyVersion) []api.PolicyVersion {
	fillPolicyHashes(ctx, st, tenant, vs)
	out := make([]api.PolicyVersion, len(vs))
	for i, v := range vs {
		out[i] = server.PolicyVersionOf(v)
	}
	return out
}

// fillPolicyHashes gives the versions stored without a policy hash (before
// the stores kept one) the hash of their documents.
func fillPolicyHashes(ctx context.Context, st store.Store, tenant string, vs []store.PolicyVersion) {
	store.FillPolicyHashes(vs, func(v store.PolicyVersion) ([]byte, error) {
		full, err := st.GetPolicy(ctx, tenant, v.Name, fmt.Sprintf("v%d", v.Version))
		return full.Document, err
	}, policy.HashOf)
}

// NoTenantError reports a tenant that does not exist.
type NoTenantError struct{ Name string }

func (e *NoTenantError) Error() string {
	return fmt.Sprintf("no tenant %q (airlock tenants create %s makes it)", e.Name, e.Name)
}

// knownTenant refuses a tenant that does not exist: the local tenant
// always does, any other once a tenant was created under its name.
func knownTenant(ctx context.Context, st store.Store, name string) error {
	if name == event.LocalTenant {
		return nil
	}
	if store.ValidateTenantName(name) != nil {
		return &InputError{Err: fmt.Errorf("tenant name %q: want 1 to %d of a-z, 0-9 and '-', starting with a letter or digit", name, store.MaxTenantNameLen)}
	}
	_, err := st.GetTenant(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return &NoTenantError{Name: name}
	}
	return err
}

// Credits returns tenant's balance and whole ledger, oldest first.
func (h *Host) Credits(ctx context.Context, tenant string) (int64, []api.LedgerEntry, error) {
	rs, err := h.run()
	if err != nil {
		return 0, nil, err
	}
	bal, err := rs.store.Balance(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	var all []api.LedgerEntry
	for after := int64(0); ; {
		page, err := rs.store.LedgerEntries(ctx, tenant, after, store.MaxPage)
		if err != nil {
			return 0, nil, err
		}
		for _, e := range page {
			all = append(all, server.LedgerEntryOf(e))
		}
		if len(page) < store.MaxPage {
			return bal, all, nil
		}
		after = page[len(page)-1].ID
	}
}

// Grant adds micro micro-credits to tenant's ledger, which must exist
// (NoTenantError); it returns the entry and the balance after it.
func (h *Host) Grant(ctx context.Context, tenant string, micro int64, note string) (api.LedgerEntry, int64, error) {
	rs, err := h.run()
	if err != nil {
		return api.LedgerEntry{}, 0, err
	}
	if err := knownTenant(ctx, rs.store, tenant); err != nil {
		return api.LedgerEntry{}, 0, err
	}
	e, err := rs.store.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: tenant, Kind: store.LedgerGrant, Amount: micro, Note: note})
	if errors.Is(err, store.ErrInvalid) {
		return api.LedgerEntry{}, 0, &InputError{Err: err}
	}
	if err != nil {
		return api.LedgerEntry{}, 0, err
	}
	bal, err := rs.store.Balance(ctx, tenant)
	return server.LedgerEntryOf(e), bal, err
}

// SetSecret stores value as tenant's secret name, bound to hosts, and
// returns the hosts normalized. The value is copied; clear yours.
func (h *Host) SetSecret(ctx context.Context, tenant, name string, value []byte, hosts []string) ([]string, error) {
	st, err := h.Secrets()
	if err != nil {
		return nil, err
	}
	if err := st.Set(ctx, tenant, name, secret.NewValue(value), hosts); err != nil {
		return nil, err
	}
	return secret.NormalizeHosts(hosts)
}

// SecretsOf describes tenant's secrets, sorted by name; never a value.
func (h *Host) SecretsOf(ctx context.Context, tenant string) ([]api.Secret, error) {
	st, err := h.Secrets()
	if err != nil {
		return nil, err
	}
	infos, err := st.List(ctx, tenant)
	out := make([]api.Secret, len(infos))
	for i, in := range infos {
		out[i] = server.SecretOf(in)
	}
	return out, err
}

// DeleteSecret deletes tenant's secret name (ErrNoSecret when there is
// none).
func (h *Host) DeleteSecret(ctx context.Context, tenant, name string) error {
	st, err := h.Secrets()
	if err != nil {
		return err
	}
	return st.Delete(ctx, tenant, name)
}

// MaxSecretSize bounds a secret's value, in bytes.
const MaxSecretSize = secret.MaxValueSize

// ErrNoSecret reports a secret that does not exist.
var ErrNoSecret = secret.ErrNotFound

// ValidSecretName checks a secret's or a tenant's name as the secret store
// does.
func ValidSecretName(name string) error { return secret.ValidName(name) }

// NormalizeHosts checks host patterns of a secret's binding and returns
// them normalized.
func NormalizeHosts(hosts []string) ([]string, error) { return secret.NormalizeHosts(hosts) }

// Tenant is a tenant as the command line lists it.
type Tenant struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
}

// ErrTenantExists reports a tenant name already taken.
var ErrTenantExists = store.ErrExists

// CreateTenant creates tenant name.
func (h *Host) CreateTenant(ctx context.Context, name string) (Tenant, error) {
	rs, err := h.run()
	if err != nil {
		return Tenant{}, err
	}
	tn, err := rs.store.CreateTenant(ctx, name)
	return Tenant{Name: tn.Name, Created: tn.CreatedAt.UTC()}, err
}

// Tenants lists the tenants by name.
func (h *Host) Tenants(ctx context.Context) ([]Tenant, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	tns, err := rs.store.ListTenants(ctx)
	out := make([]Tenant, len(tns))
	for i, tn := range tns {
		out[i] = Tenant{Name: tn.Name, Created: tn.CreatedAt.UTC()}
	}
	return out, err
}

// Key is an API key's record as the command line lists it: never the key,
// nor its hash.
type Key struct {
	ID       string     `json:"id"`
	Tenant   string     `json:"tenant"`
	Name     string     `json:"name"`
	Scopes   []string   `json:"scopes"`
	Created  time.Time  `json:"created"`
	LastUsed *time.Time `json:"last_used"`
	Revoked  *time.Time `json:"revoked"`
}

// Scopes are what an API key may be allowed to do.
var Scopes = auth.Scopes

// ParsesAsKey reports whether s is an API key (not a key's id).
func ParsesAsKey(s string) bool {
	_, err := auth.ParseKey(s)
	return err == nil
}

// CreateKey creates an API key of tenant, named name, allowed scopes, in
// the shape E2B's SDKs accept when e2b is set; it returns the key, shown
// only this once, and its record. A tenant that does not exist is a
// NoTenantError.
func (h *Host) CreateKey(ctx context.Context, tenant, name string, scopes []string, e2b bool) (string, Key, error) {
	rs, err := h.run()
	if err != nil {
		return "", Key{}, err
	}
	format := auth.FormatAirlock
	if e2b {
		format = auth.FormatE2B
	}
	key, meta, err := auth.NewKeys(rs.store, nil).Create(ctx, tenant, name, scopes, format)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return "", Key{}, &NoTenantError{Name: tenant}
	case errors.Is(err, store.ErrInvalid):
		return "", Key{}, &InputError{Err: err}
	case err != nil:
		return "", Key{}, err
	}
	return key, keyOf(meta), nil
}

// Keys lists tenant's keys (every tenant's when empty), by tenant, oldest
// first.
func (h *Host) Keys(ctx context.Context, tenant string) ([]Key, error) {
	rs, err := h.run()
	if err != nil {
		return nil, err
	}
	tenants := []string{tenant}
	if tenant == "" {
		all, err := rs.store.ListTenants(ctx)
		if err != nil {
			return nil, err
		}
		tenants = tenants[:0]
		for _, tn := range all {
			tenants = append(tenants, tn.Name)
		}
	}
	var keys []Key
	for _, tn := range tenants {
		ks, err := rs.store.ListAPIKeys(ctx, tn)
		if errors.Is(err, store.ErrNotFound) && tenant != "" {
			return nil, &NoTenantError{Name: tenant}
		}
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			keys = append(keys, keyOf(k))
		}
	}
	return keys, nil
}

// ErrNoKey reports a key id that is not the tenant's.
var ErrNoKey = store.ErrNotFound

// RevokeKey revokes tenant's key id (ErrNoKey when it is not the
// tenant's); revoking a revoked key succeeds.
func (h *Host) RevokeKey(ctx context.Context, tenant, id string) error {
	rs, err := h.run()
	if err != nil {
		return err
	}
	return rs.store.RevokeAPIKey(ctx, tenant, id)
}

func keyOf(k store.APIKey) Key {
	return Key{
		ID: k.ID, Tenant: k.Tenant, Name: k.Name, Scopes: k.Scopes, Created: k.CreatedAt.UTC(),
		LastUsed: optTime(k.LastUsedAt), Revoked: optTime(k.RevokedAt),
	}
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	u := t.UTC()
	return &u
}
