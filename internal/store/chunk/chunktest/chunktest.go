// Package chunktest is the conformance suite of chunk.Backend: every
// backend (the directory, PostgreSQL's table) passes the same cases, run
// through a chunk.Store as the checkpoint library uses it, so that what a
// checkpoint relies on (content comes back checked, a tenant's chunks are
// not another's, a damaged chunk is an error) holds on each.
//
//	func TestChunks(t *testing.T) {
//		chunktest.Run(t, func(t *testing.T) chunk.Backend { return newBackend(t) })
//	}
//
// Importers: tests only (of chunk backends).
package chunktest

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// ManyIDs is how many chunks the listing case puts: more than a page of a
// backend that lists in pages (PostgreSQL's lists 256 at a time).
const ManyIDs = 600

// Run runs the suite; newBackend returns an empty backend, cleaned up when
// its test ends.
func Run(t *testing.T, newBackend func(t *testing.T) chunk.Backend) {
	ctx := context.Background()
	open := func(t *testing.T) (chunk.Backend, *chunk.Store) {
		t.Helper()
		b := newBackend(t)
		s, err := chunk.NewStore(b)
		if err != nil {
			t.Fatal(err)
		}
		return b, s
	}
	alice, bob := chunk.TenantKey("alice"), chunk.TenantKey("bob")

	t.Run("RoundTrip", func(t *testing.T) {
		_, s := open(t)
		h := alice.Hasher()
		cases := map[string][]byte{
			"one byte":      {7},
			"compressible":  bytes.Repeat([]byte("airlock "), 100_000),
			"random":        random(1 << 20),
			"largest":       random(chunk.MaxSize),
			"zeros largest": make([]byte, chunk.MaxSize),
		}
		for name, data := range cases {
			id := h.Sum(data)
			if ok, err := s.Has(ctx, id); err != nil || ok {
				t.Fatalf("%s: Has before Put = %v, %v; want false, nil", name, ok, err)
			}
			stored, err := s.Put(ctx, id, data)
			if err != nil {
				t.Fatalf("%s: Put() = %v", name, err)
			}
			if stored <= 0 || stored > chunk.MaxStored {
				t.Errorf("%s: Put() stored %d bytes, want 1 to %d", name, stored, chunk.MaxStored)
			}
			if ok, err := s.Has(ctx, id); err != nil || !ok {
				t.Fatalf("%s: Has after Put = %v, %v; want true, nil", name, ok, err)
			}
			got, err := s.Get(ctx, alice, id, []byte("overwritten"))
			if err != nil {
				t.Fatalf("%s: Get() = %v", name, err)
			}
			if !bytes.Equal(got, data) {
				t.Errorf("%s: Get() returned %d bytes, want the %d put", name, len(got), len(data))
			}
		}
		var ids []chunk.ID
		for _, data := range cases {
			ids = append(ids, h.Sum(data))
		}
		if err := s.Sync(ctx, ids); err != nil {
			t.Fatalf("Sync(the chunks put) = %v", err)
		}
		many := make([]chunk.ID, 100) // past what a backend may sync one by one
		copy(many, ids)
		many[len(ids)] = h.Sum([]byte("never stored"))
		if err := s.Sync(ctx, many); err != nil {
			t.Fatalf("Sync(many, some not stored) = %v", err)
		}
		if err := s.Sync(ctx, []chunk.ID{h.Sum([]byte("never stored"))}); err != nil {
			t.Fatalf("Sync(a chunk not stored) = %v", err)
		}
	})

	t.Run("Missing", func(t *testing.T) {
		_, s := open(t)
		id := alice.Hasher().Sum([]byte("never stored"))
		if _, err := s.Get(ctx, alice, id, nil); !errors.Is(err, chunk.ErrNotFound) {
			t.Errorf("Get(missing) = %v, want ErrNotFound", err)
		}
		if err := s.Delete(ctx, id); !errors.Is(err, chunk.ErrNotFound) {
			t.Errorf("Delete(missing) = %v, want ErrNotFound", err)
		}
	})

	t.Run("PutTwiceKeepsFirst", func(t *testing.T) {
		b, s := open(t)
		data := []byte("content")
		id := alice.Hasher().Sum(data)
		if _, err := s.Put(ctx, id, data); err != nil {
			t.Fatal(err)
		}
		// A second Put of an ID stored does nothing: the backend does not
		// even look at the bytes (they are the same content by the ID).
		if err := b.Put(ctx, id, []byte("other bytes")); err != nil {
			t.Fatalf("second Put() = %v", err)
		}
		got, err := s.Get(ctx, alice, id, nil)
		if err != nil || string(got) != "content" {
			t.Errorf("Get() = %q, %v; want the first Put's content", got, err)
		}
	})

	t.Run("BadSizes", func(t *testing.T) {
		b, s := open(t)
		id := alice.Hasher().Sum([]byte("x"))
		if err := b.Put(ctx, id, nil); err == nil {
			t.Error("backend Put(no bytes) = nil, want an error")
		}
		if err := b.Put(ctx, id, make([]byte, chunk.MaxStored+1)); err == nil {
			t.Error("backend Put(MaxStored+1 bytes) = nil, want an error")
		}
		if _, err := s.Put(ctx, id, make([]byte, chunk.MaxSize+1)); err == nil {
			t.Error("Put(MaxSize+1 bytes) = nil, want an error")
		}
		if ok, _ := s.Has(ctx, id); ok {
			t.Error("a refused Put stored the chunk")
		}
	})

	t.Run("TenantIsolation", func(t *testing.T) {
		_, s := open(t)
		data := []byte("the same file in two tenants")
		ida, idb := alice.Hasher().Sum(data), bob.Hasher().Sum(data)
		if ida == idb {
			t.Fatal("two tenants' keys give the same ID for the same content")
		}
		if alice.Fingerprint() == bob.Fingerprint() {
			t.Fatal("two tenants' keys have the same fingerprint")
		}
		if _, err := s.Put(ctx, ida, data); err != nil {
			t.Fatal(err)
		}
		if ok, _ := s.Has(ctx, idb); ok {
			t.Error("bob's ID of the content is stored after alice put it")
		}
		if _, err := s.Get(ctx, bob, ida, nil); !errors.Is(err, chunk.ErrCorrupt) {
			t.Errorf("Get(alice's chunk, bob's key) = %v, want ErrCorrupt", err)
		}
	})

	t.Run("Corrupt", func(t *testing.T) {
		b, s := open(t)
		h := alice.Hasher()
		good := []byte("good content")
		other := []byte("other content")
		otherZ := compressed(t, other)
		cases := []struct {
			name   string
			stored []byte
		}{
			{"garbage", []byte("not zstd at all")},
			{"truncated", compressed(t, bytes.Repeat(good, 1000))[:20]},
			{"another chunk's content", otherZ},
			{"empty frame", compressed(t, nil)},
		}
		for _, c := range cases {
			id := h.Sum(append(good, c.name...))
			if err := b.Put(ctx, id, c.stored); err != nil {
				t.Fatalf("%s: backend Put() = %v", c.name, err)
			}
			got, err := s.Get(ctx, alice, id, nil)
			if !errors.Is(err, chunk.ErrCorrupt) {
				t.Errorf("%s: Get() = %d bytes, %v; want ErrCorrupt", c.name, len(got), err)
			}
		}
	})

	t.Run("DeleteAndList", func(t *testing.T) {
		b, s := open(t)
		h := alice.Hasher()
		var want []chunk.ID
		for i := range ManyIDs {
			data := fmt.Appendf(nil, "chunk %d", i)
			id := h.Sum(data)
			want = append(want, id)
			if _, err := s.Put(ctx, id, data); err != nil {
				t.Fatal(err)
			}
		}
		got := list(t, s)
		slices.SortFunc(want, func(a, b chunk.ID) int { return bytes.Compare(a[:], b[:]) })
		if !slices.Equal(got, want) {
			t.Fatalf("IDs() yielded %d ids, want the %d put, in increasing order", len(got), len(want))
		}
		for _, id := range want[:ManyIDs/2] {
			if err := s.Delete(ctx, id); err != nil {
				t.Fatalf("Delete() = %v", err)
			}
		}
		if got := list(t, s); !slices.Equal(got, want[ManyIDs/2:]) {
			t.Errorf("IDs() after deleting half yielded %d ids, want %d", len(got), ManyIDs-ManyIDs/2)
		}
		if ok, _ := b.Has(ctx, want[0]); ok {
			t.Error("Has(deleted) = true")
		}
		// Stopping early stops the iteration.
		n := 0
		for _, err := range s.IDs(ctx) {
			if err != nil {
				t.Fatal(err)
			}
			if n++; n == 3 {
				break
			}
		}
	})

	t.Run("Expire", func(t *testing.T) {
		// A collector's cut: chunks last used before it go, the ones a
		// writer found (Has) or put after it stay, whatever their age.
		_, s := open(t)
		h := alice.Hasher()
		put := func(data []byte) chunk.ID {
			t.Helper()
			id := h.Sum(data)
			if _, err := s.Put(ctx, id, data); err != nil {
				t.Fatal(err)
			}
			return id
		}
		unused, found := put([]byte("unused since")), put([]byte("found since"))
		before := time.Now()
		if ok, err := s.Has(ctx, found); !ok || err != nil {
			t.Fatalf("Has = %t, %v; want true", ok, err)
		}
		fresh := put([]byte("put since"))
		missing := h.Sum([]byte("never put"))
		for _, c := range []struct {
			name string
			id   chunk.ID
			want bool
		}{{"unused", unused, true}, {"found", found, false}, {"fresh", fresh, false}, {"missing", missing, false}, {"unused again", unused, false}} {
			if got, err := s.Expire(ctx, c.id, before); got != c.want || err != nil {
				t.Errorf("Expire(%s chunk) = %t, %v; want %t, nil", c.name, got, err, c.want)
			}
		}
		if ok, err := s.Has(ctx, unused); ok || err != nil {
			t.Errorf("Has(expired chunk) = %t, %v; want false", ok, err)
		}
		for _, id := range []chunk.ID{found, fresh} {
			if _, err := s.Get(ctx, alice, id, nil); err != nil {
				t.Errorf("Get(kept chunk) = %v", err)
			}
		}
		if got, err := s.Expire(ctx, found, time.Now().Add(time.Hour)); !got || err != nil {
			t.Errorf("Expire(found chunk, a cut after its use) = %t, %v; want true", got, err)
		}
	})

	t.Run("ExpireRacesHas", func(t *testing.T) {
		// A writer that finds a chunk stored counts on it: whenever its
		// Has runs against a collector's Expire of the same chunk, either
		// Has says absent (and the writer stores it again) or the chunk
		// stays.
		_, s := open(t)
		h := alice.Hasher()
		const n = 200
		ids := make([]chunk.ID, n)
		for i := range ids {
			data := fmt.Appendf(nil, "chunk %d", i)
			ids[i] = h.Sum(data)
			if _, err := s.Put(ctx, ids[i], data); err != nil {
				t.Fatal(err)
			}
		}
		before := time.Now()
		found := make([]bool, n)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i, id := range ids {
				ok, err := s.Has(ctx, id)
				if err != nil {
					t.Errorf("Has = %v", err)
				}
				found[i] = ok
			}
		}()
		go func() {
			defer wg.Done()
			for i := range ids {
				// From the other end, so the two meet in the middle.
				if _, err := s.Expire(ctx, ids[n-1-i], before); err != nil {
					t.Errorf("Expire = %v", err)
				}
			}
		}()
		wg.Wait()
		kept := 0
		for i, id := range ids {
			if !found[i] {
				continue
			}
			kept++
			if _, err := s.Get(ctx, alice, id, nil); err != nil {
				t.Errorf("chunk %d: Has found it during the collection, then Get = %v", i, err)
			}
		}
		t.Logf("%d of %d chunks found by Has before Expire", kept, n)
	})

	t.Run("Cancelled", func(t *testing.T) {
		b, _ := open(t)
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		id := alice.Hasher().Sum([]byte("x"))
		if err := b.Put(cctx, id, []byte("x")); err == nil {
			t.Error("Put(cancelled ctx) = nil")
		}
		if ok, _ := b.Has(ctx, id); ok {
			t.Error("Put(cancelled ctx) stored the chunk")
		}
		for _, err := range b.IDs(cctx) {
			if err == nil {
				t.Error("IDs(cancelled ctx) yielded no error")
			}
			break
		}
	})

	t.Run("Concurrent", func(t *testing.T) {
		_, s := open(t)
		data := random(64 << 10)
		id := alice.Hasher().Sum(data)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() {
				if _, err := s.Put(ctx, id, data); err != nil {
					errs <- err
					return
				}
				got, err := s.Get(ctx, alice, id, nil)
				if err == nil && !bytes.Equal(got, data) {
					err = errors.New("Get() returned other bytes")
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Errorf("concurrent Put and Get of one chunk: %v", err)
		}
		if got := list(t, s); len(got) != 1 {
			t.Errorf("IDs() after 8 Puts of one chunk yielded %d, want 1", len(got))
		}
	})
}

func list(t *testing.T, s *chunk.Store) []chunk.ID {
	t.Helper()
	var ids []chunk.ID
	for id, err := range s.IDs(context.Background()) {
		if err != nil {
			t.Fatalf("IDs() = %v", err)
		}
		ids = append(ids, id)
	}
	return ids
}

func random(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

// compressed returns data compressed as a Store stores it, by putting it
// in a scratch store and reading the stored bytes back.
func compressed(t *testing.T, data []byte) []byte {
	t.Helper()
	var m memBackend
	s, err := chunk.NewStore(&m)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) == 0 {
		// Put refuses empty content; an empty zstd frame is still what a
		// damaged chunk may hold.
		return []byte{0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x00, 0x01, 0x00, 0x00}
	}
	if _, err := s.Put(context.Background(), chunk.ID{}, data); err != nil {
		t.Fatal(err)
	}
	return m.last
}

// memBackend keeps the last bytes put; only compressed uses it.
type memBackend struct {
	chunk.Backend
	last []byte
}

func (m *memBackend) Put(_ context.Context, _ chunk.ID, data []byte) error {
	m.last = slices.Clone(data)
	return nil
}
