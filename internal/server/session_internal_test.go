package server

import (
	"context"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/ratelimit"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// sessionStore opens a SQLite store in a temporary directory with tenant
// alpha and one key of it, and returns the store and the key's principal.
func sessionStore(t testing.TB) (store.Store, auth.Principal) {
	t.Helper()
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if _, err := st.CreateTenant(ctx, "alpha"); err != nil {
		t.Fatal(err)
	}
	_, k, err := auth.NewKeys(st, nil).Create(ctx, "alpha", "ui", []string{auth.ScopeRunsRead}, auth.FormatAirlock)
	if err != nil {
		t.Fatal(err)
	}
	return st, auth.Principal{Tenant: "alpha", KeyID: k.ID, Scopes: k.Scopes}
}

// FuzzSessionAuth: whatever cookie, CSRF header, Origin and method a
// request has, authenticateSession never panics, and lets it through only
// with the live session's id, and, for a state-changing method, with the
// session's CSRF token and an Origin of the host it was sent to. The flags
// put the real id and token in, so that both sides of each check are
// explored.
func FuzzSessionAuth(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	st, p := sessionStore(f)
	s := &Server{
		log: slog.New(slog.DiscardHandler), sessions: newSessions(st, clock, slog.New(slog.DiscardHandler)),
		fails: ratelimit.New(1e9, 1e9, clock), keys: ratelimit.New(1e9, 1e9, clock),
	}
	s.o.Store = st
	id, sess, err := s.sessions.create(context.Background(), p)
	if err != nil {
		f.Fatal(err)
	}
	const host = "airlock.test:8080"
	f.Add("GET", "", "", "", true, false)
	f.Add("POST", "", "", "http://"+host, true, true)
	f.Add("POST", "", "", "http://evil.test", true, true)
	f.Add("POST", "", "", "https://"+host, true, true)
	f.Add("POST", "", "wrong", "http://"+host, true, false)
	f.Add("DELETE", "", "", "", true, true)
	f.Add("GET", strings.Repeat("A", 43), "", "", false, false)
	f.Add("OPTIONS", "x;y", "", "null", false, false)
	f.Fuzz(func(t *testing.T, method, cookie, csrf, origin string, realID, realCSRF bool) {
		if realID {
			cookie = id
		}
		if realCSRF {
			csrf = sess.csrf
		}
		r, err := http.NewRequest(method, "http://"+host+"/v1/runs", nil)
		if err != nil {
			return // not a method net/http would serve
		}
		r.RemoteAddr = "192.0.2.1:1234"
		r.Header.Set("Cookie", sessionCookie+"="+cookie)
		if csrf != "" {
			r.Header.Set(CSRFHeader, csrf)
		}
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		c := &call{id: "req_fuzz", log: s.log}
		if err := s.authenticateSession(r, c); err != nil {
			if c.view != nil {
				t.Fatalf("refused (%v) yet given a store view", err)
			}
			return
		}
		if cookie != id {
			t.Fatalf("authenticated with cookie %q, not the session's", cookie)
		}
		if c.p.Tenant != p.Tenant || c.p.KeyID != p.KeyID || !slices.Equal(c.p.Scopes, p.Scopes) || c.view == nil || c.view.Tenant() != p.Tenant {
			t.Fatalf("authenticated as %+v", c.p)
		}
		if !safeMethod(r.Method) {
			if csrf != sess.csrf {
				t.Fatalf("%s authenticated with CSRF token %q", r.Method, csrf)
			}
			_, h, _ := strings.Cut(origin, "://")
			if !strings.EqualFold(h, host) {
				t.Fatalf("%s authenticated with Origin %q", r.Method, origin)
			}
		}
	})
}
