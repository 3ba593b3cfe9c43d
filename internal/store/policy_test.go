package store_test

import (
	"errors"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/store"
)

func TestParsePolicyRef(t *testing.T) {
	hex := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	tests := []struct {
		in   string
		want store.PolicyRef
		ok   bool
	}{
		{"", store.PolicyRef{}, true},
		{"v1", store.PolicyRef{Version: 1}, true},
		{"v42", store.PolicyRef{Version: 42}, true},
		{"v007", store.PolicyRef{Version: 7}, true},
		{"01234567", store.PolicyRef{HashPrefix: "sha256:01234567"}, true},
		{"ABCDEF01", store.PolicyRef{HashPrefix: "sha256:abcdef01"}, true},
		{"sha256:" + hex, store.PolicyRef{HashPrefix: "sha256:" + hex}, true},
		{"SHA256:" + hex[:9], store.PolicyRef{HashPrefix: "sha256:" + hex[:9]}, true},
		{"v0", store.PolicyRef{}, false},
		{"v", store.PolicyRef{}, false},
		{"v+1", store.PolicyRef{}, false},
		{"v-1", store.PolicyRef{}, false},
		{"v 1", store.PolicyRef{}, false},
		{"V1", store.PolicyRef{}, false},
		{"0123456", store.PolicyRef{}, false},
		{hex + "0", store.PolicyRef{}, false},
		{"0123456g", store.PolicyRef{}, false},
		{"sha256:", store.PolicyRef{}, false},
		{"latest", store.PolicyRef{}, false},
		{"sha512:01234567", store.PolicyRef{}, false},
	}
	for _, tt := range tests {
		got, err := store.ParsePolicyRef(tt.in)
		if (err == nil) != tt.ok || got != tt.want {
			t.Errorf("ParsePolicyRef(%q) = %+v, %v, want %+v (ok %v)", tt.in, got, err, tt.want, tt.ok)
		}
		if err != nil && !errors.Is(err, store.ErrInvalid) {
			t.Errorf("ParsePolicyRef(%q) = %v, want ErrInvalid", tt.in, err)
		}
	}
}

