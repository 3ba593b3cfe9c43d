// Package price is the host's price table: what model tokens cost, in
// micro-credits. Usage always comes from a provider's response, never from
// the sandbox.
package price

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"

	"github.com/airlockrun/airlock/internal/event"
)

// Price is what a model's tokens cost, in micro-credits per million
// tokens (so a price of 3,000,000 is 3 credits per million tokens).
type Price struct {
	Input      int64 `json:"input" yaml:"input"`
	Output     int64 `json:"output" yaml:"output"`
	CacheRead  int64 `json:"cache_read,omitempty" yaml:"cache_read,omitempty"`
	CacheWrite int64 `json:"cache_write,omitempty" yaml:"cache_write,omitempty"`
}

// Table is the host's price table, by model. A run's model spec
// "PROVIDER:MODEL" is looked up as the whole spec, then MODEL, then
// PROVIDER, then "*".
type Table map[string]Price

// Lookup returns the price of a model spec.
func (p Table) Lookup(spec string) (Price, bool) {
	kind, name, _ := strings.Cut(spec, ":")
	for _, k := range []string{spec, name, kind, "*"} {
		if pr, ok := p[k]; ok {
			return pr, true
		}
	}
	return Price{}, false
}

// Cost returns what usage u of model spec costs, in micro-credits, rounded
// up (see Price.Cost).
func (p Table) Cost(spec string, u event.Usage) (int64, error) {
	pr, ok := p.Lookup(spec)
	if !ok {
		return 0, fmt.Errorf("no price for model %q in the host's price table", spec)
	}
	c, err := pr.Cost(u)
	if err != nil {
		return 0, fmt.Errorf("cost of %s: %w", spec, err)
	}
	return c, nil
}

// Cost returns what usage u costs at price p, in micro-credits, rounded
// up. Cached input tokens are priced as such when p says how.
func (p Price) Cost(u event.Usage) (int64, error) {
	uncached := max(u.InputTokens-u.CacheReadTokens-u.CacheWriteTokens, 0)
	cacheRead, cacheWrite := p.CacheRead, p.CacheWrite
	if cacheRead == 0 {
		cacheRead = p.Input
	}
	if cacheWrite == 0 {
		cacheWrite = p.Input
	}
	var sum big.Int
	for _, t := range [][2]int64{{uncached, p.Input}, {u.CacheReadTokens, cacheRead}, {u.CacheWriteTokens, cacheWrite}, {u.OutputTokens, p.Output}} {
		sum.Add(&sum, new(big.Int).Mul(big.NewInt(t[0]), big.NewInt(t[1])))
	}
	// Divide by a million, rounding up: a fraction of a micro-credit is
	// still charged.
	q, r := new(big.Int).QuoRem(&sum, big.NewInt(1_000_000), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	if !q.IsInt64() || q.Int64() > math.MaxInt64/2 {
		return 0, errors.New("cost overflows")
	}
	return q.Int64(), nil
}

// Validate checks that no price is negative.
func (p Table) Validate() error {
	for k, v := range p {
		if v.Input < 0 || v.Output < 0 || v.CacheRead < 0 || v.CacheWrite < 0 {
			return fmt.Errorf("price of %q: negative", k)
		}
	}
	return nil
}

// FromCredits converts credits to micro-credits, the unit of the ledger and
// of the price table, rounded to the nearest.
func FromCredits(credits float64) int64 { return int64(math.Round(credits * 1e6)) }
