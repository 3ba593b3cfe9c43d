package auth_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// countingStore is a real store that counts the last-use writes Keys
// makes, and can be told to fail them.
type countingStore struct {
	store.Store
	touches  atomic.Int64
	failNext atomic.Bool
}

func (s *countingStore) TouchAPIKey(ctx context.Context, id string, at time.Time) error {
	if s.failNext.Swap(false) {
		return errors.New("disk on fire")
	}
	s.touches.Add(1)
	return s.Store.TouchAPIKey(ctx, id, at)
}

// setup opens a SQLite store in a temporary directory with tenants acme
// and globex, and Keys on it reading the returned clock.
func setup(t *testing.T) (*auth.Keys, *countingStore, *clock.Fake, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := sqlite.Open(context.Background(), filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	for _, name := range []string{"acme", "globex"} {
		if _, err := st.CreateTenant(context.Background(), name); err != nil {
			t.Fatal(err)
		}
	}
	c := clock.NewFake(time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC))
	cs := &countingStore{Store: st}
	return auth.NewKeys(cs, c.Now), cs, c, dir
}

func create(t *testing.T, k *auth.Keys, tenant string, scopes []string, f auth.Format) (string, store.APIKey) {
	t.Helper()
	key, meta, err := k.Create(context.Background(), tenant, "test key", scopes, f)
	if err != nil {
		t.Fatalf("Create(%s, %v, %s) = %v", tenant, scopes, f, err)
	}
	return key, meta
}

// TestCreateVerify: a new key has its format's shape, only its hash is
// stored, and it verifies as its tenant with its scopes.
func TestCreateVerify(t *testing.T) {
	tests := []struct {
		format auth.Format
		shape  *regexp.Regexp
	}{
		{auth.FormatAirlock, regexp.MustCompile(`^airlock_[0-9a-f]{48}$`)},
		{auth.FormatE2B, regexp.MustCompile(`^e2b_[0-9a-f]{48}$`)},
	}
	for _, tt := range tests {
		t.Run(string(tt.format), func(t *testing.T) {
			k, st, c, dir := setup(t)
			ctx := context.Background()
			key, meta := create(t, k, "acme", []string{auth.ScopeAdmin, auth.ScopeRunsRead}, tt.format)
			if !tt.shape.MatchString(key) {
				t.Fatalf("Create() key has the wrong shape (%d bytes)", len(key))
			}
			if f, err := auth.ParseKey(key); err != nil || f != tt.format {
				t.Fatalf("ParseKey(new key) = %q, %v, want %q", f, err, tt.format)
			}
			sum := sha256.Sum256([]byte(key))
			want := store.APIKey{
				ID: meta.ID, Tenant: "acme", Name: "test key", Scopes: []string{auth.ScopeRunsRead, auth.ScopeAdmin},
				Hash: sum[:], CreatedAt: c.Now(),
			}
			if !regexp.MustCompile(`^key_[0-9a-f]{16}$`).MatchString(meta.ID) || meta.Tenant != want.Tenant || meta.Name != want.Name ||
				!slices.Equal(meta.Scopes, want.Scopes) || !bytes.Equal(meta.Hash, want.Hash) || !meta.CreatedAt.Equal(want.CreatedAt) {
				t.Fatalf("Create() meta = %+v, want %+v (scopes in the order of auth.Scopes)", meta, want)
			}
			stored, err := st.ListAPIKeys(ctx, "acme")
			if err != nil || len(stored) != 1 || stored[0].ID != meta.ID || !bytes.Equal(stored[0].Hash, sum[:]) {
				t.Fatalf("ListAPIKeys(acme) = %+v, %v, want the new key with its hash", stored, err)
			}

			p, err := k.Verify(ctx, key)
			if err != nil || p.Tenant != "acme" || p.KeyID != meta.ID || !slices.Equal(p.Scopes, want.Scopes) {
				t.Fatalf("Verify(new key) = %+v, %v, want acme, %s, %v", p, err, meta.ID, want.Scopes)
			}
			if !p.Can(auth.ScopeSecretsWrite) {
				t.Fatalf("Verify(admin key).Can(%s) = false, want true (admin holds all)", auth.ScopeSecretsWrite)
			}

			// The key is in no file of the database, not even the WAL.
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			files, _ := filepath.Glob(filepath.Join(dir, "*"))
			for _, f := range files {
				b, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if bytes.Contains(b, []byte(key)) || bytes.Contains(b, []byte(key[strings.Index(key, "_")+1:])) {
					t.Fatalf("%s holds the key", filepath.Base(f))
				}
			}
		})
	}
}

