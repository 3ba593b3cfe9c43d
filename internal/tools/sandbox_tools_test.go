package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/tools"
)

func wantExitCode(code int) func(t *testing.T, res tools.Result) {
	return func(t *testing.T, res tools.Result) {
		t.Helper()
		if res.Details.ExitCode == nil || *res.Details.ExitCode != code {
			t.Errorf("Details.ExitCode = %v, want %d", res.Details.ExitCode, code)
		}
	}
}

func TestRunCommand(t *testing.T) {
	sb := newSandbox(t)
	r := tools.Default(tools.Limits{MaxContent: 400})
	runCases(t, r, sb, "run_command", []tcase{
		{
			name: "success", args: `{"command":"echo hello; pwd"}`, want: []string{"exit status 0\n", "--- stdout ---\nhello\n/workspace\n"}, notWant: []string{"stderr"},
			check: func(t *testing.T, res tools.Result) {
				wantExitCode(0)(t, res)
				if res.Details.Outcome != "exited" || res.Details.Bytes != int64(len("hello\n/workspace\n")) {
					t.Errorf("Details = %+v", res.Details)
				}
			},
		},
		{
			name: "stderr and exit code", args: `{"command":"echo out; echo oops >&2; exit 3"}`, isError: true,
			want: []string{"exit status 3", "--- stdout ---\nout\n", "--- stderr ---\noops\n"}, check: wantExitCode(3),
		},
		{name: "shell features", args: `{"command":"x=$(echo a b | wc -w); echo \"n=$x\" | tr n N"}`, want: []string{"N=2"}},
		{
			name: "timeout", args: `{"command":"sleep 30","timeout_seconds":1}`, isError: true, want: []string{"exit status 124 (timeout"},
			check: func(t *testing.T, res tools.Result) {
				if res.Details.Outcome != "timeout" {
					t.Errorf("Outcome = %q, want timeout", res.Details.Outcome)
				}
			},
		},
		{
			name: "output capped", args: `{"command":"seq 1 20000"}`, want: []string{"--- stdout ---\n1\n2\n", "bytes truncated ...]", "19999\n20000\n"},
			check: func(t *testing.T, res tools.Result) {
				if res.Details.Truncated == 0 || res.Details.Bytes < 100000 || len(res.Content) > 600 {
					t.Errorf("Truncated = %d, Bytes = %d, len(Content) = %d", res.Details.Truncated, res.Details.Bytes, len(res.Content))
				}
			},
		},
		{name: "missing command", args: `{}`, isError: true, want: []string{`missing required argument "command"`}},
		{name: "empty command", args: `{"command":"  "}`, isError: true, want: []string{"command is empty"}},
		{name: "wrong type", args: `{"command":["ls"]}`, isError: true, want: []string{`argument "command": want a string, got an array`}},
		{name: "unknown field", args: `{"command":"ls","cwd":"/"}`, isError: true, want: []string{`unknown argument(s) "cwd"`}},
		{name: "case-sensitive names", args: `{"Command":"ls"}`, isError: true, want: []string{`unknown argument(s) "Command"`}},
		{name: "timeout out of range", args: `{"command":"ls","timeout_seconds":100000}`, isError: true, want: []string{"out of range"}},
		{name: "timeout not integer", args: `{"command":"ls","timeout_seconds":1.5}`, isError: true, want: []string{"want an integer"}},
		{name: "not an object", args: `"ls"`, isError: true, want: []string{"want a JSON object, got a string"}},
	})
}

