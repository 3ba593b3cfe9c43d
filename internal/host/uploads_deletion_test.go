package host

import (
	"bytes"
	"context"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
)

// TestUploadDeletionMarkers: an upload deleted with its tenant, or by
// its tenant's upload retention, leaves nothing of its content anywhere:
// every file of the home and, on PostgreSQL, every row of every table
// (bytea as hex too) is searched for it; another tenant's upload stays.
// On SQLite and PostgreSQL.
func TestUploadDeletionMarkers(t *testing.T) {
	onBothStores(t, []string{"gone", "acme", "keep"}, func(t *testing.T, h *Host, st store.Store) {
		ctx := context.Background()
		rs, err := h.run()
		if err != nil {
			t.Fatal(err)
		}
		const (
			tenantMarker = "UPLOAD-TENANT-MARKER-5c1e"
			ttlMarker    = "UPLOAD-TTL-MARKER-9d2f"
			keepMarker   = "UPLOAD-KEEP-MARKER-0a7b"
		)
		upload := func(tenant, id, content string) {
			t.Helper()
			d, n, err := rs.blobs.Put(ctx, bytes.NewReader([]byte("workspace "+content)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := st.PutUpload(ctx, store.Upload{ID: id, Tenant: tenant, Digest: d, Size: n}, 0); err != nil {
				t.Fatal(err)
			}
		}
		upload("gone", "upl_gone", tenantMarker)
		upload("acme", "upl_acme", ttlMarker)
		upload("keep", "upl_keep", keepMarker)
		for _, m := range []string{tenantMarker, ttlMarker, keepMarker} {
			if !holds(t, h, m) {
				t.Fatalf("the search does not find %s before the deletions: it proves nothing", m)
			}
		}
		rec, err := h.DeleteTenant(ctx, "gone", "test", false)
		if err != nil {
			t.Fatal(err)
		}
		if rec.Counts["uploads"] != 1 {
			t.Errorf("the tenant's deletion counts %v, want 1 upload", rec.Counts)
		}
		rules := RetentionRules{Tenants: map[string]Retention{"acme": {Uploads: time.Minute}}}
		sw, err := h.Sweep(ctx, rules, time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if sw.Uploads != 1 {
			t.Errorf("Sweep() = %+v, want 1 upload deleted (acme's; keep has no rule)", sw)
		}
		for _, m := range []string{tenantMarker, ttlMarker} {
			if holds(t, h, m) {
				t.Errorf("%s is still in the home or the database after its deletion", m)
			}
		}
		if !holds(t, h, keepMarker) {
			t.Error("another tenant's upload went")
		}
		if _, err := st.GetUpload(ctx, "keep", "upl_keep"); err != nil {
			t.Errorf("GetUpload(keep) = %v", err)
		}
	})
}

// holds reports whether marker is in any file of h's home or, on
// PostgreSQL, in any row of any table of its database (text, or bytea in
// hex).
func holds(t *testing.T, h *Host, marker string) bool {
	t.Helper()
	found := false
	err := filepath.WalkDir(h.cfg.Home, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || found {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		found = bytes.Contains(b, []byte(marker))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found || h.cfg.Store == "" {
		return found
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, h.cfg.Store)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT table_name FROM information_schema.tables WHERE table_schema = current_schema() AND table_type = 'BASE TABLE'`)
	if err != nil {
		t.Fatal(err)
	}
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(tables) < 10 {
		t.Fatalf("tables %v, %v", tables, err)
	}
	hexMarker := hex.EncodeToString([]byte(marker))
	for _, tb := range tables {
		rows, err := conn.Query(ctx, `SELECT t::text FROM `+pgx.Identifier{tb}.Sanitize()+` t`)
		if err != nil {
			t.Fatal(err)
		}
		texts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			if bytes.Contains([]byte(s), []byte(marker)) || bytes.Contains([]byte(s), []byte(hexMarker)) {
				return true
			}
		}
	}
	return false
}
