package auth_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/store"
)

// memKeys is a KeyStore of one live key, in memory, so the fuzzer runs
// fast.
type memKeys struct{ k store.APIKey }

func (m *memKeys) CreateAPIKey(context.Context, store.APIKey) error { return errors.New("read only") }

func (m *memKeys) APIKeyByHash(_ context.Context, h []byte) (store.APIKey, error) {
	if string(h) != string(m.k.Hash) {
		return store.APIKey{}, store.ErrNotFound
	}
	return m.k, nil
}

func (m *memKeys) TouchAPIKey(context.Context, string, time.Time) error { return nil }

// FuzzParseKey: ParseKey accepts exactly a known prefix and 48 lowercase
// hex digits, and Verify, on any input, refuses all but the one stored key
// with ErrUnauthenticated, in a fixed text that cannot hold the input.
func FuzzParseKey(f *testing.F) {
	const known = "airlock_000102030405060708090a0b0c0d0e0f1011121314151617"
	sum := sha256.Sum256([]byte(known))
	keys := auth.NewKeys(&memKeys{store.APIKey{ID: "key_0123456789abcdef", Tenant: "acme", Scopes: []string{"admin"}, Hash: sum[:]}}, nil)
	for _, seed := range []string{
		known,
		"e2b_" + strings.Repeat("f", 48),
		"airlock_" + strings.Repeat("F", 48),
		"e2b_" + strings.Repeat("0", 47),
		"alk_AAAA",
		"",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, key string) {
		format, err := auth.ParseKey(key)
		if err == nil {
			prefix := map[auth.Format]string{auth.FormatAirlock: "airlock_", auth.FormatE2B: "e2b_"}[format]
			body, ok := strings.CutPrefix(key, prefix)
			if !ok || len(body) != 48 || strings.Trim(body, "0123456789abcdef") != "" {
				t.Fatalf("ParseKey(%q) = %q, nil for a key that is not a prefix and 48 lowercase hex digits", key, format)
			}
		} else if err.Error() != "auth: invalid API key (malformed)" || !errors.Is(err, auth.ErrUnauthenticated) {
			t.Fatalf("ParseKey(%q) = %v, want the fixed ErrUnauthenticated (malformed)", key, err)
		}
		p, err := keys.Verify(context.Background(), key)
		switch {
		case key == known:
			if err != nil || p.Tenant != "acme" {
				t.Fatalf("Verify(known) = %+v, %v", p, err)
			}
		case !errors.Is(err, auth.ErrUnauthenticated) || p.Tenant != "":
			t.Fatalf("Verify(%q) = %+v, %v, want ErrUnauthenticated", key, p, err)
		case err.Error() != "auth: invalid API key (malformed)" && err.Error() != "auth: invalid API key (unknown)":
			// The text is one of two fixed strings: nothing of the
			// input can be in it.
			t.Fatalf("Verify(%q) error %q is not a fixed text", key, err)
		}
	})
}