func TestReadFile(t *testing.T) {
	sb := newSandbox(t)
	put(t, sb, "/workspace/a.txt", "one\ntwo\nthree\nfour\n")
	put(t, sb, "/workspace/big.txt", strings.Repeat("x", 5000))
	put(t, sb, "/workspace/bin", "a\x00b")
	put(t, sb, "/workspace/dir/f", "")
	r := tools.Default(tools.Limits{MaxReadBytes: 1000})
	runCases(t, r, sb, "read_file", []tcase{
		{
			name: "whole file", args: `{"path":"a.txt"}`, want: []string{"one\ntwo\nthree\nfour\n"},
			check: func(t *testing.T, res tools.Result) {
				if res.Content != "one\ntwo\nthree\nfour\n" || res.Details.Path != "/workspace/a.txt" || res.Details.Lines != 4 {
					t.Errorf("Content %q, Details %+v", res.Content, res.Details)
				}
			},
		},
		{name: "absolute path", args: `{"path":"/workspace/a.txt"}`, want: []string{"four"}},
		{name: "dot-dot resolves in sandbox", args: `{"path":"dir/../a.txt"}`, want: []string{"three"}},
		{
			name: "range", args: `{"path":"a.txt","start_line":2,"end_line":3}`,
			check: func(t *testing.T, res tools.Result) {
				if res.Content != "two\nthree\n" {
					t.Errorf("Content = %q", res.Content)
				}
			},
		},
		{name: "start only", args: `{"path":"a.txt","start_line":4}`, check: func(t *testing.T, res tools.Result) {
			if res.Content != "four\n" {
				t.Errorf("Content = %q", res.Content)
			}
		}},
		{name: "end past the end", args: `{"path":"a.txt","end_line":99}`, want: []string{"one\n", "four\n"}},
		{name: "start past the end", args: `{"path":"a.txt","start_line":9}`, isError: true, want: []string{"past the end (4 lines)"}},
		{name: "end before start", args: `{"path":"a.txt","start_line":3,"end_line":2}`, isError: true, want: []string{"end_line 2 is before start_line 3"}},
		{name: "zero line", args: `{"path":"a.txt","start_line":0}`, isError: true, want: []string{"out of range"}},
		{name: "missing file", args: `{"path":"nope.txt"}`, isError: true, want: []string{"/workspace/nope.txt"}},
		{name: "directory", args: `{"path":"dir"}`, isError: true, want: []string{"is a directory"}},
		{name: "binary", args: `{"path":"bin"}`, isError: true, want: []string{"binary file"}},
		{
			name: "size cap", args: `{"path":"big.txt"}`, want: []string{"[... file truncated: only the first 1000 bytes were read ...]"},
			check: func(t *testing.T, res tools.Result) {
				if res.Details.Bytes != 1000 {
					t.Errorf("Bytes = %d, want 1000", res.Details.Bytes)
				}
			},
		},
		{name: "empty path", args: `{"path":""}`, isError: true, want: []string{"empty path"}},
		{name: "missing path", args: `{"start_line":1}`, isError: true, want: []string{`missing required argument "path"`}},
		{name: "null path", args: `{"path":null}`, isError: true, want: []string{`missing required argument "path"`}},
	})
}

func TestWriteFile(t *testing.T) {
	sb := newSandbox(t)
	put(t, sb, "/workspace/old.txt", "old content that is long")
	r := tools.Default(tools.Limits{})
	runCases(t, r, sb, "write_file", []tcase{
		{
			name: "creates parents", args: `{"path":"x/y/z.txt","content":"hi\n"}`, want: []string{"wrote 3 bytes to /workspace/x/y/z.txt"},
			check: func(t *testing.T, res tools.Result) {
				if got := get(t, sb, "/workspace/x/y/z.txt"); got != "hi\n" {
					t.Errorf("file = %q", got)
				}
			},
		},
		{name: "overwrites", args: `{"path":"old.txt","content":"new"}`, check: func(t *testing.T, res tools.Result) {
			if got := get(t, sb, "/workspace/old.txt"); got != "new" {
				t.Errorf("file = %q", got)
			}
		}},
		{name: "empty content", args: `{"path":"empty","content":""}`, want: []string{"wrote 0 bytes"}},
		{name: "onto a directory", args: `{"path":"x/y","content":"a"}`, isError: true, want: []string{"/workspace/x/y"}},
		{name: "read-only place", args: `{"path":"/proc/nope","content":"a"}`, isError: true, want: []string{"write_file"}},
		{name: "missing content", args: `{"path":"a"}`, isError: true, want: []string{`missing required argument "content"`}},
		{name: "content wrong type", args: `{"path":"a","content":5}`, isError: true, want: []string{"want a string, got a number"}},
	})
}

