package e2b

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestForgetTenant: a deleted tenant's snapshot records go, from the
// state directory (with the policy document and name they held) and from
// a running server's memory; another tenant's stay, and so does a record
// that does not read.
func TestForgetTenant(t *testing.T) {
	dir := t.TempDir()
	const marker = "MARKER-f0rget-7c1e"
	write := func(i int, tenant string) string {
		t.Helper()
		sn := &snapshot{
			ID: fmt.Sprintf("%s%020d", snapshotIDPrefix, i), Tenant: tenant, SandboxID: "sbx", Name: "snap-of-" + tenant,
			Checkpoint: fmt.Sprintf("sha256:%064x", i), Created: time.Now().UTC(),
			Policy: json.RawMessage(`{"doc":"` + tenant + " " + marker + `"}`),
		}
		raw, err := json.Marshal(sn)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, "snapshots"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := writeFileAtomic(filepath.Join(dir, "snapshots", sn.ID+".json"), raw); err != nil {
			t.Fatal(err)
		}
		return sn.ID
	}
	gone1, gone2, kept := write(1, "acme"), write(2, "acme"), write(3, "other")
	broken := filepath.Join(dir, "snapshots", snapshotIDPrefix+"broken.json")
	if err := os.WriteFile(broken, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	snaps, err := loadSnapshots(filepath.Join(dir, "snapshots"), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{o: Options{StateDir: dir}, snaps: snaps}

	n, err := s.ForgetTenant("acme")
	if err != nil || n != 2 {
		t.Fatalf("ForgetTenant(acme) = %d, %v; want 2", n, err)
	}
	for _, id := range []string{gone1, gone2} {
		if _, err := os.Stat(filepath.Join(dir, "snapshots", id+".json")); !os.IsNotExist(err) {
			t.Errorf("snapshot %s's record: %v, want gone", id, err)
		}
		if s.snaps[id] != nil {
			t.Errorf("snapshot %s is still in the server's memory", id)
		}
	}
	if s.snaps[kept] == nil {
		t.Errorf("another tenant's snapshot %s left the server's memory", kept)
	}
	if _, err := os.Stat(broken); err != nil {
		t.Errorf("a record that does not read: %v, want kept", err)
	}
	// Only the other tenant's record holds the marker now.
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte("acme "+marker)) {
			t.Errorf("%s still holds the deleted tenant's marker", p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n, err := ForgetTenant(t.TempDir(), "acme"); err != nil || n != 0 {
		t.Errorf("ForgetTenant(no state) = %d, %v", n, err)
	}
}
