package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/tools"
)

func TestRegistry(t *testing.T) {
	r := tools.Default(tools.Limits{})
	var names []string
	for _, s := range r.Specs() {
		names = append(names, s.Name)
		var sch struct {
			Type                 string                     `json:"type"`
			Properties           map[string]json.RawMessage `json:"properties"`
			Required             []string                   `json:"required"`
			AdditionalProperties bool                       `json:"additionalProperties"`
		}
		if err := json.Unmarshal(s.Schema, &sch); err != nil || sch.Type != "object" || sch.AdditionalProperties {
			t.Errorf("%s schema %s: %v", s.Name, s.Schema, err)
		}
		for _, req := range sch.Required {
			if _, ok := sch.Properties[req]; !ok {
				t.Errorf("%s: required %q is not a property", s.Name, req)
			}
		}
		if s.Description == "" {
			t.Errorf("%s has no description", s.Name)
		}
	}
	if got := strings.Join(names, ","); got != "run_command,read_file,write_file,edit_file,list_dir,search,finish" {
		t.Errorf("Specs names = %s", got)
	}
	for name, place := range map[string]tools.Place{"run_command": tools.PlaceSandbox, "search": tools.PlaceSandbox, "finish": tools.PlaceHost} {
		if tl, ok := r.Get(name); !ok || tl.Place() != place {
			t.Errorf("Get(%s) place = %v, want %v", name, tl, place)
		}
	}
	if err := r.Register(tools.Finish()); err == nil {
		t.Error("registering finish twice succeeded")
	}
}

func TestRegistryCall(t *testing.T) {
	r := tools.Default(tools.Limits{})
	ctx := context.Background()
	cases := []struct {
		name, tool, args string
		isError          bool
		want             string
		err              error
	}{
		{name: "finish", tool: "finish", args: `{"summary":"Fixed Add."}`, want: "Completion recorded"},
		{name: "finish empty summary", tool: "finish", args: `{"summary":" "}`, isError: true, want: "summary is empty"},
		{name: "finish extra field", tool: "finish", args: `{"summary":"x","success":true}`, isError: true, want: `unknown argument(s) "success"`},
		{name: "finish garbled args", tool: "finish", args: `"{summary: oops"`, isError: true, want: "want a JSON object"},
		{name: "finish trailing garbage", tool: "finish", args: `{"summary":"x"} {}`, isError: true, want: "not a valid JSON object"},
		{name: "unknown tool", tool: "rm_rf", args: `{}`, isError: true, want: `unknown tool "rm_rf"; available tools: edit_file, finish`},
		{name: "sandbox tool without sandbox", tool: "read_file", args: `{"path":"a"}`, isError: true, want: "no sandbox", err: tools.ErrNoSandbox},
		{name: "bad args before sandbox", tool: "read_file", args: `{}`, isError: true, want: "missing required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res, err := r.Call(ctx, tools.Env{}, model.ToolCall{ID: "1", Name: tc.tool, Args: json.RawMessage(tc.args)})
			if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) {
				t.Fatalf("error = %v, want %v", err, tc.err)
			}
			if res.IsError != tc.isError || !strings.Contains(res.Content, tc.want) {
				t.Errorf("result = %+v, want IsError %v and %q", res, tc.isError, tc.want)
			}
			if res.Details.Duration < 0 {
				t.Errorf("Duration = %v", res.Details.Duration)
			}
		})
	}
	res, _ := r.Call(ctx, tools.Env{}, model.ToolCall{Name: "finish", Args: json.RawMessage(`{"summary":"Fixed Add."}`)})
	if !res.Details.Finished || res.Details.Summary != "Fixed Add." {
		t.Errorf("finish Details = %+v", res.Details)
	}
}

func TestTruncate(t *testing.T) {
	cases := []struct {
		in   string
		max  int
		want string
		cut  int64
	}{
		{"short", 10, "short", 0},
		{"0123456789abcdef", 8, "0123\n[... 8 bytes truncated ...]\ncdef", 8},
		{"ééééé", 4, "é\n[... 6 bytes truncated ...]\né", 6},
		{"anything", 0, "anything", 0},
	}
	for _, tc := range cases {
		got, cut := tools.Truncate(tc.in, tc.max)
		if got != tc.want || cut != tc.cut {
			t.Errorf("Truncate(%q, %d) = %q, %d; want %q, %d", tc.in, tc.max, got, cut, tc.want, tc.cut)
		}
		if !utf8.ValidString(got) {
			t.Errorf("Truncate(%q, %d) is not valid UTF-8", tc.in, tc.max)
		}
	}
}

func FuzzDecodeArgs(f *testing.F) {
	specs := tools.Default(tools.Limits{}).Specs()
	f.Add(uint8(0), `{"command":"go test ./...","timeout_seconds":60}`)
	f.Add(uint8(1), `{"path":"a.go","start_line":1e1,"end_line":20.0}`)
	f.Add(uint8(3), `{"path":"calc.go","old":"a - b","new":"a + b","replace_all":false}`)
	f.Add(uint8(5), `{"pattern":"$(rm -rf /)","glob":"*.go","fixed_string":true}`)
	f.Add(uint8(6), `{"summary":null}`)
	f.Fuzz(func(t *testing.T, which uint8, args string) {
		tl, _ := tools.Default(tools.Limits{}).Get(specs[int(which)%len(specs)].Name)
		err := tools.CheckArgs(tl, json.RawMessage(args))
		if err == nil {
			// Accepted arguments are a JSON object of declared names.
			var m map[string]json.RawMessage
			if json.Unmarshal([]byte(args), &m) != nil && strings.TrimSpace(args) != "" {
				t.Fatalf("accepted non-object %q", args)
			}
			var sch struct {
				Properties map[string]json.RawMessage `json:"properties"`
			}
			_ = json.Unmarshal(tl.Spec().Schema, &sch)
			for k := range m {
				if _, ok := sch.Properties[k]; !ok {
					t.Fatalf("accepted unknown key %q in %q", k, args)
				}
			}
			return
		}
		var ae *tools.ArgError
		if !errors.As(err, &ae) || !utf8.ValidString(ae.Msg) && utf8.ValidString(args) {
			t.Fatalf("CheckArgs(%q) = %v, want an ArgError", args, err)
		}
	})
}