func TestEditFile(t *testing.T) {
	sb := newSandbox(t)
	const orig = "func Add(a, b int) int { return a - b }\n// a - b again\n// a - b thrice\n"
	r := tools.Default(tools.Limits{})
	unchanged := func(t *testing.T, _ tools.Result) {
		if got := get(t, sb, "/workspace/calc.go"); got != orig {
			t.Errorf("file changed after a failed edit: %q", got)
		}
	}
	cases := []tcase{
		{name: "absent", args: `{"path":"calc.go","old":"a * b","new":"x"}`, isError: true, want: []string{"old string not found"}, check: unchanged},
		{name: "not unique", args: `{"path":"calc.go","old":"a - b","new":"a + b"}`, isError: true, want: []string{"occurs 3 times"}, check: unchanged},
		{
			name: "unique", args: `{"path":"calc.go","old":"return a - b","new":"return a + b"}`, want: []string{"replaced 1 occurrence"},
			check: func(t *testing.T, res tools.Result) {
				want := strings.Replace(orig, "return a - b", "return a + b", 1)
				if got := get(t, sb, "/workspace/calc.go"); got != want {
					t.Errorf("file = %q", got)
				}
				if res.Details.Replaced != 1 {
					t.Errorf("Replaced = %d", res.Details.Replaced)
				}
			},
		},
		{
			name: "replace all", args: `{"path":"calc.go","old":"a - b","new":"a + b","replace_all":true}`, want: []string{"replaced 3 occurrence"},
			check: func(t *testing.T, res tools.Result) {
				if got := get(t, sb, "/workspace/calc.go"); strings.Contains(got, "a - b") || strings.Count(got, "a + b") != 3 {
					t.Errorf("file = %q", got)
				}
			},
		},
		{name: "identical", args: `{"path":"calc.go","old":"a","new":"a"}`, isError: true, want: []string{"identical"}, check: unchanged},
		{name: "empty old", args: `{"path":"calc.go","old":"","new":"a"}`, isError: true, want: []string{"old is empty"}, check: unchanged},
		{name: "missing new", args: `{"path":"calc.go","old":"a"}`, isError: true, want: []string{`missing required argument "new"`}},
		{name: "replace_all wrong type", args: `{"path":"calc.go","old":"a","new":"b","replace_all":"yes"}`, isError: true, want: []string{"want true or false"}},
		{name: "missing file", args: `{"path":"nope.go","old":"a","new":"b"}`, isError: true, want: []string{"/workspace/nope.go"}},
	}
	for _, tc := range cases {
		put(t, sb, "/workspace/calc.go", orig) // each case starts from orig
		runCases(t, r, sb, "edit_file", []tcase{tc})
	}
}

func TestListDir(t *testing.T) {
	sb := newSandbox(t)
	put(t, sb, "/workspace/a.txt", "12345")
	put(t, sb, "/workspace/src/main.go", "package main\n")
	put(t, sb, "/workspace/src/deep/er/x.go", "")
	if _, err := tools.RunCommand(tools.Limits{}).Run(ctxT(t), tools.Env{Sandbox: sb}, json.RawMessage(`{"command":"ln -s a.txt link"}`)); err != nil {
		t.Fatal(err)
	}
	r := tools.Default(tools.Limits{MaxEntries: 4, MaxDepth: 3})
	runCases(t, r, sb, "list_dir", []tcase{
		{name: "default", args: `{}`, check: func(t *testing.T, res tools.Result) {
			if res.Content != "a.txt (5 bytes)\nlink -> a.txt\nsrc/\n" || res.Details.Entries != 3 {
				t.Errorf("Content = %q, Entries = %d", res.Content, res.Details.Entries)
			}
		}},
		{name: "depth 2", args: `{"path":"/workspace/src","depth":2}`, check: func(t *testing.T, res tools.Result) {
			if res.Content != "deep/\ndeep/er/\nmain.go (13 bytes)\n" {
				t.Errorf("Content = %q", res.Content)
			}
		}},
		{name: "entries cap", args: `{"depth":3}`, want: []string{"src/deep/\n[... listing stopped at 4 entries ...]"}, notWant: []string{"main.go"}},
		{name: "subdirectory", args: `{"path":"src/deep","depth":2}`, check: func(t *testing.T, res tools.Result) {
			if res.Content != "er/\ner/x.go (0 bytes)\n" {
				t.Errorf("Content = %q", res.Content)
			}
		}},
		{name: "empty", args: `{"path":"src/deep/er/x.go/.."}`, want: []string{"x.go"}},
		{name: "missing", args: `{"path":"nope"}`, isError: true, want: []string{"/workspace/nope"}},
		{name: "depth too deep", args: `{"depth":4}`, isError: true, want: []string{"out of range [1, 3]"}},
		{name: "unknown field", args: `{"recursive":true}`, isError: true, want: []string{"unknown argument"}},
	})
}

