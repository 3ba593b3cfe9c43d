package storetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// keyHash is the hash of a made-up key string; the store never sees keys.
func keyHash(key string) []byte {
	h := sha256.Sum256([]byte(key))
	return h[:]
}

// keyID returns a valid key id for i.
func keyID(i int) string { return fmt.Sprintf("%s%016x", store.APIKeyIDPrefix, i) }

func newKey(tenant string, i int) store.APIKey {
	return store.APIKey{
		ID:     keyID(i),
		Tenant: tenant,
		Name:   fmt.Sprintf("key %d", i),
		Scopes: []string{"runs:read", "runs:write"},
		Hash:   keyHash(fmt.Sprintf("airlock_key%d", i)),
	}
}

func createTenant(t *testing.T, s store.Store, name string) store.Tenant {
	t.Helper()
	tn, err := s.CreateTenant(context.Background(), name)
	if err != nil {
		t.Fatalf("CreateTenant(%q) = %v", name, err)
	}
	return tn
}

func createKey(t *testing.T, s store.Store, k store.APIKey) {
	t.Helper()
	if err := s.CreateAPIKey(context.Background(), k); err != nil {
		t.Fatalf("CreateAPIKey(%s) = %v", k.ID, err)
	}
}

func sameKey(a, b store.APIKey) bool {
	return a.ID == b.ID && a.Tenant == b.Tenant && a.Name == b.Name && slices.Equal(a.Scopes, b.Scopes) &&
		bytes.Equal(a.Hash, b.Hash) && a.CreatedAt.Equal(b.CreatedAt) && a.LastUsedAt.Equal(b.LastUsedAt) &&
		a.RevokedAt.Equal(b.RevokedAt)
}

func keyByHash(t *testing.T, s store.Store, hash []byte) store.APIKey {
	t.Helper()
	k, err := s.APIKeyByHash(context.Background(), hash)
	if err != nil {
		t.Fatalf("APIKeyByHash() = %v", err)
	}
	return k
}

func wantKeys(t *testing.T, s store.Store, tenant string, want ...store.APIKey) {
	t.Helper()
	got, err := s.ListAPIKeys(context.Background(), tenant)
	if err != nil || len(got) != len(want) {
		t.Fatalf("ListAPIKeys(%s) = %+v, %v, want %d keys", tenant, got, err, len(want))
	}
	for i := range got {
		if !sameKey(got[i], want[i]) {
			t.Fatalf("ListAPIKeys(%s)[%d] = %+v, want %+v", tenant, i, got[i], want[i])
		}
	}
}

