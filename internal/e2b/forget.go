package e2b

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// ForgetTenant deletes the records of tenant's snapshots in stateDir (the
// E2B API's state directory), for the deletion of the tenant, and returns
// how many went. A record holds the tenant's data (its name, its policy
// document, its template's environment) and keeps its checkpoint a root
// of the chunk collection: once it is gone the next collection removes
// the checkpoint's chunks. A record that does not read names no tenant
// this can check and stays; a missing directory holds none.
//
// Paused sandboxes are not touched: their record is a run of the tenant
// that has not ended, and the tenant's deletion refuses while it exists.
func ForgetTenant(stateDir, tenant string) (int, error) {
	dir := filepath.Join(stateDir, "snapshots")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("e2b: forget tenant %s: %w", tenant, err)
	}
	n := 0
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !strings.HasPrefix(id, snapshotIDPrefix) {
			continue
		}
		path := filepath.Join(dir, e.Name())
		sn, err := readSnapshot(path)
		if err != nil || sn.Tenant != tenant {
			continue
		}
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return n, fmt.Errorf("e2b: forget tenant %s: snapshot %s: %w", tenant, id, err)
		}
		n++
	}
	return n, nil
}

// ForgetTenant is the package's ForgetTenant for the server's state
// directory, and drops tenant's snapshots from the server's memory too, so
// that no one (a tenant made later under the same name) can start a
// sandbox from one.
func (s *Server) ForgetTenant(tenant string) (int, error) {
	s.mu.Lock()
	for id, sn := range s.snaps {
		if sn.Tenant == tenant {
			delete(s.snaps, id)
		}
	}
	s.mu.Unlock()
	return ForgetTenant(s.o.StateDir, tenant)
}
