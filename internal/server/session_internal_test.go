package server

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/ratelimit"
)

// FuzzSessionAuth: whatever cookie, CSRF header, Origin and method a
// request has, authenticateSession never panics, and lets it through only
// with the live session's id, and, for a state-changing method, with the
// session's CSRF token and an Origin of the host it was sent to. The flags
// put the real id and token in, so that both sides of each check are
// explored.
func FuzzSessionAuth(f *testing.F) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	s := &Server{
		log: slog.New(slog.DiscardHandler), sessions: newSessions(clock, DefaultStreamPoll),
		fails: ratelimit.New(1e9, 1e9, clock), keys: ratelimit.New(1e9, 1e9, clock),
	}
	p := auth.Principal{Tenant: "alpha", KeyID: "key_0123456789abcdef", Scopes: []string{auth.ScopeRunsRead}}
	id, sess, err := s.sessions.create(p)
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
		if c.p.Tenant != p.Tenant || c.p.KeyID != p.KeyID || c.view == nil || c.view.Tenant() != p.Tenant {
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

// TestSessionsBounded: sessions past maxSessions are refused until some
// expire, and expired ones are swept to make room.
func TestSessionsBounded(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	ss := newSessions(func() time.Time { return now }, DefaultStreamPoll)
	p := auth.Principal{Tenant: "alpha", KeyID: "key_0123456789abcdef"}
	for i := 0; i < maxSessions; i++ {
		if _, _, err := ss.create(p); err != nil {
			t.Fatalf("session %d: %v", i, err)
		}
	}
	if _, _, err := ss.create(p); !errors.Is(err, errTooManySessions) {
		t.Fatalf("session %d: %v, want %v", maxSessions+1, err, errTooManySessions)
	}
	now = now.Add(sessionIdle)
	id, _, err := ss.create(p)
	if err != nil {
		t.Fatalf("after the others expired: %v", err)
	}
	if len(ss.byHash) != 1 {
		t.Errorf("%d sessions held, want the one live", len(ss.byHash))
	}
	if _, _, ok := ss.get(id); !ok {
		t.Errorf("the new session is not live")
	}
	ss.dropKey("beta", p.KeyID)
	if _, _, ok := ss.get(id); !ok {
		t.Errorf("dropKey of another tenant's key ended the session")
	}
	ss.dropKey(p.Tenant, p.KeyID)
	if _, _, ok := ss.get(id); ok {
		t.Errorf("a session outlived dropKey")
	}
}
