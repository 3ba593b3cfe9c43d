package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// CreditsCmd is `airlock credits`.
type CreditsCmd struct {
	Grant CreditsGrantCmd `cmd:"" help:"Add credits to a tenant's ledger (a tenant with a ledger is metered)."`
	Show  CreditsShowCmd  `cmd:"" help:"Show a tenant's balance and ledger."`
}

// CreditsGrantCmd is `airlock credits grant TENANT AMOUNT`.
type CreditsGrantCmd struct {
	Tenant string `arg:"" help:"Tenant: ${local_tenant} (the runs of airlock run) or one airlock tenants create made."`
	Amount string `arg:"" help:"Credits, e.g. 10 or 2.5."`
	Note   string `help:"Why, for the ledger."`
}

// Run adds a grant.
func (c *CreditsGrantCmd) Run(env *Env) error {
	micro, err := parseCredits(c.Amount)
	if err != nil {
		return usageError{Err: fmt.Errorf("amount %q: %w", c.Amount, err)}
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	e, bal, err := b.grant(env.Ctx, c.Tenant, micro, c.Note)
	if err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "granted %s credits to %s (entry %d); balance %s\n", formatCredits(e.Amount), c.Tenant, e.ID, formatCredits(bal))
	return nil
}

// CreditsShowCmd is `airlock credits show TENANT`.
type CreditsShowCmd struct {
	Tenant string `arg:"" help:"Tenant."`
	JSON   bool   `name:"json" help:"One JSON object per ledger entry, oldest first: id, tenant, kind, amount, balance after it (both micro-credits), run_id, seq, note, created."`
	Limit  int    `help:"Most entries shown (newest)." default:"20"`
}

// Run shows the balance and the latest entries.
func (c *CreditsShowCmd) Run(env *Env) error {
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	bal, all, err := b.credits(env.Ctx, c.Tenant)
	if err != nil {
		return err
	}
	if c.JSON {
		return sandboxcli.WriteJSON(env.Stdout, ledgerJSON(c.Tenant, all, c.Limit)...)
	}
	if c.Limit > 0 && len(all) > c.Limit {
		all = all[len(all)-c.Limit:]
	}
	fmt.Fprintf(env.Stdout, "tenant %s: balance %s credits\n", c.Tenant, formatCredits(bal))
	tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tKIND\tCREDITS\tRUN\tNOTE")
	for _, e := range all {
		run := e.RunID
		if run != "" {
			run += "#" + strconv.FormatInt(e.Seq, 10)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.ID, e.Kind, formatCredits(e.Amount), run, clip(oneLine(e.Note), 50))
	}
	return tw.Flush()
}

// ledgerEntryJSON is the JSON form of a ledger entry. Balance is the
// tenant's balance after it, so that the last line says the balance.
type ledgerEntryJSON struct {
	ID      int64     `json:"id"`
	Tenant  string    `json:"tenant"`
	Kind    string    `json:"kind"`
	Amount  int64     `json:"amount"`
	Balance int64     `json:"balance"`
	RunID   string    `json:"run_id,omitempty"`
	Seq     int64     `json:"seq,omitempty"`
	Note    string    `json:"note,omitempty"`
	Created time.Time `json:"created"`
}

// ledgerJSON is tenant's whole ledger, oldest first, as the JSON form
// of its newest limit entries (all of them when limit is 0), each with
// the balance after it.
func ledgerJSON(tenant string, all []api.LedgerEntry, limit int) []ledgerEntryJSON {
	out := make([]ledgerEntryJSON, 0, len(all))
	var bal int64
	for _, e := range all {
		if e.Kind == api.LedgerGrant {
			bal += e.Amount
		} else {
			bal -= e.Amount
		}
		out = append(out, ledgerEntryJSON{
			ID: e.ID, Tenant: tenant, Kind: e.Kind, Amount: e.Amount, Balance: bal,
			RunID: e.RunID, Seq: e.Seq, Note: e.Note, Created: e.Created.UTC(),
		})
	}
	if limit > 0 && len(out) > limit {
		out = out[len(out)-limit:]
	}
	return out
}

// parseCredits turns "2.5" into 2,500,000 micro-credits.
func parseCredits(s string) (int64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, errors.New("not a number")
	}
	if f <= 0 || f > 1e12 {
		return 0, errors.New("want a positive amount up to 10^12")
	}
	return price.FromCredits(f), nil
}

// formatCredits shows micro-credits as credits.
func formatCredits(micro int64) string {
	return strconv.FormatFloat(float64(micro)/1e6, 'f', -1, 64)
}