func wantTenants(t *testing.T, s store.Store, want ...store.Tenant) {
	t.Helper()
	got, err := s.ListTenants(context.Background())
	if err != nil || len(got) != len(want) {
		t.Fatalf("ListTenants() = %+v, %v, want %d tenants", got, err, len(want))
	}
	for i := range got {
		if got[i].Name != want[i].Name || !got[i].CreatedAt.Equal(want[i].CreatedAt) || got[i].CreatedAt.Location() != time.UTC {
			t.Fatalf("ListTenants()[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// testTenants: tenants are created once, read back, and listed by name;
// malformed names are refused and store nothing.
func testTenants(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	wantTenants(t, s)

	acme := createTenant(t, s, "acme")
	if acme.Name != "acme" || !acme.CreatedAt.Equal(clock.Now()) || acme.CreatedAt.Location() != time.UTC {
		t.Fatalf("CreateTenant(acme) = %+v, want CreatedAt %v in UTC", acme, clock.Now())
	}
	clock.Advance(time.Minute)
	_, err := s.CreateTenant(ctx, "acme")
	wantErr(t, "CreateTenant(acme) again", err, store.ErrExists)
	if got, err := s.GetTenant(ctx, "acme"); err != nil || got.Name != "acme" || !got.CreatedAt.Equal(acme.CreatedAt) {
		t.Fatalf("GetTenant(acme) = %+v, %v, want %+v (the second create changed nothing)", got, err, acme)
	}

	var made []store.Tenant
	for _, name := range []string{"local", "0", "a", strings.Repeat("z", store.MaxTenantNameLen), "a-b-", "9lives", "b--c"} {
		clock.Advance(time.Second)
		made = append(made, createTenant(t, s, name))
	}
	made = append(made, acme)
	slices.SortFunc(made, func(a, b store.Tenant) int { return strings.Compare(a.Name, b.Name) })
	wantTenants(t, s, made...)

	_, err = s.GetTenant(ctx, "initech")
	wantErr(t, "GetTenant(initech)", err, store.ErrNotFound)

	for _, name := range []string{
		"", "-acme", "Acme", "ACME", "acme corp", "acme.io", "acme_io", "acme@x", "a/b", "pröd", "a\x00",
		strings.Repeat("a", store.MaxTenantNameLen+1), " acme", "acme\n",
	} {
		_, err := s.CreateTenant(ctx, name)
		wantErr(t, fmt.Sprintf("CreateTenant(%q)", name), err, store.ErrInvalid)
		if !strings.Contains(err.Error(), "tenant name") {
			t.Fatalf("CreateTenant(%q) = %v, want it to say what a tenant name is", name, err)
		}
		_, err = s.GetTenant(ctx, name)
		wantErr(t, fmt.Sprintf("GetTenant(%q)", name), err, store.ErrInvalid)
		_, err = s.ListAPIKeys(ctx, name)
		wantErr(t, fmt.Sprintf("ListAPIKeys(%q)", name), err, store.ErrInvalid)
	}
	wantTenants(t, s, made...)
}

// testTenantRace: one name created at once through several handles, as
// several processes would, exists once: one create succeeds, the others
// get ErrExists.
func testTenantRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	handles := []store.Store{s}
	if f.Reopen != nil {
		handles = append(handles, reopen(t, f, s))
	}
	const n = 12
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		h := handles[i%len(handles)]
		wg.Go(func() { _, errs[i] = h.CreateTenant(context.Background(), "busy") })
	}
	wg.Wait()
	ok := 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case !errors.Is(err, store.ErrExists):
			t.Fatalf("concurrent CreateTenant = %v, want nil or ErrExists", err)
		}
	}
	if ok != 1 {
		t.Fatalf("concurrent CreateTenant: %d succeeded, want 1 (%v)", ok, errs)
	}
	for _, h := range handles {
		if got, err := h.ListTenants(context.Background()); err != nil || len(got) != 1 || got[0].Name != "busy" {
			t.Fatalf("ListTenants() = %+v, %v, want busy once", got, err)
		}
	}
}

