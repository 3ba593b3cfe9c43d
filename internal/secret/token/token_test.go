package token

import (
	"encoding/base64"
	"errors"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/clock"
)

func newTestStore() (*Store, *clock.Fake) {
	c := clock.NewFake(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC))
	return NewStore(c.Now), c
}

var scopeA = Scope{Tenant: "t1", Run: "run1", Sandbox: "sb1", Purpose: "llm"}

func TestVerify(t *testing.T) {
	with := func(f func(*Scope)) Scope { s := scopeA; f(&s); return s }
	tests := []struct {
		name   string
		on     Scope
		reason string // "" = accepted
	}{
		{"own socket", scopeA, ""},
		{"own socket, run unknown to caller", with(func(s *Scope) { s.Run = "" }), ""},
		{"another sandbox's socket", with(func(s *Scope) { s.Sandbox = "sb2" }), "sandbox_mismatch"},
		{"another tenant", with(func(s *Scope) { s.Tenant = "t2" }), "tenant_mismatch"},
		{"another run", with(func(s *Scope) { s.Run = "run2" }), "run_mismatch"},
		{"another purpose", with(func(s *Scope) { s.Purpose = "tools" }), "purpose_mismatch"},
		{"empty scope", Scope{}, "tenant_mismatch"},
	}
	s, _ := newTestStore()
	tok, err := s.Issue(scopeA, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.Verify(tok, tt.on)
			checkVerify(t, got, err, tt.reason)
		})
	}
}

func checkVerify(t *testing.T, got Scope, err error, reason string) {
	t.Helper()
	if reason == "" {
		if err != nil || got != scopeA {
			t.Fatalf("Verify = %+v, %v, want %+v", got, err, scopeA)
		}
		return
	}
	var ie *InvalidError
	if !errors.Is(err, ErrInvalid) || !errors.As(err, &ie) || ie.Reason != reason {
		t.Fatalf("Verify error = %v, want ErrInvalid (%s)", err, reason)
	}
	if got != (Scope{}) {
		t.Errorf("refused Verify returned scope %+v", got)
	}
}

func TestExpiry(t *testing.T) {
	s, c := newTestStore()
	tok, _ := s.Issue(scopeA, time.Minute)
	c.Advance(time.Minute - time.Nanosecond)
	got, err := s.Verify(tok, scopeA)
	checkVerify(t, got, err, "")
	c.Advance(time.Nanosecond)
	got, err = s.Verify(tok, scopeA)
	checkVerify(t, got, err, "expired")
	got, err = s.Verify(tok, scopeA)
	checkVerify(t, got, err, "unknown") // forgotten once expired

	// ttl is capped.
	long, _ := s.Issue(scopeA, 1000*time.Hour)
	c.Advance(MaxTTL)
	got, err = s.Verify(long, scopeA)
	checkVerify(t, got, err, "expired")

	for _, ttl := range []time.Duration{0, -time.Second} {
		if _, err := s.Issue(scopeA, ttl); err == nil {
			t.Errorf("Issue(ttl %v) succeeded", ttl)
		}
	}
}

