package storetest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// sessionHash is the hash of made-up session id n.
func sessionHash(n int) []byte {
	h := sha256.Sum256(fmt.Appendf(nil, "session %d", n))
	return h[:]
}

// testUISessions: a session is found by its hash alone, with its key's
// scopes, until it expires (then it is gone); uses move forward only; a
// logout, its key's revocation and its tenant's deletion (begun or done)
// end it, and a revoked key or a tenant being deleted cannot log in; a
// key keeps at most max sessions, losing the least recently used; the
// sweep deletes the expired ones of every key; bad input changes nothing.
func testUISessions(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	for _, tn := range []string{"acme", "other"} {
		createTenant(t, s, tn)
	}
	k1, k2, ko := newKey("acme", 1), newKey("acme", 2), newKey("other", 3)
	for _, k := range []store.APIKey{k1, k2, ko} {
		createKey(t, s, k)
	}
	now := clock.Now()
	sess := func(n int, k store.APIKey, created time.Time, life time.Duration) store.UISession {
		return store.UISession{Hash: sessionHash(n), Tenant: k.Tenant, KeyID: k.ID, Created: created, Used: created, Expires: created.Add(life)}
	}
	create := func(u store.UISession, most int) {
		t.Helper()
		if err := s.CreateUISession(ctx, u, most); err != nil {
			t.Fatalf("CreateUISession(%x) = %v", u.Hash[:4], err)
		}
	}
	live := func(n int, at time.Time) bool {
		t.Helper()
		_, err := s.UISession(ctx, sessionHash(n), at)
		if err != nil && !isNotFound(err) {
			t.Fatalf("UISession(%d) = %v", n, err)
		}
		return err == nil
	}

	create(sess(1, k1, now, time.Hour), 10)
	got, err := s.UISession(ctx, sessionHash(1), now)
	if err != nil || got.Tenant != "acme" || got.KeyID != k1.ID || !slices.Equal(got.Scopes, k1.Scopes) ||
		!got.Created.Equal(now) || !got.Used.Equal(now) || !got.Expires.Equal(now.Add(time.Hour)) {
		t.Fatalf("UISession(1) = %+v, %v; want acme's %s with scopes %v, created and used %v, expiring an hour on", got, err, k1.ID, k1.Scopes, now)
	}
	wantErr(t, "CreateUISession(same hash)", s.CreateUISession(ctx, sess(1, k2, now, time.Hour), 10), store.ErrExists)
	wantErr(t, "UISession(unknown)", func() error { _, err := s.UISession(ctx, sessionHash(99), now); return err }(), store.ErrNotFound)

	// Expiry is the caller's Expires, checked against the caller's now.
	if !live(1, now.Add(time.Hour-time.Nanosecond)) {
		t.Fatal("a session ended before its expiry")
	}
	// A touch moves use and expiry forward, never back.
	if err := s.TouchUISession(ctx, sessionHash(1), now.Add(30*time.Minute), now.Add(90*time.Minute)); err != nil {
		t.Fatalf("TouchUISession() = %v", err)
	}
	if err := s.TouchUISession(ctx, sessionHash(1), now.Add(10*time.Minute), now.Add(70*time.Minute)); err != nil {
		t.Fatalf("TouchUISession(older) = %v", err)
	}
	if got, err := s.UISession(ctx, sessionHash(1), now); err != nil || !got.Used.Equal(now.Add(30*time.Minute)) || !got.Expires.Equal(now.Add(90*time.Minute)) {
		t.Fatalf("after touches, UISession(1) = %+v, %v; want used +30m, expiring +90m", got, err)
	}
	if live(1, now.Add(90*time.Minute)) {
		t.Fatal("a session is live at its expiry")
	}
	if live(1, now) {
		t.Fatal("an expired session found was not deleted")
	}
	wantErr(t, "TouchUISession(gone)", s.TouchUISession(ctx, sessionHash(1), now.Add(time.Hour), now.Add(2*time.Hour)), store.ErrNotFound)

	// Logout.
	create(sess(2, k1, now, time.Hour), 10)
	if err := s.DeleteUISession(ctx, sessionHash(2)); err != nil {
		t.Fatalf("DeleteUISession() = %v", err)
	}
	if live(2, now) {
		t.Fatal("a session outlived its logout")
	}
	wantErr(t, "DeleteUISession(again)", s.DeleteUISession(ctx, sessionHash(2)), store.ErrNotFound)

	// A key's revocation ends its sessions, not another key's; a revoked
	// key cannot log in.
	create(sess(3, k1, now, time.Hour), 10)
	create(sess(4, k2, now, time.Hour), 10)
	create(sess(5, ko, now, time.Hour), 10)
	if err := s.RevokeAPIKey(ctx, "acme", k1.ID); err != nil {
		t.Fatal(err)
	}
	if live(3, now) || !live(4, now) || !live(5, now) {
		t.Fatalf("after k1's revocation, sessions 3, 4, 5 live = %v, %v, %v; want false, true, true", live(3, now), live(4, now), live(5, now))
	}
	wantErr(t, "CreateUISession(revoked key)", s.CreateUISession(ctx, sess(6, k1, now, time.Hour), 10), store.ErrNotFound)
	wantErr(t, "CreateUISession(another tenant's key)", s.CreateUISession(ctx, store.UISession{
		Hash: sessionHash(6), Tenant: "acme", KeyID: ko.ID, Created: now, Used: now, Expires: now.Add(time.Hour),
	}, 10), store.ErrNotFound)
	wantErr(t, "CreateUISession(no such key)", s.CreateUISession(ctx, sess(6, newKey("acme", 9), now, time.Hour), 10), store.ErrNotFound)
	if live(6, now) {
		t.Fatal("a refused login left a session")
	}

	// Bad input.
	for _, bad := range []store.UISession{
		{Hash: []byte("short"), Tenant: "acme", KeyID: k2.ID, Created: now, Used: now, Expires: now.Add(time.Hour)},
		{Hash: sessionHash(7), Tenant: "", KeyID: k2.ID, Created: now, Used: now, Expires: now.Add(time.Hour)},
		{Hash: sessionHash(7), Tenant: "acme", KeyID: "nokey", Created: now, Used: now, Expires: now.Add(time.Hour)},
		{Hash: sessionHash(7), Tenant: "acme", KeyID: k2.ID, Created: now, Used: now, Expires: now},
		{Hash: sessionHash(7), Tenant: "acme", KeyID: k2.ID, Created: now, Used: now.Add(-time.Second), Expires: now.Add(time.Hour)},
		{Hash: sessionHash(7), Tenant: "acme", KeyID: k2.ID},
	} {
		wantErr(t, fmt.Sprintf("CreateUISession(%+v)", bad), s.CreateUISession(ctx, bad, 10), store.ErrInvalid)
	}
	if live(7, now) {
		t.Fatal("a refused session was stored")
	}

	// At most max per key: the least recently used goes first; expired
	// ones go before counting. Key k2 has session 4 (used now).
	create(sess(10, k2, now.Add(time.Minute), time.Hour), 3)
	create(sess(11, k2, now.Add(2*time.Minute), time.Hour), 3)
	if err := s.TouchUISession(ctx, sessionHash(4), now.Add(3*time.Minute), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	create(sess(12, k2, now.Add(4*time.Minute), time.Hour), 3) // 10 was used least recently
	at := now.Add(5 * time.Minute)
	if l := []bool{live(4, at), live(10, at), live(11, at), live(12, at)}; !slices.Equal(l, []bool{true, false, true, true}) {
		t.Fatalf("sessions 4, 10, 11, 12 live = %v; want the least recently used (10) gone", l)
	}
	create(sess(13, k2, now.Add(5*time.Minute), time.Minute), 10)
	create(sess(14, ko, now.Add(5*time.Minute), time.Minute), 10)

	// The sweep deletes what expired, of every key.
	n, err := s.ExpireUISessions(ctx, now.Add(6*time.Minute))
	if err != nil || n != 2 {
		t.Fatalf("ExpireUISessions(+6m) = %d, %v; want 2 (13 and 14)", n, err)
	}
	if n, err := s.ExpireUISessions(ctx, now.Add(6*time.Minute)); err != nil || n != 0 {
		t.Fatalf("ExpireUISessions(again) = %d, %v; want 0", n, err)
	}
	if !live(11, now.Add(6*time.Minute)) || !live(5, now.Add(6*time.Minute)) {
		t.Fatal("the sweep deleted live sessions")
	}

	// A tenant whose deletion began has no live session and no login;
	// its deletion deletes its rows.
	if _, err := s.MarkTenantDeleting(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if live(11, now) {
		t.Fatal("a session of a tenant being deleted is live")
	}
	wantErr(t, "CreateUISession(tenant being deleted)", s.CreateUISession(ctx, sess(15, k2, now, time.Hour), 10), store.ErrNotFound)
	create(sess(16, ko, now, time.Hour), 10)
	if _, _, err := s.DeleteTenant(ctx, "other", store.Deletion{Actor: "admin"}); err != nil {
		t.Fatal(err)
	}
	if live(16, now) || live(5, now) {
		t.Fatal("a deleted tenant's session is live")
	}
}

// testUISessionRace: logins of one key at once never leave it more than
// max sessions, and a revocation racing logins leaves none live.
func testUISessionRace(t *testing.T, f Factory) {
	s, clock := newClocked(t, f)
	ctx := context.Background()
	createTenant(t, s, "acme")
	k := newKey("acme", 1)
	createKey(t, s, k)
	now := clock.Now()
	const keep, n = 3, 16
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			at := now.Add(time.Duration(i) * time.Millisecond)
			u := store.UISession{Hash: sessionHash(i), Tenant: "acme", KeyID: k.ID, Created: at, Used: at, Expires: at.Add(time.Hour)}
			if err := s.CreateUISession(ctx, u, keep); err != nil && !isNotFound(err) {
				errs <- err
			}
		}()
		if i == n/2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := s.RevokeAPIKey(ctx, "acme", k.ID); err != nil {
					errs <- err
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a racing login or revocation failed: %v", err)
	}
	for i := range n {
		if _, err := s.UISession(ctx, sessionHash(i), now); !isNotFound(err) {
			t.Fatalf("session %d after its key's revocation: %v; want ErrNotFound", i, err)
		}
	}
	// Without a revocation, the bound holds under the race.
	k2 := newKey("acme", 2)
	createKey(t, s, k2)
	var wg2 sync.WaitGroup
	for i := range n {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			at := now.Add(time.Duration(i) * time.Millisecond)
			u := store.UISession{Hash: sessionHash(100 + i), Tenant: "acme", KeyID: k2.ID, Created: at, Used: at, Expires: at.Add(time.Hour)}
			if err := s.CreateUISession(ctx, u, keep); err != nil {
				t.Errorf("CreateUISession(%d) = %v", i, err)
			}
		}()
	}
	wg2.Wait()
	live := 0
	for i := range n {
		if _, err := s.UISession(ctx, sessionHash(100+i), now); err == nil {
			live++
		}
	}
	if live != keep {
		t.Fatalf("%d sessions of one key live after %d logins at once, want %d", live, n, keep)
	}
}

func isNotFound(err error) bool { return errors.Is(err, store.ErrNotFound) }
