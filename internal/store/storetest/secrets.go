package storetest

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// sealed is a made-up sealed secret of tenant/name under key check kc.
func sealed(tenant, name string, kc byte, ct string, hosts ...string) store.SealedSecret {
	return store.SealedSecret{
		Tenant: tenant, Name: name, Hosts: hosts,
		Created: base, Updated: base.Add(time.Minute),
		KeyCheck: bytes.Repeat([]byte{kc}, 16), Nonce: bytes.Repeat([]byte{1}, 12), Ciphertext: []byte(ct),
	}
}

// testSecrets: a sealed secret is kept as given (hosts, times, key check,
// nonce, ciphertext), found by tenant and name alone, listed by name per
// tenant, replaced by a put of its name and deleted; a put under another
// key check than the stored secrets' is refused (ErrConflict) and stores
// nothing, and once none is left any key may start over; bad input is
// refused; a second handle (another server) sees the first's writes.
func testSecrets(t *testing.T, f Factory) {
	s := newStore(t, f)
	ctx := context.Background()
	put := func(sec store.SealedSecret) {
		t.Helper()
		if err := s.PutSecret(ctx, sec); err != nil {
			t.Fatalf("PutSecret(%s/%s) = %v", sec.Tenant, sec.Name, err)
		}
	}
	get := func(st store.Store, tenant, name string) store.SealedSecret {
		t.Helper()
		got, err := st.SealedSecret(ctx, tenant, name)
		if err != nil {
			t.Fatalf("SealedSecret(%s/%s) = %v", tenant, name, err)
		}
		return got
	}
	same := func(got, want store.SealedSecret) bool {
		return got.Tenant == want.Tenant && got.Name == want.Name && slices.Equal(got.Hosts, want.Hosts) &&
			got.Created.Equal(want.Created) && got.Updated.Equal(want.Updated) &&
			bytes.Equal(got.KeyCheck, want.KeyCheck) && bytes.Equal(got.Nonce, want.Nonce) && bytes.Equal(got.Ciphertext, want.Ciphertext)
	}

	a := sealed("acme", "github_token", 7, "sealed-a", "*.github.com", "api.github.com")
	b := sealed("acme", "aws", 7, "sealed-b")
	o := sealed("other", "github_token", 7, "sealed-o")
	for _, sec := range []store.SealedSecret{a, b, o} {
		put(sec)
	}
	if got := get(s, "acme", "github_token"); !same(got, a) {
		t.Errorf("SealedSecret = %+v, want %+v", got, a)
	}
	if got := get(s, "acme", "aws"); got.Hosts != nil || !same(got, b) {
		t.Errorf("SealedSecret(aws) = %+v (hosts %#v), want %+v, nil hosts", got, got.Hosts, b)
	}
	list, err := s.ListSecrets(ctx, "acme")
	if err != nil || len(list) != 2 || list[0].Name != "aws" || list[1].Name != "github_token" {
		t.Fatalf("ListSecrets(acme) = %+v, %v; want aws, github_token", list, err)
	}
	if list, err := s.ListSecrets(ctx, "nobody"); err != nil || len(list) != 0 {
		t.Errorf("ListSecrets(nobody) = %+v, %v; want none", list, err)
	}
	if _, err := s.SealedSecret(ctx, "other", "aws"); !isNotFound(err) {
		t.Errorf("SealedSecret(other/aws) = %v, want ErrNotFound (another tenant's name)", err)
	}

	// Another server on the database sees it, and its put replaces.
	if f.Reopen != nil {
		s2 := reopen(t, f, s)
		if got := get(s2, "other", "github_token"); !same(got, o) {
			t.Errorf("the second handle's SealedSecret = %+v, want %+v", got, o)
		}
		a2 := sealed("acme", "github_token", 7, "sealed-a2")
		a2.Updated = base.Add(time.Hour)
		if err := s2.PutSecret(ctx, a2); err != nil {
			t.Fatalf("second handle's PutSecret = %v", err)
		}
		if got := get(s, "acme", "github_token"); !same(got, a2) {
			t.Errorf("after the second handle's put, SealedSecret = %+v, want %+v", got, a2)
		}
	}

	// One store, one key.
	wrong := sealed("acme", "new", 9, "sealed-new")
	if err := s.PutSecret(ctx, wrong); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutSecret under another key check = %v, want ErrConflict", err)
	}
	if _, err := s.SealedSecret(ctx, "acme", "new"); !isNotFound(err) {
		t.Errorf("the refused put stored something: %v", err)
	}

	for _, bad := range []store.SealedSecret{
		{},
		func() store.SealedSecret { x := a; x.Tenant = ""; return x }(),
		func() store.SealedSecret { x := a; x.Name = ""; return x }(),
		func() store.SealedSecret { x := a; x.KeyCheck = nil; return x }(),
		func() store.SealedSecret { x := a; x.Nonce = nil; return x }(),
		func() store.SealedSecret { x := a; x.Ciphertext = nil; return x }(),
		func() store.SealedSecret { x := a; x.Hosts = []string{""}; return x }(),
		func() store.SealedSecret { x := a; x.Updated = x.Created.Add(-time.Second); return x }(),
	} {
		if err := s.PutSecret(ctx, bad); !errors.Is(err, store.ErrInvalid) {
			t.Errorf("PutSecret(%+v) = %v, want ErrInvalid", bad, err)
		}
	}

	if err := s.DeleteSecret(ctx, "acme", "aws"); err != nil {
		t.Fatalf("DeleteSecret = %v", err)
	}
	if err := s.DeleteSecret(ctx, "acme", "aws"); !isNotFound(err) {
		t.Errorf("second DeleteSecret = %v, want ErrNotFound", err)
	}
	if _, err := s.SealedSecret(ctx, "acme", "aws"); !isNotFound(err) {
		t.Errorf("SealedSecret after delete = %v, want ErrNotFound", err)
	}
	for _, sec := range [][2]string{{"acme", "github_token"}, {"other", "github_token"}} {
		if err := s.DeleteSecret(ctx, sec[0], sec[1]); err != nil {
			t.Fatalf("DeleteSecret(%v) = %v", sec, err)
		}
	}
	// Empty: a new key may start over.
	put(wrong)
	if err := s.PutSecret(ctx, a); !errors.Is(err, store.ErrConflict) {
		t.Errorf("PutSecret under the old key after the new one started = %v, want ErrConflict", err)
	}
}

// testSecretKeyRace: on an empty store, servers putting under two keys at
// once leave secrets of one key only.
func testSecretKeyRace(t *testing.T, f Factory) {
	s := newStore(t, f)
	stores := []store.Store{s, s}
	if f.Reopen != nil {
		stores[1] = reopen(t, f, s)
	}
	const n = 8
	var wg sync.WaitGroup
	for w, h := range stores {
		for i := range n {
			wg.Go(func() {
				name := string(rune('a'+w)) + string(rune('a'+i))
				_ = h.PutSecret(context.Background(), sealed("acme", name, byte(w+1), "x"))
			})
		}
	}
	wg.Wait()
	list, err := s.ListSecrets(context.Background(), "acme")
	if err != nil || len(list) == 0 {
		t.Fatalf("ListSecrets = %d, %v; want some", len(list), err)
	}
	for _, sec := range list {
		if !bytes.Equal(sec.KeyCheck, list[0].KeyCheck) {
			t.Fatalf("secrets of two keys stored: %s has %x, %s %x", sec.Name, sec.KeyCheck, list[0].Name, list[0].KeyCheck)
		}
	}
}
