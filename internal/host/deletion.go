package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// Deletion is the audit record of a deletion (store.Deletion): what went,
// by whom, when, and how much of each kind.
type Deletion = store.Deletion

// ErrLive means a run that has not ended cannot be purged (its driver would
// write again); cancel it first. It matches store.ErrConflict too, as the
// store's own refusal does (the API answers both 409).
var ErrLive error = liveError{}

type liveError struct{}

func (liveError) Error() string { return "the run has not ended: cancel it first" }

func (liveError) Is(target error) bool { return target == store.ErrConflict }

// The API deletes through the host: what it keeps outside the store goes too.
var _ server.Deleter = (*Host)(nil)

// PurgeRun deletes run id and every run forked from it, with their events,
// artifacts and the blobs nothing else refers to, and keeps an audit record
// of it naming actor (store.Deletions.PurgeRun). Runs that have not ended
// are refused (ErrLive). Checkpoint chunks that only the purged runs used
// go with the next checkpoint collection (airlock gc), after its grace.
func (h *Host) PurgeRun(ctx context.Context, id, actor string) (store.Deletion, error) {
	rs, err := h.run()
	if err != nil {
		return store.Deletion{}, err
	}
	r, err := rs.store.GetRun(ctx, id)
	if err != nil {
		return store.Deletion{}, err
	}
	if !r.Status.Final() {
		return store.Deletion{}, fmt.Errorf("purge run %s (%s): %w", r.ID, r.Status, ErrLive)
	}
	gone, since, err := h.deletionRoots(ctx, rs)
	if err != nil {
		return store.Deletion{}, fmt.Errorf("purge run %s: %w", r.ID, err)
	}
	rec, free, err := rs.store.PurgeRun(ctx, r.ID, store.Deletion{Actor: actor})
	if err != nil {
		return rec, err
	}
	_, auditErr := h.forgetAudit(ctx, rs.store, "", nil, time.Time{})
	return rec, errors.Join(deleteBlobs(ctx, rs.blobs, free, since), h.forgetRunDirs(ctx, rs.store), h.forgetManifests(ctx, rs, gone, since), auditErr)
}

