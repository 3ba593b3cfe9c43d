package sandboxcli

import (
	"io"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/alecthomas/kong"
)

// kongGrammar is the sandbox commands as the whole command line's parser
// reads them.
type kongGrammar struct {
	Sandbox struct {
		Run  ImageRunCmd `cmd:""`
		Exec ExecCmd     `cmd:""`
		Ls   LsCmd       `cmd:""`
		Rm   RmCmd       `cmd:""`
		Gc   GcCmd       `cmd:""`
	} `cmd:""`
}

// kongParse parses args with kong; the selected command's struct, or nil
// when kong refuses them.
func kongParse(t testing.TB, args []string) any {
	t.Helper()
	var g kongGrammar
	p, err := kong.New(&g, kong.Name("airlock"), kong.Writers(io.Discard, io.Discard), kong.Exit(func(int) {}))
	if err != nil {
		t.Fatal(err)
	}
	kctx, err := p.Parse(args)
	if err != nil || kctx == nil || kctx.Selected() == nil {
		return nil
	}
	return kctx.Selected().Target.Addr().Interface()
}

// parseArgs is what Main does with args: the command's struct, or nil when
// parse declines them.
func parseArgs(args []string) any {
	if len(args) < 2 || args[0] != "sandbox" {
		return nil
	}
	cmd := command(args[1])
	if cmd == nil || !parse(cmd, args[2:]) {
		return nil
	}
	return cmd
}

// agree fails t when parse accepts args and kong reads them otherwise (or
// not at all).
func agree(t testing.TB, args []string) (accepted bool) {
	t.Helper()
	got := parseArgs(args)
	if got == nil {
		return false
	}
	want := kongParse(t, args)
	if want == nil {
		t.Fatalf("parse(%q) = %+v, but kong refuses it", args, got)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("parse(%q) = %+v, kong reads %+v", args, got, want)
	}
	return true
}

func TestParse(t *testing.T) {
	tests := []struct {
		args   []string
		accept bool
	}{
		{[]string{"sandbox", "run", "--", "true"}, true},
		{[]string{"sandbox", "run", "true", "--x"}, true},
		{[]string{
			"sandbox", "run", "--memory", "1G", "--pids", "10", "--cpus", "0.5", "-e", "A=1", "-e", "B=a:b", "--mount", "/a:/b:rw",
			"--workspace", "/x", "--workspace-mode", "ro", "--network", "none", "--disk", "2G", "--rootfs", "/r", "--user", "root",
			"--soft-limits", "--timeout", "5s", "--max-output", "1M", "--json", "-i", "--", "sh", "-c", "echo --json",
		}, true},
		{[]string{"sandbox", "run", "--memory=1G", "--env=A=1", "--", "true"}, true},
		{[]string{"sandbox", "run", "--runtime", "gvisor", "--", "true"}, true},
		{[]string{"sandbox", "run", "--runtime=native", "--", "true"}, true},
		{[]string{"sandbox", "run", "--network", "proxy", "--proxy-socket", "/p.sock", "--", "true"}, true},
		{[]string{"sandbox", "exec", "sb-1", "--", "ls", "-la"}, true},
		{[]string{"sandbox", "exec", "-i", "-t", "-w", "/tmp", "--user", "1000", "-e", "A=1", "--timeout", "1m", "sb-1", "--", "ls"}, true},
		{[]string{"sandbox", "ls"}, true},
		{[]string{"sandbox", "ls", "--json"}, true},
		{[]string{"sandbox", "rm", "sb-1", "sb-2"}, true},
		{[]string{"sandbox", "gc"}, true},
		{[]string{"sandbox", "run", "--image", "busybox", "--", "true"}, true},
		{[]string{"sandbox", "run", "--image=sha256:0123456789ab", "--env", "A=1", "--"}, true},

		{[]string{"sandbox", "run"}, false},
		{[]string{"sandbox", "run", "--image", "busybox"}, false},
		{[]string{"sandbox", "run", "--image", "a", "--image", "b", "--", "true"}, false},
		{[]string{"sandbox", "run", "--image", "--", "true"}, false},
		{[]string{"sandbox", "run", "--allow", "example.com", "--", "true"}, false},
		{[]string{"sandbox", "run", "-it", "--", "true"}, false},
		{[]string{"sandbox", "run", "-memory", "1G", "--", "true"}, false},
		{[]string{"sandbox", "run", "--memory", "--", "true"}, false},
		{[]string{"sandbox", "run", "--memory", "1G", "--memory", "2G", "--", "true"}, false},
		{[]string{"sandbox", "run", "--pids", "0x10", "--", "true"}, false},
		{[]string{"sandbox", "run", "--pids", "-1", "--", "true"}, false},
		{[]string{"sandbox", "run", "--cpus", "1e3", "--", "true"}, false},
		{[]string{"sandbox", "run", "--json=false", "--", "true"}, false},
		{[]string{"sandbox", "run", "--workspace-mode", "bogus", "--", "true"}, false},
		{[]string{"sandbox", "run", "--timeout", "5", "--", "true"}, false},
		{[]string{"sandbox", "run", "-", "true"}, false},
		{[]string{"sandbox", "exec", "sb-1", "--user", "root", "--", "ls"}, false},
		{[]string{"sandbox", "exec", "--", "sb-1", "ls"}, false},
		{[]string{"sandbox", "exec", "sb-1"}, false},
		{[]string{"sandbox", "ls", "x"}, false},
		{[]string{"sandbox", "rm"}, false},
		{[]string{"sandbox", "rm", "sb-1", "--bogus"}, false},
		{[]string{"sandbox", "gc", "--", "x"}, false},
	}
	for _, tt := range tests {
		if got := agree(t, tt.args); got != tt.accept {
			t.Errorf("parse(%q) accepted = %v, want %v", tt.args, got, tt.accept)
		}
	}
}

