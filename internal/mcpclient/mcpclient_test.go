package mcpclient

import (
	"strings"
	"testing"
)

func TestCheckSchema(t *testing.T) {
	tests := []struct {
		name   string
		schema any
		ok     bool
	}{
		{"object", map[string]any{"type": "object", "properties": map[string]any{"a": map[string]any{"type": "string"}}}, true},
		{"no type", map[string]any{"properties": map[string]any{}}, false},
		{"array", map[string]any{"type": "array"}, false},
		{"type list", map[string]any{"type": []string{"object", "null"}}, false},
		{"not an object", "object", false},
		{"too large", map[string]any{"type": "object", "description": strings.Repeat("x", MaxSchema)}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := checkSchema(tt.schema)
			if (err == nil) != tt.ok {
				t.Errorf("checkSchema(%s) = %v, want ok %v", tt.name, err, tt.ok)
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"plain", "Reads a file.", `"Reads a file."`},
		{"lines and controls", "a\nb\x1b[31m\u202ec\td", `"a b[31mc d"`},
		{"long", strings.Repeat("é", MaxDescription), " [...]\""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Describe("fs", tt.in)
			if !strings.HasPrefix(got, `A tool of the MCP server "fs".`) || !strings.HasSuffix(got, tt.want) {
				t.Errorf("Describe(%q) = %q, want the marked words ending %s", tt.in, got, tt.want)
			}
			if len(got) > MaxDescription+256 || strings.ContainsAny(got, "\n\t\x1b\u202e") {
				t.Errorf("Describe(%q) = %q (%d bytes): not capped or carries control characters", tt.in, got, len(got))
			}
		})
	}
}
