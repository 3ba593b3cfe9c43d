package cli_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/rogpeppe/go-internal/testscript"
)

// TestMain makes this test binary double as the airlock command for the
// scripts in testdata/script.
func TestMain(m *testing.M) {
	testscript.Main(m, map[string]func(){
		"airlock": func() { os.Exit(airlockMain()) },
	})
}

// airlockMain is cmd/airlock's main without the sandbox-only setup.
func airlockMain() int {
	self, err := os.Executable()
	if err != nil {
		self = os.Args[0]
	}
	env := &cli.Env{
		Ctx: context.Background(), Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr,
		Home: os.Getenv("AIRLOCK_HOME"), Executor: os.Getenv("AIRLOCK_EXEC"), Self: self,
	}
	return cli.Main(env, os.Args[1:])
}

func TestScripts(t *testing.T) {
	testscript.Run(t, testscript.Params{
		Dir:                 "testdata/script",
		RequireExplicitExec: true,
		Setup: func(e *testscript.Env) error {
			e.Setenv("AIRLOCK_HOME", filepath.Join(e.WorkDir, "home"))
			return nil
		},
		Cmds: map[string]func(ts *testscript.TestScript, neg bool, args []string){
			"grep-tree": grepTree,
			"mode":      checkMode,
		},
	})
}

// grepTree: grep-tree TEXT DIR succeeds when some file under DIR holds TEXT
// (literally); with ! it fails when any does.
func grepTree(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: grep-tree TEXT DIR")
	}
	var found []string
	err := filepath.WalkDir(ts.MkAbs(args[1]), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.Contains(b, []byte(args[0])) {
			found = append(found, path)
		}
		return nil
	})
	ts.Check(err)
	switch {
	case neg && len(found) > 0:
		ts.Fatalf("text found in %v", found)
	case !neg && len(found) == 0:
		ts.Fatalf("text not found under %s", args[1])
	}
}

// checkMode: mode OCTAL PATH checks a file's permission bits.
func checkMode(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: mode OCTAL PATH")
	}
	want, err := strconv.ParseUint(args[0], 8, 32)
	ts.Check(err)
	st, err := os.Stat(ts.MkAbs(args[1]))
	ts.Check(err)
	if got := uint64(st.Mode().Perm()); (got == want) == neg {
		ts.Fatalf("mode of %s is %04o, want %s%04o", args[1], got, map[bool]string{true: "not ", false: ""}[neg], want)
	}
}
