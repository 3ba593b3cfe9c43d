package tools

import (
	"bytes"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/interp"
)

// TestCodeResultCapped: run_code's answer to the model stays within the
// limit whatever the execution gave (long output, many results, many
// images), keeps the error's end, and says how much it left out; images
// past maxCodeImages are not kept.
func TestCodeResultCapped(t *testing.T) {
	const limit = 4096
	png := []byte("\x89PNG\r\n\x1a\nimage")
	many := func(n int, r interp.Result) []interp.Result {
		rs := make([]interp.Result, n)
		for i := range rs {
			rs[i] = r
		}
		return rs
	}
	tests := []struct {
		name      string
		ex        interp.Execution
		files     int
		truncated bool
		isError   bool
		contains  []string
	}{
		{"small", interp.Execution{Stdout: "hi\n", Results: []interp.Result{{Main: true, Text: "2"}}}, 0, false, false, []string{"[stdout]\nhi\n", "[result]\n2\n"}},
		{"long stdout", interp.Execution{Stdout: strings.Repeat("o", 10*limit)}, 0, true, false, []string{"bytes truncated"}},
		{"many displays", interp.Execution{Results: many(32, interp.Result{Text: strings.Repeat("d", limit/2)})}, 0, true, false, []string{"[display]", "bytes truncated"}},
		{"many images", interp.Execution{Results: many(20, interp.Result{PNG: png})}, maxCodeImages, false, false, []string{"kept as an artifact"}},
		{"error after much output", interp.Execution{Stdout: strings.Repeat("o", 10*limit), Error: &interp.Error{Name: "ValueError", Value: "bad", Traceback: "\x1b[31mTraceback\x1b[0m"}}, 0, true, true, []string{"ValueError: bad", "Traceback"}},
		{"no output", interp.Execution{}, 0, false, false, []string{"(no output)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res := codeResult(tt.ex, limit)
			if len(res.Content) > limit+64 { // the truncation marker's own bytes
				t.Errorf("content of %d bytes, limit %d", len(res.Content), limit)
			}
			if len(res.Files) != tt.files {
				t.Errorf("%d files, want %d", len(res.Files), tt.files)
			}
			for _, f := range res.Files {
				if !bytes.Equal(f.Data, png) || f.MediaType != "image/png" {
					t.Errorf("file %s of %d bytes, want the PNG", f.MediaType, len(f.Data))
				}
			}
			if (res.Details.Truncated > 0) != tt.truncated {
				t.Errorf("truncated %d bytes, want truncated %v", res.Details.Truncated, tt.truncated)
			}
			if res.IsError != tt.isError {
				t.Errorf("IsError %v, want %v", res.IsError, tt.isError)
			}
			for _, c := range tt.contains {
				if !strings.Contains(res.Content, c) {
					t.Errorf("content lacks %q: %.300q", c, res.Content)
				}
			}
			if strings.Contains(res.Content, "\x1b[") {
				t.Errorf("terminal escapes left in %q", res.Content)
			}
		})
	}
}