func TestPrune(t *testing.T) {
	s, c := newTestStore()
	for range 10 {
		if _, err := s.Issue(scopeA, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	s.RevokeRun("t1", "run1")
	c.Advance(2 * time.Minute)
	if _, err := s.Issue(scopeA, time.Minute); err != nil {
		t.Fatal(err)
	}
	if n := len(s.entries); n != 1 {
		t.Errorf("after expiry the store holds %d entries, want 1", n)
	}
}

func TestRevoke(t *testing.T) {
	s, _ := newTestStore()
	other := Scope{Tenant: "t1", Run: "run2", Sandbox: "sb2", Purpose: "llm"}
	sameNamesOtherTenant := Scope{Tenant: "t2", Run: "run1", Sandbox: "sb1", Purpose: "llm"}
	sameRunOtherSandbox := Scope{Tenant: "t1", Run: "run1", Sandbox: "sb3", Purpose: "llm"}
	issue := func(sc Scope) string {
		tok, err := s.Issue(sc, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	a, b, c, d := issue(scopeA), issue(other), issue(sameNamesOtherTenant), issue(sameRunOtherSandbox)

	if n := s.RevokeSandbox("t1", "sb1"); n != 1 {
		t.Errorf("RevokeSandbox(t1, sb1) = %d, want 1", n)
	}
	_, err := s.Verify(a, scopeA)
	checkVerify(t, Scope{}, err, "revoked")
	if _, err := s.Verify(d, sameRunOtherSandbox); err != nil {
		t.Errorf("token of another sandbox of the run revoked: %v", err)
	}
	if _, err := s.Verify(c, sameNamesOtherTenant); err != nil {
		t.Errorf("token of another tenant revoked: %v", err)
	}

	if n := s.RevokeRun("t1", "run1"); n != 1 {
		t.Errorf("RevokeRun(t1, run1) = %d, want 1 (only the live one left)", n)
	}
	if _, err := s.Verify(d, sameRunOtherSandbox); !errors.Is(err, ErrInvalid) {
		t.Errorf("Verify after RevokeRun = %v, want ErrInvalid", err)
	}
	if _, err := s.Verify(b, other); err != nil {
		t.Errorf("token of another run revoked: %v", err)
	}
	if _, err := s.Verify(c, sameNamesOtherTenant); err != nil {
		t.Errorf("token of another tenant revoked by RevokeRun: %v", err)
	}
	if n := s.RevokeRun("t1", "run1"); n != 0 {
		t.Errorf("second RevokeRun = %d, want 0", n)
	}
}

func TestIssue(t *testing.T) {
	s, _ := newTestStore()
	seen := map[string]bool{}
	for range 100 {
		tok, err := s.Issue(scopeA, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if !wellFormed(tok) || seen[tok] {
			t.Fatalf("Issue = %q: malformed or repeated", tok)
		}
		seen[tok] = true
	}
	for _, sc := range []Scope{{}, {Tenant: "t", Run: "r", Sandbox: "s"}, {Run: "r", Sandbox: "s", Purpose: "p"}} {
		if _, err := s.Issue(sc, time.Minute); err == nil {
			t.Errorf("Issue(%+v) succeeded", sc)
		}
	}
}

func TestMalformed(t *testing.T) {
	s, _ := newTestStore()
	tok, _ := s.Issue(scopeA, time.Minute)
	raw, _ := base64.RawURLEncoding.DecodeString(tok[len(Prefix):])
	tests := []string{
		"",
		Prefix,
		tok[len(Prefix):],
		"ALK_" + tok[len(Prefix):],
		tok + "A",
		tok[:len(tok)-1],
		tok + "\n",
		" " + tok,
		Prefix + base64.RawStdEncoding.EncodeToString(raw[:31]) + "+/",
		Prefix + base64.URLEncoding.EncodeToString(raw), // padded
		strings.ToUpper(tok),
		Prefix + strings.Repeat("\x00", 43),
	}
	for _, bad := range tests {
		got, err := s.Verify(bad, scopeA)
		if !errors.Is(err, ErrInvalid) || got != (Scope{}) {
			t.Errorf("Verify(%q) = %+v, %v, want ErrInvalid", bad, got, err)
			continue
		}
		if bad != "" && strings.Contains(err.Error(), bad) {
			t.Errorf("error %q shows the presented token", err)
		}
	}
	// A well-formed token that was never issued.
	flipped := []byte(tok)
	flipped[10] ^= 1
	if flipped[10] == '-' || flipped[10] == '_' || !wellFormed(string(flipped)) {
		flipped[10] = 'A'
		if tok[10] == 'A' { // the replacement must change the token
			flipped[10] = 'B'
		}
	}
	_, err := s.Verify(string(flipped), scopeA)
	checkVerify(t, Scope{}, err, "unknown")
}

// TestStoreHoldsNoToken walks every value the Store holds and fails if the
// token, or its raw bytes, is among them.
func TestStoreHoldsNoToken(t *testing.T) {
	s, _ := newTestStore()
	var toks []string
	for range 5 {
		tok, _ := s.Issue(scopeA, time.Hour)
		toks = append(toks, tok)
	}
	s.RevokeSandbox("t1", "sb1")
	for _, tok := range toks {
		raw, _ := base64.RawURLEncoding.DecodeString(tok[len(Prefix):])
		walk(t, reflect.ValueOf(s).Elem(), func(b []byte) {
			if strings.Contains(string(b), tok) || strings.Contains(string(b), string(raw)) || strings.Contains(string(b), tok[len(Prefix):]) {
				t.Fatalf("the store holds the token or its raw bytes")
			}
		})
	}
	if len(s.entries) != len(toks) {
		t.Fatalf("walk saw %d entries, want %d", len(s.entries), len(toks))
	}
}

// walk calls check with the bytes of every string, byte slice and byte
// array reachable from v, map keys included.
func walk(t *testing.T, v reflect.Value, check func([]byte)) {
	switch v.Kind() {
	case reflect.String:
		check([]byte(v.String()))
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			b := make([]byte, v.Len())
			for i := range b {
				b[i] = byte(v.Index(i).Uint())
			}
			check(b)
			return
		}
		for i := range v.Len() {
			walk(t, v.Index(i), check)
		}
	case reflect.Map:
		it := v.MapRange()
		for it.Next() {
			walk(t, it.Key(), check)
			walk(t, it.Value(), check)
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			walk(t, v.Elem(), check)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			walk(t, v.Field(i), check)
		}
	}
}

func TestConcurrent(t *testing.T) {
	s, c := newTestStore()
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			sc := scopeA
			sc.Sandbox = string(rune('a' + i))
			for range 100 {
				tok, err := s.Issue(sc, time.Minute)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := s.Verify(tok, sc); err != nil {
					t.Error(err)
				}
				s.RevokeSandbox(sc.Tenant, "other")
				c.Advance(time.Millisecond)
			}
		})
	}
	wg.Wait()
}

func FuzzTokenVerify(f *testing.F) {
	s, _ := newTestStore()
	tok, err := s.Issue(scopeA, time.Hour)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("")
	f.Add(Prefix)
	f.Add(Prefix + strings.Repeat("A", 43))
	f.Add("alk_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAB")
	f.Add("alk_" + strings.Repeat("_", 43))
	f.Add("Bearer alk_x")
	f.Fuzz(func(t *testing.T, in string) {
		got, err := s.Verify(in, scopeA)
		if in == tok {
			if err != nil {
				t.Fatalf("issued token refused: %v", err)
			}
			return
		}
		if !errors.Is(err, ErrInvalid) || got != (Scope{}) {
			t.Fatalf("Verify(%q) = %+v, %v, want ErrInvalid", in, got, err)
		}
		if len(in) >= 16 && strings.Contains(err.Error(), in) {
			t.Fatalf("error %q shows the input", err)
		}
	})
}
