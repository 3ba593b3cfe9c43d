package model

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/secret"
)

func TestNew(t *testing.T) {
	key := secret.NewValue([]byte(testKey))
	tests := []struct {
		spec    string
		opts    Options
		want    string // type name, or error substring after "error: "
		wantMod string
	}{
		{"anthropic:claude-sonnet-4-5", Options{Key: key}, "*model.Anthropic", "claude-sonnet-4-5"},
		{"openai:gpt-4.1", Options{Key: key}, "*model.Chat", "gpt-4.1"},
		{"openai-responses:gpt-5", Options{Key: key}, "*model.Responses", "gpt-5"},
		{"openai-compatible:llama3.1:8b", Options{BaseURL: "http://127.0.0.1:11434/v1"}, "*model.Chat", "llama3.1:8b"},
		{"script:testdata/script/fix_calc.yaml", Options{}, "*model.Scripted", ""},
		{"anthropic:claude", Options{}, "error: anthropic: no API key", ""},
		{"openai:gpt-4.1", Options{}, "error: openai: no API key", ""},
		{"openai-responses:gpt-5", Options{}, "error: openai-responses: no API key", ""},
		{"openai-compatible:m", Options{}, "error: a base URL is required", ""},
		{"openai-compatible:m", Options{BaseURL: "ftp://x"}, "error: is not http(s)", ""},
		{"anthropic:claude", Options{Key: key, BaseURL: "localhost:8080"}, "error: is not http(s)", ""},
		{"gemini:pro", Options{}, `error: unknown provider "gemini"`, ""},
		{"anthropic", Options{}, "error: is not PROVIDER:MODEL", ""},
		{"anthropic:", Options{Key: key}, "error: is not PROVIDER:MODEL", ""},
		{"script:testdata/nope.yaml", Options{}, "error: no such file", ""},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			p, err := New(tt.spec, tt.opts)
			if want, ok := strings.CutPrefix(tt.want, "error: "); ok {
				if err == nil || !strings.Contains(err.Error(), want) {
					t.Fatalf("New(%q) = %v, want an error containing %q", tt.spec, err, want)
				}
				return
			}
			if err != nil {
				t.Fatalf("New(%q): %v", tt.spec, err)
			}
			var model string
			switch p := p.(type) {
			case *Anthropic:
				model = p.model
			case *Chat:
				model = p.model
			case *Responses:
				model = p.model
			}
			if got := typeName(p); got != tt.want || model != tt.wantMod {
				t.Errorf("New(%q) = %s model %q, want %s model %q", tt.spec, got, model, tt.want, tt.wantMod)
			}
		})
	}
}

func typeName(v any) string {
	switch v.(type) {
	case *Anthropic:
		return "*model.Anthropic"
	case *Chat:
		return "*model.Chat"
	case *Responses:
		return "*model.Responses"
	case *Scripted:
		return "*model.Scripted"
	}
	return "?"
}
