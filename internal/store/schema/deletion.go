package schema

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// The deletions of a data policy (store.Deletions), written once over Tx
// for both dialects, as Migrate is, so that what a purge or a tenant
// deletion removes cannot differ between the stores. Each runs in the one
// transaction its store gives it; the store commits it.

// blobDigest matches a blob's name (package blob) in a payload.
var blobDigest = regexp.MustCompile(`sha256:[0-9a-f]{64}`)

// tombstonePage is how many events TombstonePayloads reads at once.
const tombstonePage = 256

// TombstonePayloads implements store.Deletions.TombstonePayloads in tx.
func (d Dialect) TombstonePayloads(ctx context.Context, tx Tx, runID string, at time.Time, reason string) (replaced, kept int64, free []string, err error) {
	return d.tombstone(ctx, tx, runID, "", at, reason)
}

// TombstoneCheckpoints implements store.Deletions.TombstoneCheckpoints
// in tx.
func (d Dialect) TombstoneCheckpoints(ctx context.Context, tx Tx, runID string, at time.Time, reason string) (replaced int64, err error) {
	replaced, _, _, err = d.tombstone(ctx, tx, runID, event.TypeSnapshotTaken, at, reason)
	return replaced, err
}

// DeleteArtifacts implements store.Deletions.DeleteArtifacts in tx.
func (d Dialect) DeleteArtifacts(ctx context.Context, tx Tx, runID string, at time.Time, reason string) (deleted int64, free []string, err error) {
	if _, _, _, err := d.tombstone(ctx, tx, runID, event.TypeArtifactStored, at, reason); err != nil {
		return 0, nil, err
	}
	var digests []string
	err = tx.Query(ctx, `SELECT DISTINCT digest FROM artifacts WHERE run_id = `+d.Param(1), []any{runID},
		func(scan func(...any) error) error {
			var dg string
			if err := scan(&dg); err != nil {
				return err
			}
			digests = append(digests, dg)
			return nil
		})
	if err != nil {
		return 0, nil, fmt.Errorf("read artifact digests: %w", err)
	}
	if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM artifacts WHERE run_id = `+d.Param(1), []any{runID}, &deleted); err != nil {
		return 0, nil, fmt.Errorf("count artifacts: %w", err)
	}
	if deleted == 0 {
		return 0, nil, nil
	}
	if err := tx.Exec(ctx, `DELETE FROM artifacts WHERE run_id = `+d.Param(1), runID); err != nil {
		return 0, nil, fmt.Errorf("delete artifacts: %w", err)
	}
	free, err = d.unreferenced(ctx, tx, digests)
	return deleted, free, err
}

// tombstone replaces the payloads of run runID's events of type only
// (every type when ""), clearing the run's task when every type.
func (d Dialect) tombstone(ctx context.Context, tx Tx, runID string, only event.Type, at time.Time, reason string) (replaced, kept int64, free []string, err error) {
	if err := d.runExists(ctx, tx, runID); err != nil {
		return 0, 0, nil, err
	}
	seen := map[string]bool{}
	var digests []string
	typeCond := ""
	if only != "" {
		typeCond = ` AND type = '` + string(only) + `'` // a constant of package event
	}
	sel := `SELECT seq, type, time_ns, payload, prev_hash, hash FROM events WHERE run_id = ` + d.Param(1) + typeCond +
		` AND seq >= ` + d.Param(2) + ` ORDER BY seq LIMIT ` + d.Param(3)
	upd := `UPDATE events SET payload = ` + d.Param(1) + ` WHERE run_id = ` + d.Param(2) + ` AND seq = ` + d.Param(3)
	for from := int64(1); ; {
		var page []event.Event
		err := tx.Query(ctx, sel, []any{runID, from, tombstonePage}, func(scan func(...any) error) error {
			e := event.Event{RunID: runID}
			var ns int64
			var typ string
			var payload, prev, hash []byte
			if err := scan(&e.Seq, &typ, &ns, &payload, &prev, &hash); err != nil {
				return err
			}
			e.Type, e.Payload, e.Time = event.Type(typ), payload, time.Unix(0, ns).UTC()
			copy(e.PrevHash[:], prev)
			copy(e.Hash[:], hash)
			page = append(page, e)
			return nil
		})
		if err != nil {
			return replaced, kept, nil, fmt.Errorf("read events: %w", err)
		}
		for _, e := range page {
			t, err := event.Tombstone(e, at, reason)
			switch {
			case errors.Is(err, event.ErrV1Payload):
				kept++
				continue
			case err != nil:
				return replaced, kept, nil, err
			case string(t.Payload) == string(e.Payload):
				continue // already a tombstone
			}
			digests = namedBlobs(string(e.Type), e.Payload, seen, digests)
			if err := tx.Exec(ctx, upd, []byte(t.Payload), runID, e.Seq); err != nil {
				return replaced, kept, nil, fmt.Errorf("replace payload %d: %w", e.Seq, err)
			}
			replaced++
		}
		if len(page) < tombstonePage {
			break
		}
		from = page[len(page)-1].Seq + 1
	}
	if only != "" {
		free, err = d.unreferenced(ctx, tx, digests)
		return replaced, kept, free, err
	}
	if err := tx.Exec(ctx, `UPDATE runs SET task = '' WHERE id = `+d.Param(1), runID); err != nil {
		return replaced, kept, nil, fmt.Errorf("clear task: %w", err)
	}
	free, err = d.unreferenced(ctx, tx, digests)
	return replaced, kept, free, err
}

// PurgeRun implements store.Deletions.PurgeRun in tx, recording rec at
// nowNS.
func (d Dialect) PurgeRun(ctx context.Context, tx Tx, runID string, rec store.Deletion, nowNS int64) (store.Deletion, []string, error) {
	var tenant, status string
	err := d.queryOne(ctx, tx, `SELECT tenant, status FROM runs WHERE id = `+d.Param(1), []any{runID}, &tenant, &status)
	if err != nil {
		return rec, nil, err
	}
	// The run and its forks, parents before children; deleted children
	// first (a fork names its parent). None may still be going: the
	// process driving it would write into a run that is gone.
	ids := []string{runID}
	live := func(id, status string) error {
		if event.Status(status).Final() {
			return nil
		}
		return fmt.Errorf("%w: run %s is %s: a run is purged once it and its forks have ended", store.ErrConflict, id, status)
	}
	if err := live(runID, status); err != nil {
		return rec, nil, err
	}
	for i := 0; i < len(ids); i++ {
		err := tx.Query(ctx, `SELECT id, status FROM runs WHERE parent_run_id = `+d.Param(1)+` ORDER BY id`, []any{ids[i]},
			func(scan func(...any) error) error {
				var id, status string
				if err := scan(&id, &status); err != nil {
					return err
				}
				ids = append(ids, id)
				return live(id, status)
			})
		if err != nil {
			return rec, nil, fmt.Errorf("find forks of %s: %w", ids[i], err)
		}
	}
	slices.Reverse(ids)
	rec.Tenant, rec.Kind, rec.Target = tenant, store.DeletionRun, runID
	rec.Counts = maps.Clone(rec.Counts)
	if rec.Counts == nil {
		rec.Counts = map[string]int64{}
	}
	digests, err := d.deleteRuns(ctx, tx, `id = `+d.Param(1), ids, rec.Counts)
	if err != nil {
		return rec, nil, err
	}
	rec, err = d.RecordDeletion(ctx, tx, rec, nowNS)
	return rec, digests, err
}

// DeleteTenant implements store.Deletions.DeleteTenant in tx, recording
// rec at nowNS.
func (d Dialect) DeleteTenant(ctx context.Context, tx Tx, tenant string, rec store.Deletion, nowNS int64) (store.Deletion, []string, error) {
	var name string
	err := d.queryOne(ctx, tx, `SELECT name FROM tenants WHERE name = `+d.Param(1), []any{tenant}, &name)
	if err != nil {
		return rec, nil, fmt.Errorf("tenant %s: %w", store.Clip(tenant), err)
	}
	rec.Tenant, rec.Kind, rec.Target = tenant, store.DeletionTenant, tenant
	rec.Counts = maps.Clone(rec.Counts)
	if rec.Counts == nil {
		rec.Counts = map[string]int64{}
	}
	// None of its runs may still be going (as PurgeRun): checked here, in
	// the deletion's transaction, so a run created meanwhile is seen too.
	err = tx.Query(ctx, `SELECT id, status FROM runs WHERE tenant = `+d.Param(1)+` ORDER BY id`, []any{tenant},
		func(scan func(...any) error) error {
			var id, status string
			if err := scan(&id, &status); err != nil {
				return err
			}
			if event.Status(status).Final() {
				return nil
			}
			return fmt.Errorf("%w: run %s is %s: a tenant is deleted once all its runs have ended", store.ErrConflict, id, status)
		})
	if err != nil {
		return rec, nil, err
	}
	// Forks never cross tenants; unlink them within the tenant so its
	// runs can go in any order.
	if err := tx.Exec(ctx, `UPDATE runs SET parent_run_id = NULL WHERE tenant = `+d.Param(1), tenant); err != nil {
		return rec, nil, fmt.Errorf("unlink forks: %w", err)
	}
	digests, err := d.deleteRuns(ctx, tx, `tenant = `+d.Param(1), []string{tenant}, rec.Counts)
	if err != nil {
		return rec, nil, err
	}
	for _, t := range []struct{ table, count string }{
		{"ledger", "ledger_entries"},
		{"policies", "policy_versions"},
		{"templates", "template_versions"},
		{"api_keys", "api_keys"},
		{"tenants", "tenants"},
	} {
		col := "tenant"
		if t.table == "tenants" {
			col = "name"
		}
		n, err := d.deleteCount(ctx, tx, t.table, col+` = `+d.Param(1), tenant)
		if err != nil {
			return rec, nil, err
		}
		rec.Counts[t.count] = n
	}
	// Its checkpoints' holds (store.CheckpointHolds): their chunks go
	// with the next collection.
	n, err := d.deleteCount(ctx, tx, "checkpoint_holds", `tenant = `+d.Param(1), tenant)
	if err != nil {
		return rec, nil, err
	}
	if n > 0 {
		rec.Counts["checkpoint_holds"] = n
	}
	// Its E2B snapshots' records (store.E2BSnapshots): their
	// checkpoints' holds went above.
	if n, err = d.deleteCount(ctx, tx, "e2b_snapshots", `tenant = `+d.Param(1), tenant); err != nil {
		return rec, nil, err
	}
	if n > 0 {
		rec.Counts["e2b_snapshots"] = n
	}
	// Its web UI sessions (store.UISessions): its keys went above.
	if n, err = d.deleteCount(ctx, tx, "ui_sessions", `tenant = `+d.Param(1), tenant); err != nil {
		return rec, nil, err
	}
	if n > 0 {
		rec.Counts["ui_sessions"] = n
	}
	// What its sandboxes outside runs reported (store.SandboxEvents).
	if n, err = d.deleteCount(ctx, tx, "sandbox_events", `tenant = `+d.Param(1), tenant); err != nil {
		return rec, nil, err
	}
	if n > 0 {
		rec.Counts["sandbox_events"] = n
	}
	// Its uploads (store.Uploads), and their blobs unless another
	// tenant's upload, or what is left, names them.
	n, freeUploads, err := d.deleteUploads(ctx, tx, `tenant = `+d.Param(1), tenant)
	if err != nil {
		return rec, nil, err
	}
	if n > 0 {
		rec.Counts["uploads"] = n
	}
	for _, dg := range freeUploads {
		if !slices.Contains(digests, dg) {
			digests = append(digests, dg)
		}
	}
	rec, err = d.RecordDeletion(ctx, tx, rec, nowNS)
	return rec, digests, err
}

// deleteRuns deletes, for each arg, the runs where cond (one parameter)
// holds, with their events, artifacts and metadata, adding to counts, and
// returns the digests of the artifacts deleted that no artifact left
// refers to.
func (d Dialect) deleteRuns(ctx context.Context, tx Tx, cond string, args []string, counts map[string]int64) ([]string, error) {
	seen := map[string]bool{}
	var digests []string
	for _, arg := range args {
		err := tx.Query(ctx, `SELECT DISTINCT digest FROM artifacts WHERE run_id IN (SELECT id FROM runs WHERE `+cond+`)`, []any{arg},
			func(scan func(...any) error) error {
				var dg string
				if err := scan(&dg); err != nil {
					return err
				}
				if !seen[dg] {
					seen[dg] = true
					digests = append(digests, dg)
				}
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("read artifact digests: %w", err)
		}
		in := `run_id IN (SELECT id FROM runs WHERE ` + cond + `)`
		// Blobs the events name: a scripted run's script, a workspace
		// tar, a fetched tree...
		err = tx.Query(ctx, `SELECT type, payload FROM events WHERE `+in, []any{arg},
			func(scan func(...any) error) error {
				var typ string
				var payload []byte
				if err := scan(&typ, &payload); err != nil {
					return err
				}
				digests = namedBlobs(typ, payload, seen, digests)
				return nil
			})
		if err != nil {
			return nil, fmt.Errorf("read the digests events name: %w", err)
		}
		for _, t := range []struct{ table, count string }{
			{"events", "events"},
			{"artifacts", "artifacts"},
			{"run_metadata", "metadata"},
		} {
			n, err := d.deleteCount(ctx, tx, t.table, in, arg)
			if err != nil {
				return nil, err
			}
			counts[t.count] += n
		}
		n, err := d.deleteCount(ctx, tx, "runs", cond, arg)
		if err != nil {
			return nil, err
		}
		counts["runs"] += n
	}
	return d.unreferenced(ctx, tx, digests)
}

// unreferenced returns those of digests that no artifact, no upload and
// no event payload names any more.
func (d Dialect) unreferenced(ctx context.Context, tx Tx, digests []string) ([]string, error) {
	var free []string
	for _, dg := range digests {
		var n, m, u int64
		if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM artifacts WHERE digest = `+d.Param(1), []any{dg}, &n); err != nil {
			return nil, fmt.Errorf("count references to %s: %w", dg, err)
		}
		if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM uploads WHERE digest = `+d.Param(1), []any{dg}, &u); err != nil {
			return nil, fmt.Errorf("count uploads of %s: %w", dg, err)
		}
		if n+u > 0 {
			continue
		}
		// A digest has no LIKE wildcard in it (blobDigest), so this
		// finds exactly the payloads that name it.
		q := `SELECT COUNT(*) FROM events WHERE instr(CAST(payload AS TEXT), ` + d.Param(1) + `) > 0`
		var arg any = dg
		if d == Postgres {
			q = `SELECT COUNT(*) FROM events WHERE position(` + d.Param(1) + ` in payload) > 0`
			arg = []byte(dg)
		}
		if err := d.queryOne(ctx, tx, q, []any{arg}, &m); err != nil {
			return nil, fmt.Errorf("count events naming %s: %w", dg, err)
		}
		if m == 0 {
			free = append(free, dg)
		}
	}
	return free, nil
}

// namedBlobs adds to digests (and seen) the blobs payload names, but not
// checkpoint manifests: an E2B sandbox or snapshot may share them, and
// the checkpoint collection (airlock gc) owns them.
func namedBlobs(typ string, payload []byte, seen map[string]bool, digests []string) []string {
	if typ == string(event.TypeSnapshotTaken) && bytes.Contains(payload, []byte(`"format":"`+event.FormatCheckpoint+`"`)) {
		return digests
	}
	for _, m := range blobDigest.FindAll(payload, -1) {
		if dg := string(m); !seen[dg] {
			seen[dg] = true
			digests = append(digests, dg)
		}
	}
	return digests
}

// deleteCount deletes the rows of table where cond holds (one parameter,
// arg) and returns how many there were.
func (d Dialect) deleteCount(ctx context.Context, tx Tx, table, cond, arg string) (int64, error) {
	var n int64
	if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM `+table+` WHERE `+cond, []any{arg}, &n); err != nil {
		return 0, fmt.Errorf("count %s: %w", table, err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := tx.Exec(ctx, `DELETE FROM `+table+` WHERE `+cond, arg); err != nil {
		return 0, fmt.Errorf("delete %s: %w", table, err)
	}
	return n, nil
}

// RecordDeletion implements store.Deletions.RecordDeletion in tx at nowNS.
func (d Dialect) RecordDeletion(ctx context.Context, tx Tx, rec store.Deletion, nowNS int64) (store.Deletion, error) {
	if rec.Kind == "" || rec.Actor == "" {
		return rec, fmt.Errorf("%w: a deletion record needs a kind and an actor", store.ErrInvalid)
	}
	counts, err := json.Marshal(rec.Counts)
	if err != nil {
		return rec, fmt.Errorf("encode counts: %w", err)
	}
	if d == Postgres {
		// Ids are max + 1: serialize the writers of this table, as
		// SQLite's one writer does.
		if err := tx.Exec(ctx, `LOCK TABLE deletions IN EXCLUSIVE MODE`); err != nil {
			return rec, fmt.Errorf("lock deletions: %w", err)
		}
	}
	if err := d.queryOne(ctx, tx, `SELECT COALESCE(MAX(id), 0) + 1 FROM deletions`, nil, &rec.ID); err != nil {
		return rec, fmt.Errorf("number deletion: %w", err)
	}
	rec.Created = time.Unix(0, nowNS).UTC()
	err = tx.Exec(ctx, `INSERT INTO deletions (id, tenant, kind, target, actor, counts, created_ns) VALUES (`+
		d.Param(1)+`, `+d.Param(2)+`, `+d.Param(3)+`, `+d.Param(4)+`, `+d.Param(5)+`, `+d.Param(6)+`, `+d.Param(7)+`)`,
		rec.ID, rec.Tenant, rec.Kind, rec.Target, rec.Actor, string(counts), nowNS)
	if err != nil {
		return rec, fmt.Errorf("record deletion: %w", err)
	}
	return rec, nil
}

// ListDeletions implements store.Deletions.ListDeletions in tx.
func (d Dialect) ListDeletions(ctx context.Context, tx Tx, tenant string, limit int) ([]store.Deletion, error) {
	q := `SELECT id, tenant, kind, target, actor, counts, created_ns FROM deletions`
	args := []any{}
	if tenant != "" {
		q += ` WHERE tenant = ` + d.Param(1)
		args = append(args, tenant)
	}
	q += ` ORDER BY id DESC LIMIT ` + d.Param(len(args)+1)
	args = append(args, store.PageLimit(limit))
	var out []store.Deletion
	err := tx.Query(ctx, q, args, func(scan func(...any) error) error {
		var r store.Deletion
		var counts string
		var ns int64
		if err := scan(&r.ID, &r.Tenant, &r.Kind, &r.Target, &r.Actor, &counts, &ns); err != nil {
			return err
		}
		if err := json.Unmarshal([]byte(counts), &r.Counts); err != nil {
			return fmt.Errorf("deletion %d: counts: %w", r.ID, err)
		}
		r.Created = time.Unix(0, ns).UTC()
		out = append(out, r)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list deletions: %w", err)
	}
	return out, nil
}

// ExpireDeletions implements store.Deletions.ExpireDeletions in tx.
func (d Dialect) ExpireDeletions(ctx context.Context, tx Tx, before time.Time, tenants []string, others bool) (int64, error) {
	if len(tenants) == 0 && !others {
		return 0, nil
	}
	cond := `created_ns < ` + d.Param(1)
	args := []any{before.UnixNano()}
	if len(tenants) > 0 {
		ps := make([]string, len(tenants))
		for i, t := range tenants {
			args = append(args, t)
			ps[i] = d.Param(len(args))
		}
		in := ` IN (`
		if others {
			in = ` NOT IN (`
		}
		cond += ` AND tenant` + in + strings.Join(ps, ", ") + `)`
	}
	var n int64
	if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM deletions WHERE `+cond, args, &n); err != nil {
		return 0, fmt.Errorf("count deletion records: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := tx.Exec(ctx, `DELETE FROM deletions WHERE `+cond, args...); err != nil {
		return 0, fmt.Errorf("expire deletion records: %w", err)
	}
	return n, nil
}

func (d Dialect) runExists(ctx context.Context, tx Tx, runID string) error {
	var id string
	return d.queryOne(ctx, tx, `SELECT id FROM runs WHERE id = `+d.Param(1), []any{runID}, &id)
}

// queryOne scans the one row q returns into dest, or gives an error
// wrapping store.ErrNotFound when it returns none.
func (d Dialect) queryOne(ctx context.Context, tx Tx, q string, args []any, dest ...any) error {
	found := false
	err := tx.Query(ctx, q, args, func(scan func(...any) error) error {
		found = true
		return scan(dest...)
	})
	if err != nil {
		return err
	}
	if !found {
		return store.ErrNotFound
	}
	return nil
}
