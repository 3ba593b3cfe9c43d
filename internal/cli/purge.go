package cli

import (
	"bufio"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/host"
)

// RunsPurgeCmd is `airlock runs purge RUN`.
type RunsPurgeCmd struct {
	ID  string `arg:"" name:"run" help:"Run id (or a unique part of it)."`
	Yes bool   `name:"yes" short:"y" help:"Do not ask: purge at once."`
}

// Run deletes the run, its forks, events, artifacts and their blobs, after
// confirmation, and prints the audit record's counts.
func (c *RunsPurgeCmd) Run(env *Env) error {
	b, r, err := openRun(env, c.ID)
	if err != nil {
		return err
	}
	defer b.close()
	l, err := b.localHost("airlock runs purge")
	if err != nil {
		return err
	}
	if err := confirm(env, c.Yes, fmt.Sprintf("This deletes run %s, the runs forked from it, their events, artifacts and files, for good.", r.ID), r.ID); err != nil {
		return err
	}
	rec, err := l.h.PurgeRun(env.Ctx, r.ID, "cli")
	if err != nil {
		return hostError(err)
	}
	fmt.Fprintf(env.Stdout, "purged run %s: %s (deletion record %d)\n", r.ID, deletionCounts(rec), rec.ID)
	return nil
}

// TenantsDeleteCmd is `airlock tenants delete TENANT`.
type TenantsDeleteCmd struct {
	Name  string `arg:"" help:"Tenant name." placeholder:"TENANT"`
	Yes   bool   `name:"yes" short:"y" help:"Do not ask: delete at once."`
	Force bool   `name:"force" help:"Delete even while runs or sandboxes of the tenant are going: refuse its API keys at once, cancel its runs (wherever they are driven), destroy its sandboxes (paused ones too), then delete."`
}

// Run deletes the tenant and everything of it after confirmation.
func (c *TenantsDeleteCmd) Run(env *Env) error {
	if host.ValidTenantName(c.Name) != nil {
		return tenantNameError(c.Name)
	}
	l, err := openTenants(env)
	if err != nil {
		return err
	}
	defer l.close()
	what := fmt.Sprintf("This deletes tenant %s and everything of it (runs, artifacts, ledger, policies, templates, API keys) for good.", c.Name)
	if c.Force {
		what += " Its API keys stop working at once; its runs still going are cancelled and its sandboxes destroyed."
	}
	if err := confirm(env, c.Yes, what, c.Name); err != nil {
		return err
	}
	rec, err := l.h.DeleteTenant(env.Ctx, c.Name, "cli", c.Force)
	if err != nil {
		return hostError(err)
	}
	fmt.Fprintf(env.Stdout, "deleted tenant %s: %s (deletion record %d)\n", c.Name, deletionCounts(rec), rec.ID)
	return nil
}

// confirm asks the person at the terminal to type want, unless yes. No
// answer (stdin closed, as in a script) is a usage error that names --yes.
func confirm(env *Env, yes bool, what, want string) error {
	if yes {
		return nil
	}
	fmt.Fprintf(env.Stderr, "%s\nType %s to confirm: ", what, want)
	if env.Stdin == nil {
		return usageError{Err: errors.New("no confirmation: pass --yes")}
	}
	line, err := bufio.NewReader(env.Stdin).ReadString('\n')
	if err != nil && line == "" {
		return usageError{Err: errors.New("no confirmation (stdin closed): pass --yes")}
	}
	if strings.TrimSpace(line) != want {
		return reportedError{Err: errors.New("not confirmed: nothing deleted"), Code: 1}
	}
	return nil
}

// deletionCounts says a deletion record's counts, "2 runs, 9 events...".
func deletionCounts(d host.Deletion) string {
	keys := make([]string, 0, len(d.Counts))
	for k, n := range d.Counts {
		if n > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", d.Counts[k], strings.ReplaceAll(k, "_", " ")))
	}
	if len(parts) == 0 {
		return "nothing stored"
	}
	return strings.Join(parts, ", ")
}

// retentionFlags are airlock gc's retention pass.
type retentionFlags struct {
	Events      time.Duration `name:"events-older-than" help:"Replace the event payloads of runs that ended longer ago than this with tombstones (the chain still verifies); 0: none." placeholder:"DURATION"`
	Runs        time.Duration `name:"runs-older-than" help:"Purge runs that ended longer ago than this, with their forks, artifacts and files; 0: none." placeholder:"DURATION"`
	Checkpoints time.Duration `name:"checkpoints-older-than" help:"Delete the workspace checkpoints of runs that ended longer ago than this (their snapshot.taken payloads become tombstones; the collection then frees their chunks; the runs can no longer be resumed or forked); 0: none." placeholder:"DURATION"`
	Artifacts   time.Duration `name:"artifacts-older-than" help:"Delete the artifacts of runs that ended longer ago than this (their records, and their blobs unless something else names them; their artifact.stored payloads become tombstones); 0: none." placeholder:"DURATION"`
	Uploads     time.Duration `name:"uploads-older-than" help:"Delete uploaded workspaces uploaded longer ago than this (their blobs unless a run or artifact names them); 0: none." placeholder:"DURATION"`
	Audit       time.Duration `name:"audit-older-than" help:"Remove audit log lines written, and deletion records made, longer ago than this (in place of the events and runs rule for audit lines); 0: audit lines follow the events and runs rule, deletion records stay." placeholder:"DURATION"`
}

func (f retentionFlags) rules() host.RetentionRules {
	return host.RetentionRules{Default: host.Retention{Events: f.Events, Runs: f.Runs, Checkpoints: f.Checkpoints, Artifacts: f.Artifacts, Uploads: f.Uploads, Audit: f.Audit}}
}
