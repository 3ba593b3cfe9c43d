package chunk_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/zeebo/blake3"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// tenantKey is chunk.TenantKey's key, derived here on its own: the
// derivations below pin what names every stored chunk.
func tenantKey(tenant string) []byte {
	k := sha256.Sum256([]byte("airlock checkpoint chunk key v1\x00" + tenant))
	return k[:]
}

// legacyID is a chunk's ID before 2026-12-06: HMAC-SHA256 under the
// tenant's key.
func legacyID(tenant string, data []byte) chunk.ID {
	m := hmac.New(sha256.New, tenantKey(tenant))
	m.Write(data)
	var id chunk.ID
	m.Sum(id[:0])
	return id
}

// blake3ID is a chunk's ID since: BLAKE3 keyed with Key.Derive("chunk id
// blake3").
func blake3ID(tenant string, data []byte) chunk.ID {
	m := hmac.New(sha256.New, tenantKey(tenant))
	m.Write([]byte("derive\x00chunk id blake3"))
	h, err := blake3.NewKeyed(m.Sum(nil))
	if err != nil {
		panic(err)
	}
	h.Write(data)
	var id chunk.ID
	h.Sum(id[:0])
	return id
}

// TestIDs: Sum names chunks by their keyed BLAKE3; a Store reads chunks
// named either way (stores written before keep theirs), each only under
// its tenant's key and only with its own content; a Hasher checking a
// mix of both kinds accepts each, whichever it tried first.
func TestIDs(t *testing.T) {
	ctx := context.Background()
	s, err := chunk.NewStore(newDir(t))
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{"a": []byte("content a"), "b": []byte("content b")}
	if got, want := chunk.TenantKey("acme").Hasher().Sum(data["a"]), blake3ID("acme", data["a"]); got != want {
		t.Fatalf("Sum = %s, want the keyed BLAKE3 %s", got, want)
	}
	// The same two IDs from another implementation (lukechampine.com/blake3
	// v1.4.1; crypto/hmac): a change of library or derivation that
	// renamed every stored chunk fails here.
	for _, c := range []struct {
		id   chunk.ID
		want string
	}{
		{blake3ID("acme", data["a"]), "137e2875a164f9b9076af2e5c8314ce4c5bfb421087938f560d61992658d8c77"},
		{legacyID("acme", data["a"]), "69c69fca26f9791716a88a00779f8a218b9063e61075ca5b1279ecd58ac7a580"},
	} {
		if c.id.String() != c.want {
			t.Errorf("ID %s, want %s", c.id, c.want)
		}
	}
	type stored struct {
		name string
		id   chunk.ID
		data []byte
	}
	var all []stored
	for _, tenant := range []string{"acme", "other"} {
		for _, d := range []string{"a", "b"} {
			for kind, id := range map[string]chunk.ID{"blake3": blake3ID(tenant, data[d]), "hmac": legacyID(tenant, data[d])} {
				if _, err := s.Put(ctx, id, data[d]); err != nil {
					t.Fatal(err)
				}
				all = append(all, stored{tenant + "/" + kind + "/" + d, id, data[d]})
			}
		}
	}
	h := chunk.TenantKey("acme").Hasher()
	// Twice through, in an order that switches kinds: every chunk of
	// acme's is read, every other tenant's refused.
	for range 2 {
		for _, c := range all {
			got, err := s.GetWith(ctx, h, c.id, nil)
			mine := c.name[:5] == "acme/"
			switch {
			case mine && (err != nil || string(got) != string(c.data)):
				t.Errorf("Get(%s) = %q, %v; want its content", c.name, got, err)
			case !mine && !errors.Is(err, chunk.ErrCorrupt):
				t.Errorf("Get(%s) under acme's key = %q, %v; want ErrCorrupt", c.name, got, err)
			}
		}
	}
	// Content that is another chunk's, under either kind of ID.
	for _, id := range []chunk.ID{blake3ID("acme", data["a"]), legacyID("acme", data["a"])} {
		if h.Check(data["b"], id) {
			t.Errorf("Check(content b, ID of a %s) = true", id)
		}
		if !h.Check(data["a"], id) {
			t.Errorf("Check(content a, its ID %s) = false", id)
		}
	}
}