// testAPIKeys: keys are stored as given (but the hash only), found by
// hash, listed per tenant, revoked and touched; no call reaches another
// tenant's key.
func testAPIKeys(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	createTenant(t, s, "acme")
	createTenant(t, s, "globex")
	createTenant(t, s, "initech")

	// A key without a creation time gets the store's; one with a time
	// keeps it.
	a1 := newKey("acme", 1)
	a1.Scopes = []string{"runs:write", "admin"} // order is kept
	createKey(t, s, a1)
	a1.CreatedAt = clock.Now()
	got := keyByHash(t, s, a1.Hash)
	if !sameKey(got, a1) || got.CreatedAt.Location() != time.UTC || !got.LastUsedAt.IsZero() || got.Revoked() {
		t.Fatalf("APIKeyByHash(a1) = %+v, want %+v", got, a1)
	}
	a2 := newKey("acme", 2)
	a2.CreatedAt = base.Add(2 * time.Hour).In(time.FixedZone("X", 3600))
	a2.Name = ""
	createKey(t, s, a2)
	a2.CreatedAt = a2.CreatedAt.UTC()
	if got := keyByHash(t, s, a2.Hash); !sameKey(got, a2) || got.CreatedAt.Location() != time.UTC {
		t.Fatalf("APIKeyByHash(a2) = %+v, want %+v", got, a2)
	}
	g1 := newKey("globex", 3)
	g1.Name = "CI — deploys ✓"
	g1.Scopes = []string{"sandboxes"}
	g1.CreatedAt = base
	createKey(t, s, g1)

	// Oldest first, per tenant.
	wantKeys(t, s, "acme", a1, a2)
	wantKeys(t, s, "globex", g1)
	wantKeys(t, s, "initech")
	_, err := s.ListAPIKeys(ctx, "umbrella")
	wantErr(t, "ListAPIKeys(umbrella)", err, store.ErrNotFound)

	// Taken ids and hashes; unknown tenants. Nothing is stored.
	dupID := newKey("acme", 1)
	dupID.Hash = keyHash("another")
	dupHash := newKey("globex", 9)
	dupHash.Hash = a1.Hash
	for _, tt := range []struct {
		name   string
		k      store.APIKey
		target error
	}{
		{"taken id", dupID, store.ErrExists},
		{"taken id, other tenant", func() store.APIKey { k := dupID; k.Tenant = "globex"; return k }(), store.ErrExists},
		{"taken hash", dupHash, store.ErrExists},
		{"unknown tenant", func() store.APIKey { k := newKey("umbrella", 10); return k }(), store.ErrNotFound},
	} {
		err := s.CreateAPIKey(ctx, tt.k)
		wantErr(t, "CreateAPIKey("+tt.name+")", err, tt.target)
	}
	wantKeys(t, s, "acme", a1, a2)
	wantKeys(t, s, "globex", g1)
	_, err = s.APIKeyByHash(ctx, keyHash("another"))
	wantErr(t, "APIKeyByHash(never stored)", err, store.ErrNotFound)
	if err != nil && strings.Contains(err.Error(), fmt.Sprintf("%x", keyHash("another"))) {
		t.Fatalf("APIKeyByHash() = %v, quotes the hash", err)
	}

	// Revocation: by the key's tenant only; another tenant's attempt looks
	// like an unknown id and changes nothing.
	clock.Advance(time.Minute)
	for _, tt := range []struct{ tenant, id string }{
		{"globex", a1.ID},
		{"initech", a1.ID},
		{"acme", g1.ID},
		{"acme", keyID(99)},
	} {
		err := s.RevokeAPIKey(ctx, tt.tenant, tt.id)
		wantErr(t, fmt.Sprintf("RevokeAPIKey(%s, %s)", tt.tenant, tt.id), err, store.ErrNotFound)
	}
	wantKeys(t, s, "acme", a1, a2)
	if err := s.RevokeAPIKey(ctx, "acme", a1.ID); err != nil {
		t.Fatalf("RevokeAPIKey(acme, a1) = %v", err)
	}
	a1.RevokedAt = clock.Now()
	clock.Advance(time.Minute)
	if err := s.RevokeAPIKey(ctx, "acme", a1.ID); err != nil {
		t.Fatalf("RevokeAPIKey(acme, a1) again = %v", err)
	}
	// Still found by hash (the caller refuses it), with the first time.
	if got := keyByHash(t, s, a1.Hash); !sameKey(got, a1) || !got.Revoked() {
		t.Fatalf("APIKeyByHash(revoked a1) = %+v, want %+v", got, a1)
	}
	wantKeys(t, s, "acme", a1, a2)
	wantKeys(t, s, "globex", g1)

	// Last use only moves forward; any key, live or not, may be touched.
	t1 := base.Add(3 * time.Hour).In(time.FixedZone("Y", -7200))
	for _, tt := range []struct {
		at, want time.Time
	}{
		{t1, t1},
		{t1.Add(-time.Second), t1},
		{t1, t1},
		{t1.Add(time.Nanosecond), t1.Add(time.Nanosecond)},
	} {
		if err := s.TouchAPIKey(ctx, a2.ID, tt.at); err != nil {
			t.Fatalf("TouchAPIKey(a2, %v) = %v", tt.at, err)
		}
		if got := keyByHash(t, s, a2.Hash); !got.LastUsedAt.Equal(tt.want) || got.LastUsedAt.Location() != time.UTC {
			t.Fatalf("after TouchAPIKey(a2, %v): LastUsedAt = %v, want %v in UTC", tt.at, got.LastUsedAt, tt.want)
		}
	}
	a2.LastUsedAt = t1.Add(time.Nanosecond).UTC()
	if err := s.TouchAPIKey(ctx, a1.ID, t1); err != nil {
		t.Fatalf("TouchAPIKey(revoked a1) = %v", err)
	}
	a1.LastUsedAt = t1.UTC()
	wantKeys(t, s, "acme", a1, a2)
	wantKeys(t, s, "globex", g1)
	err = s.TouchAPIKey(ctx, keyID(99), t1)
	wantErr(t, "TouchAPIKey(unknown)", err, store.ErrNotFound)
}