// A list flag's value is one value, commas and all, in both parsers.
func TestParseListValue(t *testing.T) {
	args := []string{"sandbox", "run", "-e", "LIST=a,b", "--mount", `/a\,b:/c`, "--", "true"}
	if !agree(t, args) {
		t.Fatalf("parse(%q) declined", args)
	}
	c := parseArgs(args).(*ImageRunCmd)
	if want := []string{"LIST=a,b"}; !reflect.DeepEqual(c.Env, want) {
		t.Errorf("env = %q, want %q", c.Env, want)
	}
}

func TestFlagName(t *testing.T) {
	for field, want := range map[string]string{
		"WorkspaceMode": "workspace-mode", "TTY": "tty", "MaxOutput": "max-output", "Rootfs": "rootfs", "ProxySocket": "proxy-socket",
	} {
		if got := flagName(field); got != want {
			t.Errorf("flagName(%q) = %q, want %q", field, got, want)
		}
	}
}

// FuzzParse: whatever parse accepts, kong reads the same way. The input is
// the arguments, one per line.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"sandbox\nrun\n--\ntrue",
		"sandbox\nrun\n--memory=1G\n-e\nA=1\n--json\n--\nsh\n-c\nx",
		"sandbox\nexec\n-i\nsb-1\n--\nls",
		"sandbox\nrm\nsb-1\nsb-2",
		"sandbox\nls\n--json",
		"sandbox\nrun\n--cpus\n1.5\n--pids\n7\n--timeout\n1m30s\ntrue",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		agree(t, strings.Split(s, "\n"))
	})
}

// FuzzFrontWords reads arbitrary words as a sandbox host reads a request in
// words (FrontWords). Nothing may panic; words it reads either carry their
// usage error or make a request of a command whose host paths are
// absolute (the host's working directory is not the caller's).
func FuzzFrontWords(f *testing.F) {
	for _, s := range []string{
		"--\ntrue",
		"--memory=1G\n-e\nA=1\n--json\n--\nsh\n-c\nx",
		"--workspace\n/tmp\n--workspace-mode\nro\n--mount\n/etc:/e:ro\n--\nls",
		"--workspace\nrel\n--\nls",
		"-i\n--\ncat",
		"--timeout\n1m\n--max-output\n1K\n--\nyes",
		"--",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		words := strings.Split(s, "\n")
		w, ok := FrontWords(words, "/")
		if !ok || w.Err != nil {
			return
		}
		r := w.Request
		if len(r.Argv) == 0 || r.Words != nil || r.Prepare != nil {
			t.Fatalf("FrontWords(%q) = %+v: want a command, without words or a preparation", words, r)
		}
		flags := words
		if i := slices.Index(words, "--"); i >= 0 {
			flags = words[:i]
		}
		if r.Stdin && !slices.Contains(flags, "-i") && !slices.Contains(flags, "--interactive") {
			t.Fatalf("FrontWords(%q) asks for stdin without -i", words)
		}
		for _, p := range []string{r.Spec.Workspace, r.Spec.RootFS, r.Spec.ProxySocket} {
			if p != "" && !filepath.IsAbs(p) {
				t.Fatalf("FrontWords(%q): host path %q is relative", words, p)
			}
		}
		for _, m := range r.Spec.Mounts {
			if !filepath.IsAbs(m.Source) {
				t.Fatalf("FrontWords(%q): mount source %q is relative", words, m.Source)
			}
		}
	})
}
