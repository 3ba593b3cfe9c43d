package store

import (
	"context"
	"errors"
	"time"
)

// Upload is a workspace tarball a tenant uploaded through the API (POST
// /v1/uploads), kept for runs to start from: its id (what the client
// names it by), its tenant, the digest of its gzipped tar in the blob
// store, its size there and when it was stored.
type Upload struct {
	ID, Tenant, Digest string
	Size               int64
	Created            time.Time
}

// ErrOverBudget means an upload would take its tenant's stored uploads
// past their size budget.
var ErrOverBudget = errors.New("store: over the tenant's upload budget")

// Uploads keeps the uploads' records, so that they are found by id and
// tenant, counted against a size budget and deleted under the data
// policy (their own TTL, and with their tenant). An upload's blob is the
// caller's, as an artifact's is: deletions return the digests nothing
// names any more (no upload, artifact or event payload), whose blobs the
// caller deletes; and while an upload names a digest, no purge or
// retention pass frees it.
type Uploads interface {
	// PutUpload stores u (its Created set by the store) unless the
	// tenant's stored uploads and u would be over budget bytes
	// (ErrOverBudget; budget 0: no budget). The tenant must exist
	// (ErrNotFound) and not be being deleted (ErrConflict); an id stored
	// already gives ErrExists.
	PutUpload(ctx context.Context, u Upload, budget int64) (Upload, error)
	// GetUpload returns tenant's upload id; another tenant's is
	// ErrNotFound, as one that does not exist.
	GetUpload(ctx context.Context, tenant, id string) (Upload, error)
	// UploadUsage returns how many uploads tenant keeps and their bytes.
	UploadUsage(ctx context.Context, tenant string) (n, bytes int64, err error)
	// ExpireUploads deletes tenant's uploads stored before before and
	// returns how many, and the digests of their blobs that nothing names
	// any more.
	ExpireUploads(ctx context.Context, tenant string, before time.Time) (n int64, free []string, err error)
	// UploadDigests returns the digests every upload (of every tenant)
	// names, each once: what a blob collection keeps.
	UploadDigests(ctx context.Context) ([]string, error)
}
