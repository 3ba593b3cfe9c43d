package interp_test

import (
	"encoding/base64"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/interp"
)

// TestDecodeBounds: what the sandbox writes is kept only within Limits;
// garbage and over-long lines are skipped and counted, never an error.
func TestDecodeBounds(t *testing.T) {
	png := base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n\x1a\nimage"))
	tests := []struct {
		name  string
		in    string
		l     interp.Limits
		check func(t *testing.T, ex interp.Execution)
	}{
		{"wire", `{"type":"number_of_executions","execution_count":3}
{"type":"stdout","text":"a\n"}
{"type":"keepalive"}
{"type":"result","is_main_result":true,"text":"2","png":"` + png + `","extra":{"x/y":1}}
{"type":"error","name":"E","value":"v","traceback":"tb"}
{"type":"end_of_execution"}
`, interp.Limits{}, func(t *testing.T, ex interp.Execution) {
			if ex.Count != 3 || ex.Stdout != "a\n" || !ex.Ended || ex.Dropped != 0 {
				t.Errorf("Decode = %+v", ex)
			}
			if len(ex.Results) != 1 || !ex.Results[0].Main || ex.Results[0].Text != "2" || !strings.HasPrefix(string(ex.Results[0].PNG), "\x89PNG") {
				t.Errorf("results = %+v", ex.Results)
			}
			if got := strings.Join(ex.Results[0].Formats, ","); got != "text,png,x/y" {
				t.Errorf("formats = %s, want text,png,x/y", got)
			}
			if ex.Error == nil || *ex.Error != (interp.Error{Name: "E", Value: "v", Traceback: "tb"}) {
				t.Errorf("error = %+v", ex.Error)
			}
		}},
		{"text capped", strings.Repeat(`{"type":"stdout","text":"0123456789"}`+"\n", 5), interp.Limits{Text: 25}, func(t *testing.T, ex interp.Execution) {
			if len(ex.Stdout) != 25 || ex.Dropped != 25 {
				t.Errorf("stdout %d bytes, dropped %d; want 25 and 25", len(ex.Stdout), ex.Dropped)
			}
		}},
		{"long line skipped", `{"type":"stdout","text":"` + strings.Repeat("x", 200) + `"}` + "\n" + `{"type":"stdout","text":"ok"}`, interp.Limits{Line: 100}, func(t *testing.T, ex interp.Execution) {
			if ex.Stdout != "ok" || ex.Dropped == 0 {
				t.Errorf("stdout %q, dropped %d; want ok and the long line dropped", ex.Stdout, ex.Dropped)
			}
		}},
		{"images capped", `{"type":"result","png":"` + png + `"}` + "\n" + `{"type":"result","png":"` + png + `"}`, interp.Limits{Images: 20}, func(t *testing.T, ex interp.Execution) {
			if len(ex.Results) != 2 || ex.Results[0].PNG == nil || ex.Results[1].PNG != nil {
				t.Errorf("results = %+v, want the first image only", ex.Results)
			}
		}},
		{"results capped", strings.Repeat(`{"type":"result","text":"r"}`+"\n", 3), interp.Limits{Results: 2}, func(t *testing.T, ex interp.Execution) {
			if len(ex.Results) != 2 || ex.Dropped == 0 {
				t.Errorf("%d results, dropped %d; want 2 and some", len(ex.Results), ex.Dropped)
			}
		}},
		{"garbage", "not json\n{\"type\":\"nope\"}\n{\"type\":\"stdout\",\"text\":5}\n", interp.Limits{}, func(t *testing.T, ex interp.Execution) {
			if ex.Stdout != "" || ex.Ended || ex.Dropped == 0 {
				t.Errorf("Decode(garbage) = %+v", ex)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, err := interp.Decode(strings.NewReader(tt.in), tt.l)
			if err != nil {
				t.Fatalf("Decode = %v", err)
			}
			tt.check(t, ex)
		})
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"result","png":"AAAA","text":"x"}` + "\n" + `{"type":"end_of_execution"}`))
	f.Add([]byte("{\"type\":\"stdout\",\"text\":\"\\u00e9\"}\n\n\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		l := interp.Limits{Line: 64, Text: 16, Results: 2, Images: 8}
		ex, err := interp.Decode(strings.NewReader(string(b)), l)
		if err != nil {
			t.Fatalf("Decode = %v", err)
		}
		if len(ex.Stdout) > 16 || len(ex.Stderr) > 16 || len(ex.Results) > 2 {
			t.Fatalf("Decode kept more than its limits: %+v", ex)
		}
	})
}
