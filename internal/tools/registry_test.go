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
	if got := strings.Join(names, ","); got != "run_command,read_file,write_file,edit_file,list_dir,search,run_code,finish" {
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

// TestToolEffects holds every built-in tool to what its constructor's doc
// says a call may change. A tool added to the registry without a row here
// fails, so no tool is added without an answer (and one built without an
// answer does not register: TestRegisterUndeclared).
func TestToolEffects(t *testing.T) {
	want := map[string]struct{ mutating, external bool }{
		"run_command": {mutating: true},
		"read_file":   {},
		"write_file":  {mutating: true},
		"edit_file":   {mutating: true},
		"list_dir":    {},
		"search":      {},
		"run_code":    {mutating: true},
		"finish":      {},
	}
	r := tools.Default(tools.Limits{})
	for _, s := range r.Specs() {
		tl, _ := r.Get(s.Name)
		w, ok := want[s.Name]
		if !ok {
			t.Errorf("%s has no row in this table: say whether its calls change sandbox files (Mutating) or the world outside (External)", s.Name)
			continue
		}
		if tl.Mutating() != w.mutating || tl.External() != w.external {
			t.Errorf("%s: Mutating() = %t, External() = %t; its doc says %t, %t", s.Name, tl.Mutating(), tl.External(), w.mutating, w.external)
		}
		delete(want, s.Name)
	}
	for name := range want {
		t.Errorf("%s is in the table but not in the registry", name)
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
			res, err := r.Call(ctx, tools.Env{}, r.Resolve(model.ToolCall{ID: "1", Name: tc.tool, Args: json.RawMessage(tc.args)}))
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
	res, _ := r.Call(ctx, tools.Env{}, r.Resolve(model.ToolCall{Name: "finish", Args: json.RawMessage(`{"summary":"Fixed Add."}`)}))
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

// TestResolve: a call's sandbox selector picks one of the run's sandboxes
// (the first by default) and is taken out of the arguments the tool and
// the policy see, for any tool; a bad one is the call's error. The tool's
// place and answers come with the call.
func TestResolve(t *testing.T) {
	r := tools.Default(tools.Limits{})
	two := []string{"main", "db"}
	cases := []struct {
		name      string
		sandboxes []string
		tool      string
		args      string
		place     tools.Place
		sandbox   string
		input     string
		err       string
		mutating  bool
	}{
		{"default sandbox", two, "run_command", `{"command":"ls"}`, tools.PlaceSandbox, "main", `{"command":"ls"}`, "", true},
		{"named sandbox", two, "run_command", `{"command":"ls","sandbox":"db"}`, tools.PlaceSandbox, "db", `{"command":"ls"}`, "", true},
		{"read-only tool", two, "read_file", `{"path":"a","sandbox":"db"}`, tools.PlaceSandbox, "db", `{"path":"a"}`, "", false},
		{"unknown sandbox", two, "run_command", `{"command":"ls","sandbox":"nope"}`, tools.PlaceSandbox, "main", `{"command":"ls","sandbox":"nope"}`, `run_command: no sandbox called "nope"`, true},
		{"selector not a string", two, "write_file", `{"sandbox":7}`, tools.PlaceSandbox, "main", `{"sandbox":7}`, "argument sandbox must be a string", true},
		{"malformed arguments", two, "run_command", `[1,2]`, tools.PlaceSandbox, "main", `[1,2]`, "", true},
		{"host tool", two, "finish", `{"summary":"s","sandbox":"db"}`, tools.PlaceHost, "", `{"summary":"s"}`, "", false},
		{"unknown tool", two, "rm_rf", `{"sandbox":"db"}`, tools.PlaceHost, "", `{}`, "", false},
		{"one sandbox takes no selector", []string{"main"}, "run_command", `{"command":"ls","sandbox":"db"}`, tools.PlaceSandbox, "main", `{"command":"ls","sandbox":"db"}`, "", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			mc := model.ToolCall{ID: "c", Name: tc.tool, Args: model.CanonicalArgs(tc.args)}
			c := r.Resolve(mc, tc.sandboxes...)
			if c.ID != "c" || c.Name != tc.tool || string(c.Args) != string(mc.Args) {
				t.Errorf("Resolve(%s).ToolCall = %+v, want the call as the model wrote it", tc.args, c.ToolCall)
			}
			if c.Place != tc.place || c.Sandbox != tc.sandbox || string(c.Input) != tc.input || c.Mutating != tc.mutating || c.External {
				t.Errorf("Resolve(%s) = place %s sandbox %q input %s mutating %t external %t, want %s %q %s %t false",
					tc.args, c.Place, c.Sandbox, c.Input, c.Mutating, c.External, tc.place, tc.sandbox, tc.input, tc.mutating)
			}
			if (c.Err == nil) != (tc.err == "") || c.Err != nil && !strings.Contains(c.Err.Error(), tc.err) {
				t.Errorf("Resolve(%s).Err = %v, want %q", tc.args, c.Err, tc.err)
			}
			if c.Err != nil {
				res, err := r.Call(context.Background(), tools.Env{}, c)
				if err != nil || !res.IsError || res.Content != c.Err.Error() {
					t.Errorf("Call of a call with a bad selector = %+v, %v; want its error as a tool error", res, err)
				}
			}
		})
	}
}

// TestSpecsSandboxArg: with several sandboxes, the sandbox tools' schemas
// (and only theirs) take the selector, naming the sandboxes.
func TestSpecsSandboxArg(t *testing.T) {
	r := tools.Default(tools.Limits{})
	for _, s := range r.Specs("main", "db") {
		tl, _ := r.Get(s.Name)
		has := strings.Contains(string(s.Schema), `"sandbox":{"description":"Which sandbox to act in (default main).","enum":["main","db"],"type":"string"}`)
		if has != (tl.Place() == tools.PlaceSandbox) {
			t.Errorf("%s schema %s: selector %t, want %t", s.Name, s.Schema, has, tl.Place() == tools.PlaceSandbox)
		}
	}
	for _, s := range r.Specs("main") {
		if strings.Contains(string(s.Schema), `"sandbox"`) {
			t.Errorf("%s schema with one sandbox has a selector: %s", s.Name, s.Schema)
		}
	}
}

// FuzzResolve: the sandbox argument of a call in a run with several
// sandboxes picks only a configured sandbox and is removed from the
// arguments the tool sees.
func FuzzResolve(f *testing.F) {
	f.Add(`{"sandbox":"db","command":"ls"}`)
	f.Add(`{"sandbox":"nope"}`)
	f.Add(`{"sandbox":7}`)
	f.Add(`[1,2]`)
	f.Add(`{"sandbox":"main","sandbox":"db"}`)
	r := tools.Default(tools.Limits{})
	f.Fuzz(func(t *testing.T, args string) {
		c := r.Resolve(model.ToolCall{Name: "run_command", Args: model.CanonicalArgs(args)}, "main", "db")
		if c.Sandbox != "main" && c.Sandbox != "db" {
			t.Fatalf("routed to %q", c.Sandbox)
		}
		if c.Err != nil {
			return
		}
		var m map[string]json.RawMessage
		if json.Unmarshal(c.Input, &m) == nil && c.Sandbox == "db" {
			if _, ok := m["sandbox"]; ok {
				t.Fatalf("the sandbox argument reached the tool: %s", c.Input)
			}
		}
	})
}
