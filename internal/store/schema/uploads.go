package schema

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// The uploads of store.Uploads, written once over Tx for both dialects.

// MaxUploadID bounds an upload's id.
const MaxUploadID = 128

// CheckUpload refuses an upload a store must not keep.
func CheckUpload(u store.Upload) error {
	switch {
	case u.ID == "" || len(u.ID) > MaxUploadID:
		return fmt.Errorf("%w: upload: id must be 1 to %d bytes", store.ErrInvalid, MaxUploadID)
	case u.Tenant == "" || len(u.Tenant) > store.MaxTenantLen:
		return fmt.Errorf("%w: upload: tenant must be 1 to %d bytes", store.ErrInvalid, store.MaxTenantLen)
	case blob.ValidDigest(u.Digest) != nil:
		return fmt.Errorf("%w: upload: digest %q", store.ErrInvalid, u.Digest)
	case u.Size < 0:
		return fmt.Errorf("%w: upload: size %d", store.ErrInvalid, u.Size)
	}
	return nil
}

// PutUpload implements store.Uploads.PutUpload in tx at nowNS. On
// PostgreSQL it holds the tenant's row lock (FOR UPDATE) from the budget's
// sum to the commit, so two uploads of a tenant at once cannot both fit
// a budget that has room for one, and a tenant's deletion (which deletes
// that row) either sees the upload or refuses it; SQLite has one writer.
func (d Dialect) PutUpload(ctx context.Context, tx Tx, u store.Upload, budget, nowNS int64) (store.Upload, error) {
	lock := ""
	if d == Postgres {
		lock = " FOR UPDATE"
	}
	var deleting *int64
	err := d.queryOne(ctx, tx, `SELECT deleting_ns FROM tenants WHERE name = `+d.Param(1)+lock, []any{u.Tenant}, &deleting)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return u, store.TenantNotFound(store.Clip(u.Tenant))
	case err != nil:
		return u, fmt.Errorf("upload: tenant: %w", err)
	case deleting != nil:
		return u, store.TenantDeletingError(u.Tenant)
	}
	if budget > 0 {
		_, used, err := d.UploadUsage(ctx, tx, u.Tenant)
		if err != nil {
			return u, err
		}
		if used+u.Size > budget {
			return u, fmt.Errorf("%w: %d bytes stored, %d more, budget %d", store.ErrOverBudget, used, u.Size, budget)
		}
	}
	var one int64
	err = d.queryOne(ctx, tx, `SELECT 1 FROM uploads WHERE id = `+d.Param(1), []any{u.ID}, &one)
	switch {
	case err == nil:
		return u, fmt.Errorf("upload %s: %w", u.ID, store.ErrExists)
	case !errors.Is(err, store.ErrNotFound):
		return u, fmt.Errorf("upload: %w", err)
	}
	u.Created = time.Unix(0, nowNS).UTC()
	q := `INSERT INTO uploads (id, tenant, digest, size, created_ns) VALUES (` +
		d.Param(1) + `, ` + d.Param(2) + `, ` + d.Param(3) + `, ` + d.Param(4) + `, ` + d.Param(5) + `)`
	if err := tx.Exec(ctx, q, u.ID, u.Tenant, u.Digest, u.Size, nowNS); err != nil {
		return u, fmt.Errorf("store upload: %w", err)
	}
	return u, nil
}

// GetUpload implements store.Uploads.GetUpload in tx.
func (d Dialect) GetUpload(ctx context.Context, tx Tx, tenant, id string) (store.Upload, error) {
	u := store.Upload{ID: id, Tenant: tenant}
	var ns int64
	err := d.queryOne(ctx, tx, `SELECT digest, size, created_ns FROM uploads WHERE id = `+d.Param(1)+` AND tenant = `+d.Param(2),
		[]any{id, tenant}, &u.Digest, &u.Size, &ns)
	if errors.Is(err, store.ErrNotFound) {
		return store.Upload{}, fmt.Errorf("upload %s: %w", store.Clip(id), store.ErrNotFound)
	}
	if err != nil {
		return store.Upload{}, fmt.Errorf("upload: %w", err)
	}
	u.Created = time.Unix(0, ns).UTC()
	return u, nil
}

// UploadUsage implements store.Uploads.UploadUsage in tx.
func (d Dialect) UploadUsage(ctx context.Context, tx Tx, tenant string) (n, bytes int64, err error) {
	err = d.queryOne(ctx, tx, `SELECT COUNT(*), COALESCE(SUM(size), 0) FROM uploads WHERE tenant = `+d.Param(1), []any{tenant}, &n, &bytes)
	if err != nil {
		return 0, 0, fmt.Errorf("upload usage: %w", err)
	}
	return n, bytes, nil
}

// ExpireUploads implements store.Uploads.ExpireUploads in tx.
func (d Dialect) ExpireUploads(ctx context.Context, tx Tx, tenant string, before time.Time) (int64, []string, error) {
	return d.deleteUploads(ctx, tx, `tenant = `+d.Param(1)+` AND created_ns < `+d.Param(2), tenant, before.UnixNano())
}

// UploadDigests implements store.Uploads.UploadDigests in tx.
func (d Dialect) UploadDigests(ctx context.Context, tx Tx) ([]string, error) {
	var out []string
	err := tx.Query(ctx, `SELECT DISTINCT digest FROM uploads ORDER BY digest`, nil, func(scan func(...any) error) error {
		var dg string
		if err := scan(&dg); err != nil {
			return err
		}
		out = append(out, dg)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("upload digests: %w", err)
	}
	return out, nil
}

// deleteUploads deletes the uploads where cond holds (its parameters
// args) and returns how many, and the digests of their blobs that
// nothing names any more (unreferenced, after the deletion).
func (d Dialect) deleteUploads(ctx context.Context, tx Tx, cond string, args ...any) (int64, []string, error) {
	seen := map[string]bool{}
	var digests []string
	var n int64
	err := tx.Query(ctx, `SELECT digest FROM uploads WHERE `+cond, args, func(scan func(...any) error) error {
		var dg string
		if err := scan(&dg); err != nil {
			return err
		}
		n++
		if !seen[dg] {
			seen[dg] = true
			digests = append(digests, dg)
		}
		return nil
	})
	if err != nil {
		return 0, nil, fmt.Errorf("read uploads: %w", err)
	}
	if n == 0 {
		return 0, nil, nil
	}
	if err := tx.Exec(ctx, `DELETE FROM uploads WHERE `+cond, args...); err != nil {
		return 0, nil, fmt.Errorf("delete uploads: %w", err)
	}
	free, err := d.unreferenced(ctx, tx, digests)
	return n, free, err
}
