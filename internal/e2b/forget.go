package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/event"
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
// that has not ended, and the tenant's deletion refuses while it exists
// (EndTenant ends them first, for a forced deletion).
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
	var gone []string
	s.mu.Lock()
	for id, sn := range s.snaps {
		if sn.Tenant == tenant {
			delete(s.snaps, id)
			gone = append(gone, id)
		}
	}
	s.mu.Unlock()
	// The tenant's deletion deletes its holds in the store too; these
	// are released here so that an interrupted deletion leaves none.
	for _, id := range gone {
		s.release(context.Background(), s.snapshotHolder(id))
	}
	return ForgetTenant(s.o.StateDir, tenant)
}

// EndTenant destroys every sandbox of tenant this Server holds, running,
// paused or frozen, removes their paused state and closes their records
// (cancelled, reason tenant_deleted), for a forced deletion of the
// tenant, and returns how many it ended. Another server's sandboxes of the
// tenant end on that server, once the deletion has closed their records
// (reapClosed).
func (s *Server) EndTenant(ctx context.Context, tenant string) int {
	n := 0
	for _, b := range s.all() {
		if b.tenant != tenant {
			continue
		}
		s.end(ctx, b, endTenantDeleted, "")
		n++
	}
	return n
}

// EndRecord destroys the sandbox whose record is runID if this Server
// holds it (running, paused or frozen), closing the record cancelled with
// a run.cancelled naming by and reason (an operator's `airlock runs
// cancel`), and reports whether it held it.
func (s *Server) EndRecord(ctx context.Context, runID, by, reason string) bool {
	for _, b := range s.all() {
		if b.rec.runID == runID {
			s.end(ctx, b, endKilled, "", event.RunCancelled{By: by, Reason: reason})
			s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.kill", Outcome: "ok", Run: runID, Detail: clipDetail("record cancelled by " + by + ": " + reason)})
			return true
		}
	}
	return false
}

// reapClosed ends the paused sandboxes whose records another process
// closed or deleted (a forced deletion of their tenant, run from another
// host): a paused sandbox renews no lease that would tell it, and a
// frozen one holds its processes and memory until it is ended.
func (s *Server) reapClosed(ctx context.Context) {
	for _, b := range s.all() {
		b.mu.Lock()
		paused := b.state == statePaused
		b.mu.Unlock()
		if paused {
			s.endIfClosed(ctx, b)
		}
	}
}
