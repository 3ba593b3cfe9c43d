package postgres

import (
	"bytes"
	"context"
	"crypto/rand"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// TestBlobsExpire: Expire removes a blob (its row and every chunk) only if
// it was last used before the cut; a Has or a Put of the same bytes after
// the cut, from another host process, keeps it; Digests lists every blob
// in order, across pages.
func TestBlobsExpire(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, store.NoRedaction)
	a, b := blobsOn(t, st), blobsOn(t, openURL(t, mustURL(t, st), store.NoRedaction))
	big := make([]byte, 2*MaxChunk+5)
	rand.Read(big)
	put := func(data []byte) string {
		t.Helper()
		d, _, err := a.Put(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	old, bigD, touched, reput := put([]byte("old")), put(big), put([]byte("found")), put([]byte("put again"))
	cut := time.Now()
	if ok, err := b.Has(ctx, touched); err != nil || !ok {
		t.Fatalf("Has = %v, %v", ok, err)
	}
	if _, _, err := b.Put(ctx, bytes.NewReader([]byte("put again"))); err != nil {
		t.Fatal(err)
	}
	// More than a page of blobs, so Digests pages.
	var all []string
	for i := range blobsPage + 3 {
		all = append(all, put([]byte{byte(i), byte(i >> 8), 'p'}))
	}
	all = append(all, old, bigD, touched, reput)
	slices.Sort(all)
	var listed []string
	for d, err := range b.Digests(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		listed = append(listed, d)
	}
	if !slices.Equal(listed, all) {
		t.Errorf("Digests listed %d blobs, want %d in order", len(listed), len(all))
	}
	for _, tt := range []struct {
		digest     string
		gone, kept bool
	}{
		{old, true, false},
		{bigD, true, false},
		{touched, false, true},
		{reput, false, true},
		{all[0], false, true}, // written after the cut
	} {
		gone, err := b.Expire(ctx, tt.digest, cut)
		if err != nil || gone != tt.gone {
			t.Errorf("Expire(%s) = %v, %v; want %v", tt.digest, gone, err, tt.gone)
		}
		if ok, _ := a.Has(ctx, tt.digest); ok != tt.kept {
			t.Errorf("after Expire(%s), Has = %v", tt.digest, ok)
		}
	}
	var n int
	if err := rawConn(t, st).QueryRow(ctx, `SELECT count(*) FROM blob_chunks WHERE digest = $1`, bigD).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d chunks of the expired blob remain, %v", n, err)
	}
	if got, err := readBlob(a, put(big)); err != nil || !bytes.Equal(got, big) {
		t.Errorf("the expired blob put again reads %d bytes, %v", len(got), err)
	}
}

// TestBlobsExpireRace: Has and Expire of one blob from two processes, many
// times over: each Has that finds the blob keeps it (Expire with a cut
// before the Has never removes it after), and each that does not is after
// a removal (a put restores it).
func TestBlobsExpireRace(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, store.NoRedaction)
	a, b := blobsOn(t, st), blobsOn(t, openURL(t, mustURL(t, st), store.NoRedaction))
	data := []byte("raced")
	d, _, err := a.Put(ctx, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	for range 50 {
		cut := time.Now()
		var wg sync.WaitGroup
		var found bool
		var herr error
		wg.Add(1)
		go func() {
			defer wg.Done()
			found, herr = a.Has(ctx, d)
		}()
		gone, err := b.Expire(ctx, d, cut)
		wg.Wait()
		if err != nil || herr != nil {
			t.Fatal(err, herr)
		}
		still, _ := b.Has(ctx, d)
		switch {
		case found && !still:
			t.Fatal("a Has found the blob after the cut, and Expire removed it")
		case !found && !gone:
			t.Fatal("a Has found nothing, and nothing was removed")
		}
		if !still {
			if _, _, err := a.Put(ctx, bytes.NewReader(data)); err != nil {
				t.Fatal(err)
			}
		}
		// Make the blob older than the next cut.
		time.Sleep(time.Millisecond)
	}
}
