package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// uploadDigest is the digest of upload blob n.
func uploadDigest(n int) string { return fmt.Sprintf("sha256:%064x", 0x70000+n) }

// testUploads: uploads are kept per tenant (another tenant's is not
// found), once per id, within a tenant's budget (refused past it, nothing
// stored), only for a tenant that exists and is not being deleted; they
// expire by age per tenant, and a deletion frees a blob only when no
// upload, artifact or event names it any more; a tenant's go with it.
func testUploads(t *testing.T, f Factory) {
	if f.NewAt == nil {
		t.Skip("the factory has no NewAt")
	}
	var mu sync.Mutex
	now := base
	s := f.NewAt(t, func() time.Time { mu.Lock(); defer mu.Unlock(); return now })
	t.Cleanup(func() { s.Close() })
	at := func(d time.Duration) { mu.Lock(); now = base.Add(d); mu.Unlock() }
	ctx := context.Background()
	for _, tn := range []string{"acme", "other", "gone"} {
		createTenant(t, s, tn)
	}
	put := func(id, tenant string, n int, size, budget int64) (store.Upload, error) {
		return s.PutUpload(ctx, store.Upload{ID: id, Tenant: tenant, Digest: uploadDigest(n), Size: size}, budget)
	}
	u, err := put("upl_a1", "acme", 1, 100, 0)
	if err != nil || !u.Created.Equal(base) {
		t.Fatalf("PutUpload() = %+v, %v; want created at %v", u, err, base)
	}
	got, err := s.GetUpload(ctx, "acme", "upl_a1")
	if err != nil || got != u {
		t.Fatalf("GetUpload() = %+v, %v; want %+v", got, err, u)
	}
	_, err = s.GetUpload(ctx, "other", "upl_a1")
	wantErr(t, "GetUpload(another tenant's)", err, store.ErrNotFound)
	_, err = s.GetUpload(ctx, "acme", "upl_none")
	wantErr(t, "GetUpload(none)", err, store.ErrNotFound)
	_, err = put("upl_a1", "acme", 2, 1, 0)
	wantErr(t, "PutUpload(same id)", err, store.ErrExists)
	_, err = put("upl_x", "ghost", 2, 1, 0)
	wantErr(t, "PutUpload(no such tenant)", err, store.ErrNotFound)
	for _, bad := range []store.Upload{
		{ID: "", Tenant: "acme", Digest: uploadDigest(2)},
		{ID: "upl_b", Tenant: "", Digest: uploadDigest(2)},
		{ID: "upl_b", Tenant: "acme", Digest: "sha256:abc"},
		{ID: "upl_b", Tenant: "acme", Digest: uploadDigest(2), Size: -1},
	} {
		_, err := s.PutUpload(ctx, bad, 0)
		wantErr(t, fmt.Sprintf("PutUpload(%+v)", bad), err, store.ErrInvalid)
	}

	// The budget: 100 stored; 50 more fit 150, not 149; the other
	// tenant's uploads are its own.
	_, err = put("upl_a2", "acme", 2, 50, 149)
	wantErr(t, "PutUpload(over budget)", err, store.ErrOverBudget)
	if _, err := s.GetUpload(ctx, "acme", "upl_a2"); err == nil {
		t.Error("an upload refused for the budget was stored")
	}
	at(time.Hour)
	if _, err := put("upl_a2", "acme", 2, 50, 150); err != nil {
		t.Fatalf("PutUpload(fits the budget) = %v", err)
	}
	if _, err := put("upl_o1", "other", 1, 500, 500); err != nil {
		t.Fatalf("PutUpload(other's, its own budget) = %v", err)
	}
	if n, b, err := s.UploadUsage(ctx, "acme"); err != nil || n != 2 || b != 150 {
		t.Errorf("UploadUsage(acme) = %d, %d, %v; want 2, 150", n, b, err)
	}

	// Two uploads at once with room for one: one is stored.
	createTenant(t, s, "race")
	var wg sync.WaitGroup
	errs := make([]error, 8)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = put(fmt.Sprintf("upl_r%d", i), "race", 10+i, 60, 100)
		}()
	}
	wg.Wait()
	if n, b, err := s.UploadUsage(ctx, "race"); err != nil || n != 1 || b != 60 {
		t.Errorf("UploadUsage(race) after 8 uploads at once into room for one = %d, %d, %v; want 1, 60 (%v)", n, b, err, errs)
	}

	// A run of acme names upload 2's blob (it started from it): expiring
	// the uploads older than 30 minutes frees upload 1's blob, which
	// other's upload also names, so nothing; then other's goes, and
	// with it the blob.
	r, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(1), Tenant: "acme", Status: event.StatusQueued},
		[]event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"tar":"` + uploadDigest(2) + `"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	n, free, err := s.ExpireUploads(ctx, "acme", base.Add(30*time.Minute))
	if err != nil || n != 1 || len(free) != 0 {
		t.Fatalf("ExpireUploads(acme, 30m) = %d, %v, %v; want 1, none free (other's upload names the blob)", n, free, err)
	}
	if _, err := s.GetUpload(ctx, "acme", "upl_a1"); err == nil {
		t.Error("an expired upload is still found")
	}
	if _, err := s.GetUpload(ctx, "acme", "upl_a2"); err != nil {
		t.Errorf("GetUpload(younger) = %v", err)
	}
	n, free, err = s.ExpireUploads(ctx, "other", base.Add(2*time.Hour))
	if err != nil || n != 1 || !slices.Equal(free, []string{uploadDigest(1)}) {
		t.Errorf("ExpireUploads(other) = %d, %v, %v; want 1, [%s]", n, free, err, uploadDigest(1))
	}
	n, free, err = s.ExpireUploads(ctx, "acme", base.Add(2*time.Hour))
	if err != nil || n != 1 || len(free) != 0 {
		t.Errorf("ExpireUploads(acme, the run's) = %d, %v, %v; want 1, none free (the run's event names it)", n, free, err)
	}
	// The run purged, its event no longer names the blob: it is free.
	if _, err := s.UpdateRunStatus(ctx, r.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	if _, free, err := s.PurgeRun(ctx, r.ID, store.Deletion{Actor: "t"}); err != nil || !slices.Equal(free, []string{uploadDigest(2)}) {
		t.Errorf("PurgeRun() free = %v, %v; want [%s]", free, err, uploadDigest(2))
	}

	// A purge does not free a blob an upload names.
	if _, err := put("upl_g1", "gone", 3, 10, 0); err != nil {
		t.Fatal(err)
	}
	r2, _, err := s.CreateRunWith(ctx, store.Run{ID: runID(2), Tenant: "acme", Status: event.StatusQueued},
		[]event.Event{{Type: event.TypeRetry, Payload: json.RawMessage(`{"tar":"` + uploadDigest(3) + `"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateRunStatus(ctx, r2.ID, event.StatusQueued, event.StatusCancelled); err != nil {
		t.Fatal(err)
	}
	if _, free, err := s.PurgeRun(ctx, r2.ID, store.Deletion{Actor: "t"}); err != nil || len(free) != 0 {
		t.Errorf("PurgeRun(a run naming an upload's blob) free = %v, %v; want none", free, err)
	}

	// A tenant being deleted takes no upload; its deletion takes its
	// uploads, counts them and frees their blobs.
	if _, err := s.MarkTenantDeleting(ctx, "gone"); err != nil {
		t.Fatal(err)
	}
	_, err = put("upl_g2", "gone", 4, 1, 0)
	wantErr(t, "PutUpload(tenant being deleted)", err, store.ErrConflict)
	rec, free, err := s.DeleteTenant(ctx, "gone", store.Deletion{Actor: "t"})
	if err != nil || rec.Counts["uploads"] != 1 || !slices.Equal(free, []string{uploadDigest(3)}) {
		t.Errorf("DeleteTenant() = %v, free %v, %v; want 1 upload, [%s] free", rec.Counts, free, err, uploadDigest(3))
	}
	if n, _, err := s.UploadUsage(ctx, "gone"); err != nil || n != 0 {
		t.Errorf("UploadUsage(deleted tenant) = %d, %v", n, err)
	}
}
