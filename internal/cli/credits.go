package cli

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/store"
	"go.yaml.in/yaml/v3"
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
func ledgerJSON(tenant string, all []store.LedgerEntry, limit int) []ledgerEntryJSON {
	out := make([]ledgerEntryJSON, 0, len(all))
	var bal int64
	for _, e := range all {
		if e.Kind == store.LedgerGrant {
			bal += e.Amount
		} else {
			bal -= e.Amount
		}
		out = append(out, ledgerEntryJSON{ID: e.ID, Tenant: tenant, Kind: e.Kind, Amount: e.Amount, Balance: bal,
			RunID: e.RunID, Seq: e.Seq, Note: e.Note, Created: e.Created.UTC()})
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
	return toMicro(f), nil
}

// toMicro turns credits into micro-credits.
func toMicro(credits float64) int64 { return int64(math.Round(credits * 1e6)) }

func formatCredits(micro int64) string {
	return strconv.FormatFloat(float64(micro)/1e6, 'f', -1, 64)
}

// loadPrices reads $AIRLOCK_HOME/prices.yaml, the host's price table:
//
//	models:
//	  anthropic:claude-sonnet-4-5: {input: 3, output: 15}   # credits per million tokens
//	  script: {input: 1, output: 1}
//
// No file means no prices: nothing is charged, and a metered tenant's runs
// are refused (fail closed).
func loadPrices(home string) (price.Table, error) {
	b, err := os.ReadFile(filepath.Join(home, "prices.yaml"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var doc struct {
		Models map[string]struct {
			Input      float64 `yaml:"input"`
			Output     float64 `yaml:"output"`
			CacheRead  float64 `yaml:"cache_read"`
			CacheWrite float64 `yaml:"cache_write"`
		} `yaml:"models"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil {
		return nil, fmt.Errorf("prices.yaml: %w", err)
	}
	p := price.Table{}
	for name, m := range doc.Models {
		p[name] = price.Price{Input: toMicro(m.Input), Output: toMicro(m.Output), CacheRead: toMicro(m.CacheRead), CacheWrite: toMicro(m.CacheWrite)}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("prices.yaml: %w", err)
	}
	return p, nil
}
