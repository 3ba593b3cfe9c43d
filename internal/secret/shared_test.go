package secret

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// openDB opens the SQLite database at path as a server would (a handle of
// its own).
func openDB(t *testing.T, path string) *sqlite.Store {
	t.Helper()
	db, err := sqlite.Open(context.Background(), path, sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func openShared(t *testing.T, db store.Secrets, key []byte) *Store {
	t.Helper()
	s, err := OpenShared(db, fixedKey(key))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestShared: two servers on one database with one key (two handles, as
// two replicas): a secret set through one is read, listed and deleted
// through the other, with its binding; the database holds no value in
// clear; a server with another key can neither read nor add one.
func TestShared(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "airlock.db")
	key := bytes.Repeat([]byte{3}, KeySize)
	a, b := openShared(t, openDB(t, path), key), openShared(t, openDB(t, path), key)
	value := []byte("ghp_shared_value_4d1f0e")
	if err := a.Set(ctx, "acme", "github_token", NewValue(value), []string{"API.github.com"}); err != nil {
		t.Fatal(err)
	}
	v, info, err := b.Get(ctx, "acme", "github_token")
	if err != nil || !bytes.Equal(v.Reveal(), value) || !slices.Equal(info.Hosts, []string{"api.github.com"}) {
		t.Fatalf("Get through B = %q, %+v, %v; want A's value bound to api.github.com", v.Reveal(), info, err)
	}
	if _, _, err := b.Get(ctx, "other", "github_token"); !errors.Is(err, ErrNotFound) {
		t.Errorf("another tenant's Get = %v, want ErrNotFound", err)
	}
	// Replacing keeps the creation time.
	if err := b.Set(ctx, "acme", "github_token", NewValue([]byte("ghp_rotated")), nil); err != nil {
		t.Fatal(err)
	}
	v, info2, err := a.Get(ctx, "acme", "github_token")
	if err != nil || string(v.Reveal()) != "ghp_rotated" || info2.Hosts != nil || !info2.Created.Equal(info.Created) || info2.Updated.Before(info.Updated) {
		t.Errorf("after B's Set, A's Get = %q, %+v, %v; want the new value, no binding, created kept", v.Reveal(), info2, err)
	}
	infos, err := b.List(ctx, "acme")
	if err != nil || len(infos) != 1 || infos[0].Name != "github_token" {
		t.Errorf("List through B = %+v, %v", infos, err)
	}
	for _, f := range []string{path, path + "-wal"} {
		b, err := os.ReadFile(f)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		for _, clear := range [][]byte{value, []byte("ghp_rotated"), key} {
			if bytes.Contains(b, clear) {
				t.Errorf("%s holds %q in clear", filepath.Base(f), clear)
			}
		}
	}

	// Another key: refused both ways, nothing stored.
	c := openShared(t, openDB(t, path), bytes.Repeat([]byte{4}, KeySize))
	if _, _, err := c.Get(ctx, "acme", "github_token"); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Get under another key = %v, want ErrWrongKey", err)
	}
	if err := c.Set(ctx, "acme", "other_token", NewValue([]byte("x")), nil); !errors.Is(err, ErrWrongKey) {
		t.Errorf("Set under another key = %v, want ErrWrongKey", err)
	}
	if _, _, err := a.Get(ctx, "acme", "other_token"); !errors.Is(err, ErrNotFound) {
		t.Errorf("the refused Set stored something: %v", err)
	}

	if err := a.Delete(ctx, "acme", "github_token"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Get(ctx, "acme", "github_token"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get through B after A's Delete = %v, want ErrNotFound", err)
	}
	if err := b.Delete(ctx, "acme", "github_token"); !errors.Is(err, ErrNotFound) {
		t.Errorf("second Delete = %v, want ErrNotFound", err)
	}
}

// TestSharedTamper: a sealed record moved to another name or tenant, or
// given another binding, in the database does not open.
func TestSharedTamper(t *testing.T) {
	ctx := context.Background()
	db := openDB(t, filepath.Join(t.TempDir(), "airlock.db"))
	s := openShared(t, db, bytes.Repeat([]byte{5}, KeySize))
	if err := s.Set(ctx, "acme", "token", NewValue([]byte("v")), []string{"api.example.com"}); err != nil {
		t.Fatal(err)
	}
	rec, err := db.SealedSecret(ctx, "acme", "token")
	if err != nil {
		t.Fatal(err)
	}
	for _, edit := range []func(r *store.SealedSecret){
		func(r *store.SealedSecret) { r.Name = "moved" },
		func(r *store.SealedSecret) { r.Tenant = "evil" },
		func(r *store.SealedSecret) { r.Hosts = []string{"evil.example.com"} },
	} {
		r := rec
		edit(&r)
		if err := db.PutSecret(ctx, r); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Get(ctx, r.Tenant, r.Name); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Get of the edited record %s/%s %v = %v, want ErrCorrupt", r.Tenant, r.Name, r.Hosts, err)
		}
	}
}

// TestSharedLegacyLocalTenant: as TestLegacyLocalTenant, on the shared
// store.
func TestSharedLegacyLocalTenant(t *testing.T) {
	db := openDB(t, filepath.Join(t.TempDir(), "airlock.db"))
	testLegacyLocalTenant(t, openShared(t, db, bytes.Repeat([]byte{6}, KeySize)))
}

// TestMoveFile: a server's secrets file moves into the shared store as it
// is sealed (legacy records included) and is removed; a name the store
// has already keeps the store's value; a file sealed under another key
// than the store's is refused and left in place.
func TestMoveFile(t *testing.T) {
	ctx := context.Background()
	key := bytes.Repeat([]byte{8}, KeySize)
	dir := filepath.Join(t.TempDir(), "secrets")
	file, err := Open(dir, fixedKey(key))
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct{ tenant, name, value string }{
		{"acme", "github_token", "from-file"},
		{"acme", "taken", "from-file"},
		{legacyLocalTenant, "old", "legacy"},
	} {
		if err := file.Set(ctx, r.tenant, r.name, NewValue([]byte(r.value)), []string{"api.example.com"}); err != nil {
			t.Fatal(err)
		}
	}
	db := openDB(t, filepath.Join(t.TempDir(), "airlock.db"))
	s := openShared(t, db, key)
	if err := s.Set(ctx, "acme", "taken", NewValue([]byte("from-store")), nil); err != nil {
		t.Fatal(err)
	}
	moved, kept, err := s.MoveFile(ctx, dir)
	if err != nil || moved != 2 || kept != 1 {
		t.Fatalf("MoveFile = %d, %d, %v; want 2 moved, 1 kept", moved, kept, err)
	}
	for _, want := range []struct{ tenant, name, value string }{
		{"acme", "github_token", "from-file"},
		{"acme", "taken", "from-store"},
		{event.LocalTenant, "old", "legacy"},
	} {
		v, _, err := s.Get(ctx, want.tenant, want.name)
		if err != nil || string(v.Reveal()) != want.value {
			t.Errorf("Get(%s, %s) after the move = %q, %v; want %q", want.tenant, want.name, v.Reveal(), err, want.value)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, storeFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the moved file is still there: %v", err)
	}
	if moved, kept, err := s.MoveFile(ctx, dir); err != nil || moved+kept != 0 {
		t.Errorf("second MoveFile = %d, %d, %v; want nothing to move", moved, kept, err)
	}

	// A file of another key.
	dir2 := filepath.Join(t.TempDir(), "secrets")
	other, err := Open(dir2, fixedKey(bytes.Repeat([]byte{9}, KeySize)))
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Set(ctx, "acme", "elsewhere", NewValue([]byte("x")), nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.MoveFile(ctx, dir2); !errors.Is(err, ErrWrongKey) {
		t.Errorf("MoveFile of another key's file = %v, want ErrWrongKey", err)
	}
	if _, err := os.Stat(filepath.Join(dir2, storeFile)); err != nil {
		t.Errorf("the refused file was not left in place: %v", err)
	}
}

// TestKeyFileOwner: the key file must be the process's own and private,
// or a Kubernetes Secret volume's file (root's, read-only to a group of
// the non-root process) and nothing more.
func TestKeyFileOwner(t *testing.T) {
	member := func(gid uint32) bool { return gid == 2000 }
	for _, tt := range []struct {
		name                 string
		mode, uid, gid, euid uint32
		ok                   bool
	}{
		{"own 0600", 0o600, 1000, 1000, 1000, true},
		{"own 0400", 0o400, 1000, 1000, 1000, true},
		{"own group readable", 0o640, 1000, 2000, 1000, false},
		{"another user's", 0o600, 1001, 1001, 1000, false},
		{"secret volume 0440", 0o440, 0, 2000, 65532, true},
		{"secret volume, group not ours", 0o440, 0, 2001, 65532, false},
		{"secret volume, group writable", 0o460, 0, 2000, 65532, false},
		{"secret volume, world readable", 0o444, 0, 2000, 65532, false},
		{"root's group readable, read by root", 0o640, 0, 2000, 0, false},
		{"root's 0600 read by root", 0o600, 0, 0, 0, true},
	} {
		err := keyFileOwner("key", tt.mode, tt.uid, tt.gid, tt.euid, member)
		if (err == nil) != tt.ok {
			t.Errorf("%s: keyFileOwner = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

// BenchmarkGet: what the egress proxy pays per credentialed request (it
// fetches the value at each one, so a rotation applies at once): the file
// store's read under its lock, against the shared store's query (SQLite
// here; PostgreSQL adds a network round trip).
func BenchmarkGet(b *testing.B) {
	ctx := context.Background()
	key := bytes.Repeat([]byte{2}, KeySize)
	dir := filepath.Join(b.TempDir(), "secrets")
	file, err := Open(dir, fixedKey(key))
	if err != nil {
		b.Fatal(err)
	}
	db, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	shared, err := OpenShared(db, fixedKey(key))
	if err != nil {
		b.Fatal(err)
	}
	for name, s := range map[string]*Store{"file": file, "sqlite": shared} {
		for i := range 20 {
			if err := s.Set(ctx, "acme", fmt.Sprintf("token%d", i), NewValue([]byte("v")), []string{"api.example.com"}); err != nil {
				b.Fatal(err)
			}
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				if _, _, err := s.Get(ctx, "acme", "token7"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
