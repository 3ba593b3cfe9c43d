package host

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/airlockrun/airlock/internal/price"
)

// LoadPrices reads $AIRLOCK_HOME/prices.yaml, the host's price table:
//
//	models:
//	  anthropic:claude-sonnet-4-5: {input: 3, output: 15}   # credits per million tokens
//	  script: {input: 1, output: 1}
//
// No file means no prices: nothing is charged, and a metered tenant's runs
// are refused (fail closed).
func LoadPrices(home string) (price.Table, error) {
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
		p[name] = price.Price{Input: price.FromCredits(m.Input), Output: price.FromCredits(m.Output), CacheRead: price.FromCredits(m.CacheRead), CacheWrite: price.FromCredits(m.CacheWrite)}
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("prices.yaml: %w", err)
	}
	return p, nil
}