// testAPIKeyInvalid: each malformed key or argument is refused with
// ErrInvalid, and nothing is written.
func testAPIKeyInvalid(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	createTenant(t, s, "acme")
	good := newKey("acme", 1)
	with := func(edit func(*store.APIKey)) store.APIKey {
		k := good
		k.Scopes = slices.Clone(good.Scopes)
		edit(&k)
		return k
	}
	tests := []struct {
		name string
		msg  string // the error says this
		k    store.APIKey
	}{
		{"no id", "API key id", with(func(k *store.APIKey) { k.ID = "" })},
		{"id without prefix", "API key id", with(func(k *store.APIKey) { k.ID = "0123456789abcdef" })},
		{"id too short", "API key id", with(func(k *store.APIKey) { k.ID = "key_0123456789abcde" })},
		{"id too long", "API key id", with(func(k *store.APIKey) { k.ID = "key_0123456789abcdef0" })},
		{"id upper case", "API key id", with(func(k *store.APIKey) { k.ID = "key_0123456789ABCDEF" })},
		{"id not hex", "API key id", with(func(k *store.APIKey) { k.ID = "key_0123456789abcdeg" })},
		{"id prefix upper case", "API key id", with(func(k *store.APIKey) { k.ID = "KEY_0123456789abcdef" })},
		{"no tenant", "tenant name", with(func(k *store.APIKey) { k.Tenant = "" })},
		{"malformed tenant", "tenant name", with(func(k *store.APIKey) { k.Tenant = "Acme" })},
		{"no scopes", "scopes", with(func(k *store.APIKey) { k.Scopes = nil })},
		{"too many scopes", "scopes", with(func(k *store.APIKey) {
			k.Scopes = nil
			for i := range store.MaxScopes + 1 {
				k.Scopes = append(k.Scopes, fmt.Sprintf("s%d", i))
			}
		})},
		{"empty scope", "scope", with(func(k *store.APIKey) { k.Scopes = []string{""} })},
		{"scope with space", "scope", with(func(k *store.APIKey) { k.Scopes = []string{"runs read"} })},
		{"scope upper case", "scope", with(func(k *store.APIKey) { k.Scopes = []string{"Admin"} })},
		{"scope starting with a digit", "scope", with(func(k *store.APIKey) { k.Scopes = []string{"1runs"} })},
		{"scope too long", "scope", with(func(k *store.APIKey) { k.Scopes = []string{strings.Repeat("s", store.MaxScopeLen+1)} })},
		{"scope twice", "twice", with(func(k *store.APIKey) { k.Scopes = []string{"admin", "runs:read", "admin"} })},
		{"no hash", "hash", with(func(k *store.APIKey) { k.Hash = nil })},
		{"short hash", "hash", with(func(k *store.APIKey) { k.Hash = k.Hash[:31] })},
		{"long hash", "hash", with(func(k *store.APIKey) { k.Hash = append(slices.Clone(k.Hash), 0) })},
		{"name too long", "name", with(func(k *store.APIKey) { k.Name = strings.Repeat("é", store.MaxKeyNameLen+1) })},
		{"name with newline", "name", with(func(k *store.APIKey) { k.Name = "a\nb" })},
		{"name with escape", "name", with(func(k *store.APIKey) { k.Name = "a\x1b[2Jb" })},
		{"name not UTF-8", "name", with(func(k *store.APIKey) { k.Name = "a\xffb" })},
		{"already used", "last use", with(func(k *store.APIKey) { k.LastUsedAt = base })},
		{"already revoked", "revoked", with(func(k *store.APIKey) { k.RevokedAt = base })},
		{"created out of range", "out of range", with(func(k *store.APIKey) { k.CreatedAt = time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := s.CreateAPIKey(ctx, tt.k)
			wantErr(t, "CreateAPIKey("+tt.name+")", err, store.ErrInvalid)
			if !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("CreateAPIKey(%s) = %v, want it to say %q", tt.name, err, tt.msg)
			}
		})
	}
	wantKeys(t, s, "acme")

	// The edges of what is valid.
	edge := with(func(k *store.APIKey) {
		k.Name = strings.Repeat("é", store.MaxKeyNameLen)
		k.Scopes = nil
		for i := range store.MaxScopes {
			k.Scopes = append(k.Scopes, fmt.Sprintf("s%d:x_y-z", i))
		}
		k.Scopes[0] = strings.Repeat("s", store.MaxScopeLen)
	})
	createKey(t, s, edge)
	if got := keyByHash(t, s, edge.Hash); got.Name != edge.Name || !slices.Equal(got.Scopes, edge.Scopes) {
		t.Fatalf("APIKeyByHash(edge) = %+v, want %+v", got, edge)
	}

	for _, h := range [][]byte{nil, {}, make([]byte, 31), make([]byte, 33), []byte(strings.Repeat("a", 64))} {
		_, err := s.APIKeyByHash(ctx, h)
		wantErr(t, fmt.Sprintf("APIKeyByHash(%d bytes)", len(h)), err, store.ErrInvalid)
	}
	for _, tt := range []struct{ tenant, id string }{
		{"", good.ID},
		{"Acme", good.ID},
		{"acme", ""},
		{"acme", "key_"},
		{"acme", strings.ToUpper(good.ID)},
		{"acme", good.ID + "0"},
		{"acme", "airlock_" + strings.Repeat("0", 48)},
	} {
		err := s.RevokeAPIKey(ctx, tt.tenant, tt.id)
		wantErr(t, fmt.Sprintf("RevokeAPIKey(%q, %q)", tt.tenant, tt.id), err, store.ErrInvalid)
		if tt.tenant == "acme" {
			err := s.TouchAPIKey(ctx, tt.id, base)
			wantErr(t, fmt.Sprintf("TouchAPIKey(%q)", tt.id), err, store.ErrInvalid)
		}
	}
	for _, at := range []time.Time{{}, time.Date(1500, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2300, 1, 1, 0, 0, 0, 0, time.UTC)} {
		err := s.TouchAPIKey(ctx, edge.ID, at)
		wantErr(t, fmt.Sprintf("TouchAPIKey(%v)", at), err, store.ErrInvalid)
	}
	if got := keyByHash(t, s, edge.Hash); !got.LastUsedAt.IsZero() || got.Revoked() {
		t.Fatalf("after refused calls: %+v, want never used, live", got)
	}
}