func TestValidatePolicyName(t *testing.T) {
	for _, tt := range []struct {
		name string
		ok   bool
	}{
		{"prod", true},
		{"0", true},
		{"a.b_c-d", true},
		{"policy.yaml", true},
		{strings.Repeat("a", store.MaxPolicyNameLen), true},
		{"", false},
		{strings.Repeat("a", store.MaxPolicyNameLen+1), false},
		{"Prod", false},
		{".prod", false},
		{"-prod", false},
		{"_prod", false},
		{"a b", false},
		{"a/b", false},
		{"a@v1", false},
		{"é", false},
	} {
		err := store.ValidatePolicyName(tt.name)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, store.ErrInvalid)) {
			t.Errorf("ValidatePolicyName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// FuzzPolicyRef: a name or ref that is accepted has the documented shape,
// and a parsed ref reads back the same from its String.
func FuzzPolicyRef(f *testing.F) {
	for _, s := range []string{"", "v1", "v18446744073709551616", "deadbeef", "sha256:DEADBEEF", "prod", "a.b-c_d", ".x", "v-0"} {
		f.Add(s)
	}
	name := regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,63}$`)
	prefix := regexp.MustCompile(`^sha256:[0-9a-f]{8,64}$`)
	f.Fuzz(func(t *testing.T, s string) {
		if err := store.ValidatePolicyName(s); (err == nil) != name.MatchString(s) {
			t.Fatalf("ValidatePolicyName(%q) = %v, but the name pattern says %v", s, err, name.MatchString(s))
		}
		r, err := store.ParsePolicyRef(s)
		if err != nil {
			if !errors.Is(err, store.ErrInvalid) {
				t.Fatalf("ParsePolicyRef(%q) = %v, want ErrInvalid", s, err)
			}
			return
		}
		switch {
		case r.Version < 0, r.Version > 0 && r.HashPrefix != "", r.HashPrefix != "" && !prefix.MatchString(r.HashPrefix):
			t.Fatalf("ParsePolicyRef(%q) = %+v: malformed", s, r)
		}
		if r == (store.PolicyRef{}) {
			if s != "" {
				t.Fatalf("ParsePolicyRef(%q) = the latest; only \"\" means that", s)
			}
			return
		}
		again, err := store.ParsePolicyRef(r.String())
		if err != nil || again != r {
			t.Fatalf("ParsePolicyRef(%q) = %+v, whose String %q reads back as %+v, %v", s, r, r.String(), again, err)
		}
	})
}

// TestFillPolicyHashes: a version without a policy hash gets its
// document's (read when the version does not carry it); one whose document
// cannot be read or hashed keeps the hash of its bytes; one with a policy
// hash is left alone.
func TestFillPolicyHashes(t *testing.T) {
	hash := func(doc []byte) (string, error) {
		if string(doc) == "bad" {
			return "", errors.New("does not parse")
		}
		return "policy-hash-of-" + string(doc), nil
	}
	docs := map[int64][]byte{1: []byte("one"), 2: []byte("bad")}
	read := func(v store.PolicyVersion) ([]byte, error) {
		if d, ok := docs[v.Version]; ok {
			return d, nil
		}
		return nil, store.ErrNotFound
	}
	vs := []store.PolicyVersion{
		{Version: 1, Hash: "h1"},
		{Version: 2, Hash: "h2"},
		{Version: 3, Hash: "h3"},
		{Version: 4, Hash: "h4", PolicyHash: "kept"},
		{Version: 5, Hash: "h5", Document: []byte("five")},
	}
	store.FillPolicyHashes(vs, read, hash)
	for i, want := range []string{"policy-hash-of-one", "h2", "h3", "kept", "policy-hash-of-five"} {
		if vs[i].PolicyHash != want {
			t.Errorf("FillPolicyHashes: v%d's policy hash %q, want %q", vs[i].Version, vs[i].PolicyHash, want)
		}
	}
}

// TestDecidePolicy: a put of the name's latest document writes nothing
// (or only the policy hash that version lacks); any other document is the
// next version, the first when the name has none.
func TestDecidePolicy(t *testing.T) {
	const h1, h2 = "sha256:1111", "sha256:2222"
	latest := store.PolicyVersion{Tenant: "acme", Name: "prod", Version: 3, Hash: h1, PolicyHash: "sha256:p1"}
	legacy := latest
	legacy.PolicyHash = "" // stored before the stores kept policy hashes
	put := store.PolicyVersion{Tenant: "acme", Name: "prod", Hash: h1, PolicyHash: "sha256:p1", Source: "prod.yaml"}
	other := put
	other.Hash = h2
	noHash := put
	noHash.PolicyHash = ""
	filled := legacy
	filled.PolicyHash = put.PolicyHash
	first, next := other, other
	first.Version, next.Version = 1, 4
	for _, tt := range []struct {
		name   string
		v      store.PolicyVersion
		latest store.PolicyVersion
		found  bool
		want   store.PolicyVersion
		write  store.PolicyWrite
	}{
		{"first version", other, store.PolicyVersion{}, false, first, store.PolicyInsert},
		{"another document", other, latest, true, next, store.PolicyInsert},
		{"the latest document", put, latest, true, latest, store.PolicyKeep},
		{"the latest document, without a policy hash", noHash, latest, true, latest, store.PolicyKeep},
		{"the latest document stored without a policy hash", put, legacy, true, filled, store.PolicyFill},
		{"neither has a policy hash", noHash, legacy, true, legacy, store.PolicyKeep},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, write := store.DecidePolicy(tt.v, tt.latest, tt.found)
			if !reflect.DeepEqual(got, tt.want) || write != tt.write {
				t.Errorf("DecidePolicy() = %+v, %v; want %+v, %v", got, write, tt.want, tt.write)
			}
		})
	}
}
