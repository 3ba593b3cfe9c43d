package tools_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
	"github.com/airlockrun/airlock/internal/tools"
)

// newSandbox creates a real sandbox with an empty writable workspace, or
// skips the test when not root.
func newSandbox(t *testing.T) sandbox.Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: t.TempDir()})
	if err != nil {
		t.Fatalf("linux.New = %v", err)
	}
	t.Cleanup(func() { _ = b.Close() }) // after the sandbox's cleanup
	return sandboxtest.Create(t, b, sandbox.Spec{})
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// put writes a file into the sandbox directly, not through a tool.
func put(t *testing.T, sb sandbox.Sandbox, path, content string) {
	t.Helper()
	ctx := ctxT(t)
	if i := strings.LastIndex(path, "/"); i > 0 {
		if err := sb.Mkdir(ctx, path[:i], 0o755, true); err != nil {
			t.Fatalf("Mkdir(%s) = %v", path[:i], err)
		}
	}
	if err := sb.WriteFile(ctx, path, strings.NewReader(content), 0o644); err != nil {
		t.Fatalf("WriteFile(%s) = %v", path, err)
	}
}

// get reads a file from the sandbox directly.
func get(t *testing.T, sb sandbox.Sandbox, path string) string {
	t.Helper()
	b, err := sb.ReadFile(ctxT(t), path, 0)
	if err != nil {
		t.Fatalf("ReadFile(%s) = %v", path, err)
	}
	return string(b)
}

func exists(t *testing.T, sb sandbox.Sandbox, path string) bool {
	t.Helper()
	_, err := sb.Stat(ctxT(t), path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Stat(%s) = %v", path, err)
	}
	return err == nil
}

// call runs tool name through r with args and fails the test on a returned
// error (a tool error is a Result).
func call(t *testing.T, r *tools.Registry, sb sandbox.Sandbox, name, args string) tools.Result {
	t.Helper()
	res, err := r.Call(ctxT(t), tools.Env{Sandbox: sb}, r.Resolve(model.ToolCall{ID: "c1", Name: name, Args: json.RawMessage(args)}))
	if err != nil {
		t.Fatalf("%s(%s) error = %v (content %q)", name, args, err, res.Content)
	}
	return res
}

// tcase is one table case: the tool's args and what the result must show.
type tcase struct {
	name    string
	args    string
	isError bool
	want    []string // substrings of Content
	notWant []string
	check   func(t *testing.T, res tools.Result)
}

func runCases(t *testing.T, r *tools.Registry, sb sandbox.Sandbox, tool string, cases []tcase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := call(t, r, sb, tool, tc.args)
			if res.IsError != tc.isError {
				t.Fatalf("IsError = %v, want %v; content:\n%s", res.IsError, tc.isError, res.Content)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.Content, w) {
					t.Errorf("content lacks %q:\n%s", w, res.Content)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(res.Content, w) {
					t.Errorf("content has %q:\n%s", w, res.Content)
				}
			}
			if tc.check != nil {
				tc.check(t, res)
			}
		})
	}
}