// TestVerifyRefused: wrong, revoked, malformed and other-format keys are
// all ErrUnauthenticated, with a reason for the audit record, and no error
// holds what was presented.
func TestVerifyRefused(t *testing.T) {
	k, st, _, _ := setup(t)
	ctx := context.Background()
	live, _ := create(t, k, "acme", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	e2b, _ := create(t, k, "globex", []string{auth.ScopeRunsRead}, auth.FormatE2B)
	revoked, rmeta := create(t, k, "acme", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	if err := st.RevokeAPIKey(ctx, "acme", rmeta.ID); err != nil {
		t.Fatal(err)
	}
	// A key of a tenant whose deletion began (tenants delete --force).
	if _, err := st.CreateTenant(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	doomed, dmeta := create(t, k, "doomed", []string{auth.ScopeRunsRead}, auth.FormatE2B)
	if _, err := k.Verify(ctx, doomed); err != nil {
		t.Fatalf("Verify(doomed, before) = %v", err)
	}
	if _, err := st.MarkTenantDeleting(ctx, "doomed"); err != nil {
		t.Fatal(err)
	}
	liveHex := strings.TrimPrefix(live, "airlock_")
	e2bHex := strings.TrimPrefix(e2b, "e2b_")
	flip := func(s string) string { // the last hex digit changed
		last := s[len(s)-1]
		if last == '0' {
			return s[:len(s)-1] + "1"
		}
		return s[:len(s)-1] + "0"
	}
	tests := []struct {
		name, key, reason string
	}{
		{"wrong key", flip(live), "unknown"},
		{"wrong e2b key", flip(e2b), "unknown"},
		{"airlock body under the e2b prefix", "e2b_" + liveHex, "unknown"},
		{"e2b body under the airlock prefix", "airlock_" + e2bHex, "unknown"},
		{"revoked", revoked, "revoked"},
		{"tenant being deleted", doomed, auth.ReasonTenantDeleted},
		{"empty", "", "malformed"},
		{"prefix only", "airlock_", "malformed"},
		{"upper-case hex", "airlock_" + strings.ToUpper(liveHex), "malformed"},
		{"upper-case prefix", "AIRLOCK_" + liveHex, "malformed"},
		{"one digit short", live[:len(live)-1], "malformed"},
		{"one digit long", live + "0", "malformed"},
		{"trailing newline", live + "\n", "malformed"},
		{"leading space", " " + live, "malformed"},
		{"bearer scheme", "Bearer " + live, "malformed"},
		{"not hex", "airlock_" + strings.Repeat("g", 48), "malformed"},
		{"run token", "alk_" + strings.Repeat("A", 43), "malformed"},
		{"e2b short", "e2b_0123", "malformed"},
		{"huge", "airlock_" + strings.Repeat("0", 1<<20), "malformed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := k.Verify(ctx, tt.key)
			var ie *auth.InvalidKeyError
			if !errors.Is(err, auth.ErrUnauthenticated) || !errors.As(err, &ie) || ie.Reason != tt.reason || p.Tenant != "" {
				t.Fatalf("Verify(%s) = %+v, %v, want ErrUnauthenticated (%s)", tt.name, p, err, tt.reason)
			}
			if tt.reason == "revoked" && ie.KeyID != rmeta.ID {
				t.Fatalf("Verify(revoked) KeyID = %q, want %s", ie.KeyID, rmeta.ID)
			}
			if tt.reason == auth.ReasonTenantDeleted && ie.KeyID != dmeta.ID {
				t.Fatalf("Verify(tenant being deleted) KeyID = %q, want %s", ie.KeyID, dmeta.ID)
			}
			if got := auth.TenantDeleted(err); got != (tt.reason == auth.ReasonTenantDeleted) {
				t.Fatalf("TenantDeleted(Verify(%s)) = %v", tt.name, got)
			}
			if len(tt.key) >= 8 && strings.Contains(err.Error(), strings.TrimSpace(tt.key)) {
				t.Fatalf("Verify(%s) error %q holds the key", tt.name, err)
			}
			for _, secret := range []string{live, liveHex, e2bHex, revoked} {
				if strings.Contains(err.Error(), secret) {
					t.Fatalf("Verify(%s) error %q holds a key", tt.name, err)
				}
			}
		})
	}
	// The live keys still verify.
	for _, key := range []string{live, e2b} {
		if _, err := k.Verify(ctx, key); err != nil {
			t.Fatalf("Verify(live key) = %v", err)
		}
	}
}

// TestVerifyStoreDown: a store that fails is not "unauthenticated".
func TestVerifyStoreDown(t *testing.T) {
	k, st, _, _ := setup(t)
	key, _ := create(t, k, "acme", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	st.Close()
	_, err := k.Verify(context.Background(), key)
	if err == nil || errors.Is(err, auth.ErrUnauthenticated) || !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Verify(key, store closed) = %v, want a store error that is not ErrUnauthenticated", err)
	}
	if strings.Contains(err.Error(), key) || strings.Contains(err.Error(), key[8:]) {
		t.Fatalf("Verify() error %q holds the key", err)
	}
}

// TestCreateInvalid: bad input stores nothing and says what was wrong.
func TestCreateInvalid(t *testing.T) {
	k, st, _, _ := setup(t)
	ctx := context.Background()
	tests := []struct {
		name   string
		tenant string
		label  string
		scopes []string
		format auth.Format
		target error
		msg    string
	}{
		{"unknown scope", "acme", "x", []string{"runs:read", "runs:delete"}, auth.FormatAirlock, store.ErrInvalid, `unknown scope "runs:delete"`},
		{"no scopes", "acme", "x", nil, auth.FormatAirlock, store.ErrInvalid, "at least one scope"},
		{"scope twice", "acme", "x", []string{"admin", "admin"}, auth.FormatAirlock, store.ErrInvalid, "twice"},
		{"scope in upper case", "acme", "x", []string{"ADMIN"}, auth.FormatAirlock, store.ErrInvalid, "unknown scope"},
		{"unknown format", "acme", "x", []string{"admin"}, auth.Format("github"), store.ErrInvalid, "format"},
		{"empty format", "acme", "x", []string{"admin"}, "", store.ErrInvalid, "format"},
		{"unknown tenant", "umbrella", "x", []string{"admin"}, auth.FormatAirlock, store.ErrNotFound, "umbrella"},
		{"malformed tenant", "Acme Corp", "x", []string{"admin"}, auth.FormatAirlock, store.ErrInvalid, "tenant name"},
		{"label with newline", "acme", "a\nb", []string{"admin"}, auth.FormatAirlock, store.ErrInvalid, "name"},
		{"label too long", "acme", strings.Repeat("x", store.MaxKeyNameLen+1), []string{"admin"}, auth.FormatE2B, store.ErrInvalid, "name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			key, meta, err := k.Create(ctx, tt.tenant, tt.label, tt.scopes, tt.format)
			if !errors.Is(err, tt.target) || key != "" || meta.ID != "" || !strings.Contains(err.Error(), tt.msg) {
				t.Fatalf("Create(%s) = %q, %+v, %v; want no key and an error wrapping %v saying %q", tt.name, key, meta, err, tt.target, tt.msg)
			}
		})
	}
	for _, tenant := range []string{"acme", "globex"} {
		if got, err := st.ListAPIKeys(ctx, tenant); err != nil || len(got) != 0 {
			t.Fatalf("ListAPIKeys(%s) = %+v, %v, want none", tenant, got, err)
		}
	}
}

// TestLastUse: Verify records a key's use at most once a minute per key,
// and a failed record is retried on the next call.
func TestLastUse(t *testing.T) {
	k, st, c, _ := setup(t)
	ctx := context.Background()
	a, ameta := create(t, k, "acme", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	b, bmeta := create(t, k, "globex", []string{auth.ScopeRunsRead}, auth.FormatE2B)
	lastUse := func(meta store.APIKey) time.Time {
		t.Helper()
		got, err := st.APIKeyByHash(ctx, meta.Hash)
		if err != nil {
			t.Fatal(err)
		}
		return got.LastUsedAt
	}
	if !lastUse(ameta).IsZero() {
		t.Fatal("a new key has a last use")
	}
	t0 := c.Now()
	steps := []struct {
		advance time.Duration
		key     string
		touches int64     // total writes after this step
		aUse    time.Time // a's recorded last use after it
	}{
		{0, a, 1, t0},
		{0, a, 1, t0},
		{time.Second, a, 1, t0},
		{58 * time.Second, a, 1, t0}, // 59 s after the write
		{0, b, 2, t0},                // another key has its own minute
		{time.Second, a, 3, t0.Add(time.Minute)},
		{time.Second, a, 3, t0.Add(time.Minute)},
		{10 * time.Minute, a, 4, t0.Add(11*time.Minute + time.Second)},
	}
	for i, s := range steps {
		c.Advance(s.advance)
		if _, err := k.Verify(ctx, s.key); err != nil {
			t.Fatalf("step %d: Verify() = %v", i, err)
		}
		if got := st.touches.Load(); got != s.touches {
			t.Fatalf("step %d: %d last-use writes, want %d", i, got, s.touches)
		}
		if got := lastUse(ameta); !got.Equal(s.aUse) {
			t.Fatalf("step %d: a's last use = %v, want %v", i, got, s.aUse)
		}
	}
	if got := lastUse(bmeta); !got.Equal(t0.Add(59 * time.Second)) {
		t.Fatalf("b's last use = %v, want %v", got, t0.Add(59*time.Second))
	}

	// A failed write does not fail the request, and is retried at once.
	c.Advance(time.Hour)
	st.failNext.Store(true)
	if _, err := k.Verify(ctx, b); err != nil {
		t.Fatalf("Verify() with a failing last-use write = %v, want the principal", err)
	}
	if _, err := k.Verify(ctx, b); err != nil {
		t.Fatal(err)
	}
	if got := lastUse(bmeta); !got.Equal(c.Now()) {
		t.Fatalf("b's last use after a failed write and a retry = %v, want %v", got, c.Now())
	}
}

// TestLastUseConcurrent: many requests of one key at once write its last
// use once.
func TestLastUseConcurrent(t *testing.T) {
	k, st, _, _ := setup(t)
	key, _ := create(t, k, "acme", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	var wg sync.WaitGroup
	errs := make([]error, 32)
	for i := range errs {
		wg.Go(func() { _, errs[i] = k.Verify(context.Background(), key) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := st.touches.Load(); got != 1 {
		t.Fatalf("%d last-use writes for concurrent requests, want 1", got)
	}
}

// TestKeysDiffer: keys and ids are random.
func TestKeysDiffer(t *testing.T) {
	k, _, _, _ := setup(t)
	keys, ids := map[string]bool{}, map[string]bool{}
	for range 20 {
		key, meta := create(t, k, "acme", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
		if keys[key] || ids[meta.ID] {
			t.Fatal("Create() repeated a key or an id")
		}
		keys[key], ids[meta.ID] = true, true
	}
}

func TestValidateScopes(t *testing.T) {
	tests := []struct {
		scopes []string
		ok     bool
	}{
		{auth.Scopes, true},
		{[]string{"runs:read"}, true},
		{[]string{"admin", "runs:write"}, true},
		{nil, false},
		{[]string{}, false},
		{[]string{""}, false},
		{[]string{"runs"}, false},
		{[]string{"runs:read", "runs:read"}, false},
		{[]string{"runs:read "}, false},
	}
	for _, tt := range tests {
		err := auth.ValidateScopes(tt.scopes)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, store.ErrInvalid)) {
			t.Errorf("ValidateScopes(%q) = %v, want ok %v", tt.scopes, err, tt.ok)
		}
	}
}

func TestCan(t *testing.T) {
	tests := []struct {
		scopes []string
		scope  string
		want   bool
	}{
		{[]string{auth.ScopeRunsRead}, auth.ScopeRunsRead, true},
		{[]string{auth.ScopeRunsRead}, auth.ScopeRunsWrite, false},
		{[]string{auth.ScopeAdmin}, auth.ScopeSandboxes, true},
		{nil, auth.ScopeRunsRead, false},
	}
	for _, tt := range tests {
		if got := (auth.Principal{Tenant: "acme", Scopes: tt.scopes}).Can(tt.scope); got != tt.want {
			t.Errorf("Principal{Scopes: %v}.Can(%s) = %v, want %v", tt.scopes, tt.scope, got, tt.want)
		}
	}
}