// forgetRunDirs removes the directories $AIRLOCK_HOME/runs/RUN (what the
// command line wrote for a run: its patch, its files) of the runs the
// store no longer has, so a purge leaves none of their content in the
// home whichever way it was deleted.
func (h *Host) forgetRunDirs(ctx context.Context, st store.Runs) error {
	dir := filepath.Join(h.cfg.Home, "runs")
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("forget run directories: %w", err)
	}
	var errs []error
	for _, e := range ents {
		if !e.IsDir() || event.ValidRunID(e.Name()) != nil {
			continue
		}
		if _, err := st.GetRun(ctx, e.Name()); !errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// DeleteTenant deletes tenant and everything the store keeps of it (runs
// of every kind, ledger, policies, templates, API keys), its secrets in
// the host's secret store, its E2B snapshots' records (e2b.ForgetTenant),
// and the blobs nothing else refers to, and
// keeps an audit record naming actor. A tenant with a run that has not
// ended is refused (ErrLive), unless force: then the tenant is marked
// first (store.MarkTenantDeleting: every process on the store refuses its
// API keys and new runs from then on), its live runs are cancelled, its
// sandboxes destroyed and its other records closed (stopTenant), and the
// deletion proceeds. A forced deletion that fails half-way leaves the
// tenant marked, its keys refused: run it again.
func (h *Host) DeleteTenant(ctx context.Context, tenant, actor string, force bool) (store.Deletion, error) {
	rs, err := h.run()
	if err != nil {
		return store.Deletion{}, err
	}
	if _, err := rs.store.GetTenant(ctx, tenant); err != nil {
		return store.Deletion{}, err
	}
	counts := map[string]int64{}
	if force {
		if _, err := rs.store.MarkTenantDeleting(ctx, tenant); err != nil {
			return store.Deletion{}, fmt.Errorf("delete tenant %s: %w", tenant, err)
		}
		if err := h.stopTenant(ctx, rs, tenant, counts); err != nil {
			return store.Deletion{}, fmt.Errorf("delete tenant %s: %w", tenant, err)
		}
	}
	if err := liveRuns(ctx, rs.store, tenant); err != nil {
		return store.Deletion{}, err
	}
	// Listed before anything goes: the E2B snapshots' checkpoints too.
	gone, since, err := h.deletionRoots(ctx, rs)
	if err != nil {
		return store.Deletion{}, fmt.Errorf("delete tenant %s: %w", tenant, err)
	}
	// The secrets go first, so that the record counts them; a run
	// created between the check above and the store's deletion makes the
	// store refuse, and the tenant stays without its secrets.
	n, err := h.deleteSecrets(ctx, tenant)
	if err != nil {
		return store.Deletion{}, fmt.Errorf("delete tenant %s: %w", tenant, err)
	}
	// So do its E2B snapshots' records (their checkpoints' chunks go with
	// the next checkpoint collection), from a running E2B server's memory
	// too.
	forget := func(tenant string) (int, error) {
		return e2b.ForgetTenant(filepath.Join(h.cfg.Home, sandboxcli.E2BStateDir), tenant)
	}
	h.mu.Lock()
	if h.e2b != nil {
		forget = h.e2b.ForgetTenant
	}
	h.mu.Unlock()
	snaps, err := forget(tenant)
	if err != nil {
		return store.Deletion{}, fmt.Errorf("delete tenant %s: %w", tenant, err)
	}
	counts["secrets"], counts["e2b_snapshots"] = n, int64(snaps)
	rec, free, err := rs.store.DeleteTenant(ctx, tenant, store.Deletion{Actor: actor, Counts: counts})
	if err != nil {
		return rec, err
	}
	_, auditErr := h.forgetAudit(ctx, rs.store, tenant, nil, time.Time{})
	return rec, errors.Join(deleteBlobs(ctx, rs.blobs, free, since), h.forgetRunDirs(ctx, rs.store), h.forgetManifests(ctx, rs, gone, since), auditErr)
}

// liveRuns returns ErrLive, naming a run, when a run of tenant (of any
// kind) has not ended.
func liveRuns(ctx context.Context, st store.Runs, tenant string) error {
	live, err := unended(ctx, st, tenant)
	if err != nil {
		return err
	}
	if len(live) > 0 {
		return fmt.Errorf("delete tenant %s (or delete it with force): run %s (%s): %w", tenant, live[0].ID, live[0].Status, ErrLive)
	}
	return nil
}

// deleteSecrets deletes every secret of tenant from the host's secret
// store and returns how many.
func (h *Host) deleteSecrets(ctx context.Context, tenant string) (int64, error) {
	st, err := h.Secrets()
	if err != nil {
		return 0, err
	}
	infos, err := st.List(ctx, tenant)
	if err != nil {
		return 0, fmt.Errorf("list secrets: %w", err)
	}
	var n int64
	for _, i := range infos {
		if err := st.Delete(ctx, tenant, i.Name); err != nil && !errors.Is(err, secret.ErrNotFound) {
			return n, fmt.Errorf("delete secret %s: %w", i.Name, err)
		}
		n++
	}
	return n, nil
}

// deleteBlobs deletes the blobs a deletion that began at since freed,
// unless a writer stored or found one since (blob.Store.Expire, atomic
// with the writer's Has): another host on the store, or another run of
// this one, putting the same bytes for a reference it is about to record
// keeps the blob, and a collection (airlock gc) removes it if the
// reference never comes. One already gone is fine.
func deleteBlobs(ctx context.Context, bl *blob.Store, digests []string, since time.Time) error {
	var errs []error
	for _, d := range digests {
		if _, err := bl.Expire(ctx, d, since); err != nil && !errors.Is(err, blob.ErrNotFound) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("deleted, but %d of the blobs it freed remain: %w", len(errs), errors.Join(errs...))
	}
	return nil
}

// Retention says how long a finished run's content is kept.
type Retention struct {
	// Events is how long after a run ended its events' payloads (tool
	// outputs, model messages, the task) are kept; then they are replaced
	// by tombstones and the chain still verifies. 0 keeps them.
	Events time.Duration `yaml:"events"`
	// Runs is how long after a run ended the run is kept at all
	// (its artifacts, uploads and checkpoints with it): then it is purged.
	// 0 keeps it.
	Runs time.Duration `yaml:"runs"`
	// Checkpoints is how long after a run ended its workspace
	// checkpoints are kept: then its snapshot.taken payloads become
	// tombstones (the rest of the run stays, and verifies), and the next
	// checkpoint collection frees the manifests and chunks nothing else
	// names; the run can no longer be resumed or forked. 0 keeps them
	// (until Events or Runs takes them).
	Checkpoints time.Duration `yaml:"checkpoints"`
	// Artifacts is how long after a run ended its artifacts are kept:
	// then their records go, their artifact.stored payloads become
	// tombstones (the rest of the run stays, and verifies) and their blobs
	// go unless something else names them. 0 keeps them (until Runs).
	Artifacts time.Duration `yaml:"artifacts"`
	// Uploads is how long an uploaded workspace (POST /v1/uploads) is
	// kept after it was uploaded, whether or not a run started from it:
	// then it is deleted, and its blob unless a run's events, an artifact
	// or another upload name it. 0 keeps it.
	Uploads time.Duration `yaml:"uploads"`
	// UploadBytes is the most bytes of uploads the tenant keeps at once:
	// an upload past it is refused (413 too_large). 0: no budget.
	UploadBytes server.Size `yaml:"upload_bytes"`
	// Audit is how long the tenant's audit records are kept after they
	// were written: the lines of the audit logs under $AIRLOCK_HOME/audit
	// and the store's records of its deletions (the default rule's
	// governs the retention passes' records and those of tenants no rule
	// names, deleted ones too). 0: audit lines follow the shorter of
	// Events and Runs that is set (run by run, with its policy's), and
	// deletion records are kept forever. Either way an audit line never
	// outlives its run or its tenant: a purge or a tenant's deletion
	// removes its lines, whatever Audit says.
	Audit time.Duration `yaml:"audit"`
}

// RetentionRules are the retention of every tenant: Tenants' own where
// they name one, else Default. (serve's config: retention.)
type RetentionRules struct {
	Default Retention            `yaml:"default"`
	Tenants map[string]Retention `yaml:"tenants"`
	// Every is how often airlock serve sweeps: 0 never (the default).
	Every time.Duration `yaml:"every"`
}

// For returns tenant's retention.
func (rr RetentionRules) For(tenant string) Retention {
	if r, ok := rr.Tenants[tenant]; ok {
		return r
	}
	return rr.Default
}

// Validate reports every problem of rr.
func (rr RetentionRules) Validate() error {
	var errs []error
	check := func(who string, r Retention) {
		if r.Events < 0 || r.Runs < 0 || r.Checkpoints < 0 || r.Artifacts < 0 || r.Uploads < 0 || r.UploadBytes < 0 || r.Audit < 0 {
			errs = append(errs, fmt.Errorf("retention: %s: durations must not be negative", who))
		}
		if r.Events > 0 && r.Runs > 0 && r.Runs < r.Events {
			errs = append(errs, fmt.Errorf("retention: %s: runs %s is shorter than events %s", who, r.Runs, r.Events))
		}
	}
	check("default", rr.Default)
	for name, r := range rr.Tenants {
		check("tenant "+name, r)
	}
	if rr.Every != 0 && (rr.Every < time.Minute || rr.Every > 7*24*time.Hour) {
		errs = append(errs, fmt.Errorf("retention: every %s: want 0 (never) or 1m to 168h", rr.Every))
	}
	return errors.Join(errs...)
}

// runRetention is run r's retention: its tenant's rule (rules.For) and
// its policy's retention section, each field the shorter of the two that
// are set (policy.Stricter). The stricter wins because both are limits on
// keeping data, set by different people for different reasons (the
// operator per tenant, the policy's author for its runs): a policy may
// shorten what its runs keep, and no policy can make a run outlive its
// tenant's rule. docs caches the sections by policy hash. A stored policy
// that no longer parses adds nothing: the tenant's rule applies.
func runRetention(r store.Run, rules RetentionRules, docs map[string]policy.Retention) Retention {
	t := rules.For(r.Tenant)
	if len(r.Policy) == 0 {
		return t
	}
	pr, ok := docs[r.PolicyHash]
	if !ok || r.PolicyHash == "" {
		if doc, err := policy.Parse(r.Policy); err == nil {
			pr = doc.Retention
		}
		docs[r.PolicyHash] = pr
	}
	s := policy.Stricter(policy.Retention{Events: policy.Duration(t.Events), Runs: policy.Duration(t.Runs), Checkpoints: policy.Duration(t.Checkpoints), Artifacts: policy.Duration(t.Artifacts)}, pr)
	return Retention{Events: time.Duration(s.Events), Runs: time.Duration(s.Runs), Checkpoints: time.Duration(s.Checkpoints), Artifacts: time.Duration(s.Artifacts)}
}

// SweepStats counts what a retention pass did.
type SweepStats struct {
	Runs     int   // runs whose payloads were tombstoned
	Payloads int64 // payloads tombstoned
	Kept     int64 // payloads sealed before digests, kept (event.ErrV1Payload)
	Purged   int   // runs purged
	// Checkpoints counts snapshot.taken payloads tombstoned
	// (Retention.Checkpoints) in runs whose other payloads are kept.
	Checkpoints int64
	// Artifacts counts artifacts deleted (Retention.Artifacts) in runs
	// kept otherwise.
	Artifacts int64
	Audit     int64 // audit log lines removed (expired, or of purged runs)
	// SandboxEvents counts events of sandboxes outside runs deleted
	// (store.SandboxEvents; kept as long as a run's events: sandboxRetention).
	SandboxEvents int64
	// Uploads counts uploaded workspaces deleted (Retention.Uploads).
	Uploads int64
	// Deletions counts audit records of deletions deleted
	// (Retention.Audit).
	Deletions int64
}

// sandboxRetention is how long the events of tenant's sandboxes outside
// runs are kept: as a run's events under its tenant's rule (r.Events),
// or r.Runs when shorter or Events is not set; 0 keeps them. They have no
// policy section of their own to apply (an E2B sandbox's template policy
// governs its record, which is a run and is swept as one).
func sandboxRetention(r Retention) time.Duration {
	keep := r.Events
	if keep == 0 || (r.Runs > 0 && r.Runs < keep) {
		keep = r.Runs
	}
	return keep
}

// sweepSandboxEvents deletes the events of sandboxes outside runs past
// their tenant's sandboxRetention as of now.
func sweepSandboxEvents(ctx context.Context, st store.Store, rules RetentionRules, now time.Time) (int64, error) {
	tenants, err := st.ListTenants(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, tn := range tenants {
		keep := sandboxRetention(rules.For(tn.Name))
		if keep <= 0 {
			continue
		}
		k, err := st.ExpireSandboxEvents(ctx, tn.Name, now.Add(-keep))
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// sweepUploads deletes the uploads past their tenant's Retention.Uploads
// as of now, and the blobs they leave unnamed (deleteBlobs, as of since).
func sweepUploads(ctx context.Context, st store.Store, bl *blob.Store, rules RetentionRules, now, since time.Time) (int64, error) {
	tenants, err := st.ListTenants(ctx)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, tn := range tenants {
		keep := rules.For(tn.Name).Uploads
		if keep <= 0 {
			continue
		}
		k, free, err := st.ExpireUploads(ctx, tn.Name, now.Add(-keep))
		n += k
		if err != nil {
			return n, err
		}
		if err := deleteBlobs(ctx, bl, free, since); err != nil {
			return n, err
		}
	}
	return n, nil
}

// expireDeletions deletes the audit records of deletions older than their
// tenant's Retention.Audit as of now: each tenant a rule names by its own,
// every other record (the retention passes', and those of tenants no rule
// names, deleted ones too) by the default rule's.
func expireDeletions(ctx context.Context, st store.Store, rules RetentionRules, now time.Time) (int64, error) {
	var (
		n     int64
		named []string
	)
	for tenant, r := range rules.Tenants {
		named = append(named, tenant)
		if r.Audit <= 0 {
			continue
		}
		k, err := st.ExpireDeletions(ctx, now.Add(-r.Audit), []string{tenant}, false)
		n += k
		if err != nil {
			return n, err
		}
	}
	if keep := rules.Default.Audit; keep > 0 {
		slices.Sort(named)
		k, err := st.ExpireDeletions(ctx, now.Add(-keep), named, true)
		n += k
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Sweep applies each finished run's retention (its tenant's rule and its
// policy's retention section, the stricter: runRetention) as of now:
// payloads of runs ended more than Events ago become tombstones, runs
// ended more than Runs ago are purged with their forks;
// a pass that tombstoned anything leaves one audit record with its
// counts, and each purge its own.
func (h *Host) Sweep(ctx context.Context, rules RetentionRules, now time.Time) (SweepStats, error) {
	var st SweepStats
	rs, err := h.run()
	if err != nil {
		return st, err
	}
	gone, since, err := h.deletionRoots(ctx, rs)
	if err != nil {
		return st, fmt.Errorf("sweep: %w", err)
	}
	f := store.RunFilter{Kind: store.KindAny}
	var purge []string
	docs := map[string]policy.Retention{}
	for {
		runs, err := rs.store.ListRuns(ctx, f)
		if err != nil {
			return st, fmt.Errorf("sweep: %w", err)
		}
		for _, r := range runs {
			if !r.Status.Final() || r.Finished.IsZero() {
				continue
			}
			ret := runRetention(r, rules, docs)
			age := now.Sub(r.Finished)
			switch {
			case ret.Runs > 0 && age > ret.Runs:
				purge = append(purge, r.ID)
			case ret.Events > 0 && age > ret.Events:
				n, kept, free, err := rs.store.TombstonePayloads(ctx, r.ID, now, event.ReasonRetention)
				if err != nil {
					return st, fmt.Errorf("sweep: %w", err)
				}
				if err := deleteBlobs(ctx, rs.blobs, free, since); err != nil {
					return st, fmt.Errorf("sweep: run %s: %w", r.ID, err)
				}
				if n > 0 {
					st.Runs++
				}
				st.Payloads += n
				st.Kept += kept
			default:
				if ret.Checkpoints > 0 && age > ret.Checkpoints {
					n, err := rs.store.TombstoneCheckpoints(ctx, r.ID, now, event.ReasonRetention)
					if err != nil {
						return st, fmt.Errorf("sweep: %w", err)
					}
					st.Checkpoints += n
				}
				if ret.Artifacts > 0 && age > ret.Artifacts {
					n, free, err := rs.store.DeleteArtifacts(ctx, r.ID, now, event.ReasonRetention)
					if err != nil {
						return st, fmt.Errorf("sweep: %w", err)
					}
					if err := deleteBlobs(ctx, rs.blobs, free, since); err != nil {
						return st, fmt.Errorf("sweep: run %s: %w", r.ID, err)
					}
					st.Artifacts += n
				}
			}
		}
		if len(runs) < store.PageLimit(0) {
			break
		}
		f.After = runs[len(runs)-1].ID
	}
	for _, id := range purge {
		// A fork of an expired run goes with it, whatever its own age
		// (its log starts with a copy of the parent's), so it may be gone
		// by its own turn.
		// A run with a fork still going waits for a later sweep.
		rec, free, err := rs.store.PurgeRun(ctx, id, store.Deletion{Actor: "retention"})
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			continue
		}
		if err != nil {
			return st, fmt.Errorf("sweep: %w", err)
		}
		if err := deleteBlobs(ctx, rs.blobs, free, since); err != nil {
			return st, fmt.Errorf("sweep: %w", err)
		}
		st.Purged += int(rec.Counts["runs"])
	}
	if st.Purged > 0 {
		if err := h.forgetRunDirs(ctx, rs.store); err != nil {
			return st, fmt.Errorf("sweep: %w", err)
		}
	}
	if st.SandboxEvents, err = sweepSandboxEvents(ctx, rs.store, rules, now); err != nil {
		return st, fmt.Errorf("sweep: sandbox events: %w", err)
	}
	if st.Uploads, err = sweepUploads(ctx, rs.store, rs.blobs, rules, now, since); err != nil {
		return st, fmt.Errorf("sweep: uploads: %w", err)
	}
	n, err := h.forgetAudit(ctx, rs.store, "", &rules, now)
	st.Audit = n
	if err != nil {
		return st, fmt.Errorf("sweep: %w", err)
	}
	if st.Deletions, err = expireDeletions(ctx, rs.store, rules, now); err != nil {
		return st, fmt.Errorf("sweep: deletion records: %w", err)
	}
	if st.Purged > 0 || st.Payloads > 0 || st.Checkpoints > 0 {
		if err := h.forgetManifests(ctx, rs, gone, since); err != nil {
			return st, fmt.Errorf("sweep: %w", err)
		}
	}
	if st.Payloads > 0 || st.Checkpoints > 0 || st.Artifacts > 0 || st.SandboxEvents > 0 || st.Uploads > 0 || st.Deletions > 0 || st.Audit > 0 {
		counts := map[string]int64{"runs": int64(st.Runs), "payloads": st.Payloads}
		if st.Deletions > 0 {
			counts["deletions"] = st.Deletions
		}
		if st.Audit > 0 {
			counts["audit_lines"] = st.Audit
		}
		if st.SandboxEvents > 0 {
			counts["sandbox_events"] = st.SandboxEvents
		}
		if st.Uploads > 0 {
			counts["uploads"] = st.Uploads
		}
		if st.Checkpoints > 0 {
			counts["checkpoints"] = st.Checkpoints
		}
		if st.Artifacts > 0 {
			counts["artifacts"] = st.Artifacts
		}
		_, err := rs.store.RecordDeletion(ctx, store.Deletion{
			Kind: store.DeletionRetention, Target: "events", Actor: "retention",
			Counts: counts,
		})
		if err != nil {
			return st, fmt.Errorf("sweep: %w", err)
		}
	}
	return st, nil
}