func TestSearch(t *testing.T) {
	sb := newSandbox(t)
	put(t, sb, "/workspace/a.go", "package a\nfunc Add() {}\n// $(rm -rf /) and ; and 'quoted' \"too\"\n")
	put(t, sb, "/workspace/sub/b.txt", "Add here\n-v flag\n")
	var many strings.Builder
	for i := range 50 {
		fmt.Fprintf(&many, "match %d\n", i)
	}
	put(t, sb, "/workspace/many/m.txt", many.String())
	r := tools.Default(tools.Limits{MaxMatches: 10})
	noPwn := func(t *testing.T, _ tools.Result) {
		for _, p := range []string{"/workspace/pwned", "/tmp/pwned"} {
			if exists(t, sb, p) {
				t.Errorf("%s exists: the pattern reached a shell", p)
			}
		}
		if !exists(t, sb, "/workspace/a.go") {
			t.Error("a.go is gone")
		}
	}
	runCases(t, r, sb, "search", []tcase{
		{name: "regexp", args: `{"pattern":"func [A-Z]\\w+","path":"."}`, want: []string{"a.go:2:func Add() {}"}, notWant: []string{"b.txt"}},
		{name: "relative paths", args: `{"pattern":"Add"}`, want: []string{"a.go:2:", "sub/b.txt:1:Add here"}, notWant: []string{"/workspace/"}},
		{name: "glob", args: `{"pattern":"Add","glob":"*.txt"}`, want: []string{"sub/b.txt:1:"}, notWant: []string{"a.go"}},
		{name: "subdirectory", args: `{"pattern":"Add","path":"sub"}`, want: []string{"sub/b.txt:1:"}, notWant: []string{"a.go"}},
		{name: "outside workspace", args: `{"pattern":"^root:","path":"/etc/passwd"}`, want: []string{"root:"}},
		{name: "case insensitive", args: `{"pattern":"ADD HERE","case_insensitive":true}`, want: []string{"sub/b.txt:1:Add here"}},
		{name: "no matches", args: `{"pattern":"zzz_nothing"}`, want: []string{"no matches"}},
		{name: "command substitution", args: `{"pattern":"$(rm -rf /)","fixed_string":true}`, want: []string{"a.go:3:"}, check: noPwn},
		{name: "substitution as regexp", args: `{"pattern":"$(touch /workspace/pwned)"}`, want: []string{"no matches"}, check: noPwn},
		{name: "semicolon and quotes", args: `{"pattern":"'; touch /workspace/pwned; echo '","fixed_string":true}`, want: []string{"no matches"}, check: noPwn},
		{name: "quotes literal", args: `{"pattern":"'quoted' \"too\"","fixed_string":true}`, want: []string{"a.go:3:"}, check: noPwn},
		{name: "backticks", args: "{\"pattern\":\"`touch /workspace/pwned`\",\"fixed_string\":true}", want: []string{"no matches"}, check: noPwn},
		{name: "leading dash is a pattern", args: `{"pattern":"-v flag"}`, want: []string{"sub/b.txt:2:-v flag"}},
		{name: "glob with metacharacters", args: `{"pattern":"Add","glob":"*.txt;touch /workspace/pwned"}`, want: []string{"no matches"}, check: noPwn},
		{
			name: "capped", args: `{"pattern":"^match","path":"many"}`, want: []string{"many/m.txt:1:match 0", "[... 40 more matching lines not shown"}, notWant: []string{"match 10\n"},
			check: func(t *testing.T, res tools.Result) {
				if res.Details.Lines != 50 {
					t.Errorf("Lines = %d, want 50", res.Details.Lines)
				}
			},
		},
		{name: "missing path", args: `{"pattern":"x","path":"nope"}`, isError: true, want: []string{"search failed (exit status 2)", "nope"}},
		{name: "invalid regexp", args: `{"pattern":"a("}`, isError: true, want: []string{"pattern: error parsing regexp"}},
		{name: "invalid glob", args: `{"pattern":"a","glob":"["}`, isError: true, want: []string{"glob"}},
		{name: "missing pattern", args: `{"path":"."}`, isError: true, want: []string{`missing required argument "pattern"`}},
	})
}

func TestSandboxLost(t *testing.T) {
	sb := newSandbox(t)
	if err := sb.Destroy(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	r := tools.Default(tools.Limits{})
	for name, args := range map[string]string{
		"run_command": `{"command":"true"}`,
		"read_file":   `{"path":"a"}`,
		"list_dir":    `{}`,
		"search":      `{"pattern":"a"}`,
	} {
		res, err := r.Call(ctxT(t), tools.Env{Sandbox: sb}, r.Resolve(model.ToolCall{Name: name, Args: json.RawMessage(args)}))
		if !errors.Is(err, tools.ErrSandboxLost) || !res.IsError {
			t.Errorf("%s on a destroyed sandbox = %v, %+v; want ErrSandboxLost and IsError", name, err, res)
		}
	}
}

func TestCancelledCommand(t *testing.T) {
	sb := newSandbox(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := tools.RunCommand(tools.Limits{}).Run(ctx, tools.Env{Sandbox: sb}, json.RawMessage(`{"command":"sleep 30"}`))
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a cancelled context = %v, want context.Canceled", err)
	}
}
