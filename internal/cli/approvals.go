package cli

import (
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// ApprovalsCmd is `airlock approvals`.
type ApprovalsCmd struct {
	Ls ApprovalsLsCmd `cmd:"" default:"withargs" help:"List pending approvals (the default)."`
}

// ApprovalsLsCmd is `airlock approvals ls`.
type ApprovalsLsCmd struct {
	JSON   bool   `name:"json" help:"One JSON object per approval: id, run_id, tenant, step, call_id, action, reason, requested, expires."`
	Tenant string `help:"Only this tenant's runs (default: every tenant's)."`
}

// Run lists pending approvals.
func (c *ApprovalsLsCmd) Run(env *Env) error {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	as, err := b.approvals(env.Ctx, c.Tenant)
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, as...)
	}
	if len(as) == 0 {
		fmt.Fprintln(env.Stdout, "no pending approvals")
		return nil
	}
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTEP\tEXPIRES\tACTION\tREASON")
	for _, a := range as {
		fmt.Fprintf(tw, "%s\t%d\tin %s\t%s\t%s\n", a.ID, a.Step, time.Until(a.Expires).Round(time.Second), clip(oneLine(a.Action), 60), clip(oneLine(a.Reason), 60))
	}
	return tw.Flush()
}

// ApproveCmd is `airlock approve ID`.
type ApproveCmd struct {
	ID      string `arg:"" help:"Approval id (from airlock approvals)."`
	Comment string `help:"Why, for the log."`
	Tenant  string `help:"The tenant that owns the run (default: any)."`
}

// Run approves.
func (c *ApproveCmd) Run(env *Env) error { return decide(env, c.ID, c.Tenant, true, c.Comment) }

// DenyCmd is `airlock deny ID --reason`.
type DenyCmd struct {
	ID     string `arg:"" help:"Approval id (from airlock approvals)."`
	Reason string `required:"" help:"Why: the model is told."`
	Tenant string `help:"The tenant that owns the run (default: any)."`
}

// Run denies.
func (c *DenyCmd) Run(env *Env) error { return decide(env, c.ID, c.Tenant, false, c.Reason) }

func decide(env *Env, id, tenant string, approve bool, reason string) error {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	by, err := b.decide(env.Ctx, id, tenant, approve, reason)
	if err != nil {
		return err
	}
	what := "denied"
	if approve {
		what = "approved"
	}
	fmt.Fprintf(env.Stdout, "%s %s (by %s)\n", what, id, by)
	return nil
}

// localNames are the names the local user may be listed under in a
// policy's approvers: $USER and "uid N".
func localNames(env *Env) []string {
	return []string{env.getenv("USER"), "uid " + strconv.Itoa(os.Getuid())}
}

// whoami names the local user deciding: $USER and the uid, which the
// process cannot fake.
func whoami(env *Env) string {
	uid := "uid " + strconv.Itoa(os.Getuid())
	if u := env.getenv("USER"); u != "" {
		return u + " (" + uid + ")"
	}
	return uid
}