// testAPIKeyHandles: what one handle writes, another (a second process)
// reads, and concurrent touches leave the latest time.
func testAPIKeyHandles(t *testing.T, f Factory) {
	s := newStore(t, f)
	s2 := reopen(t, f, s)
	ctx := context.Background()
	createTenant(t, s, "acme")
	if _, err := s2.GetTenant(ctx, "acme"); err != nil {
		t.Fatalf("GetTenant(acme) through a second handle = %v", err)
	}
	k := newKey("acme", 1)
	k.CreatedAt = base
	createKey(t, s2, k)
	if got := keyByHash(t, s, k.Hash); !sameKey(got, k) {
		t.Fatalf("APIKeyByHash() through the first handle = %+v, want %+v", got, k)
	}
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		h := []store.Store{s, s2}[i%2]
		wg.Go(func() { errs[i] = h.TouchAPIKey(ctx, k.ID, base.Add(time.Duration(i+1)*time.Second)) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := keyByHash(t, s2, k.Hash); !got.LastUsedAt.Equal(base.Add(n * time.Second)) {
		t.Fatalf("LastUsedAt after concurrent touches = %v, want the latest, %v", got.LastUsedAt, base.Add(n*time.Second))
	}
	if err := s2.RevokeAPIKey(ctx, "acme", k.ID); err != nil {
		t.Fatal(err)
	}
	if got := keyByHash(t, s, k.Hash); !got.Revoked() {
		t.Fatalf("APIKeyByHash() after a revocation through another handle = %+v, want revoked", got)
	}
}

// testAPIKeyRedaction: a key's name is redacted like a ledger note.
func testAPIKeyRedaction(t *testing.T, f Factory) {
	s := open(t, f, redactor{Secret})
	createTenant(t, s, "acme")
	k := newKey("acme", 1)
	k.Name = "deploy " + Secret
	createKey(t, s, k)
	if got := keyByHash(t, s, k.Hash); got.Name != "deploy [redacted]" {
		t.Fatalf("APIKeyByHash().Name = %q, want the secret redacted", got.Name)
	}
}
