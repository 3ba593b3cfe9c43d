package sandboxcli

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/sandbox"
)

func TestFast(t *testing.T) {
	tests := []struct {
		args string
		want bool
	}{
		{"sandbox run -- true", true},
		{"sandbox run --memory 1G -- sh -c --help", true},
		{"sandbox exec sb-1 -- ls -h", true},
		{"sandbox ls", true},
		{"sandbox rm sb-1", true},
		{"sandbox gc", true},
		{"sandbox run --help", false},
		{"sandbox run -h -- true", false},
		{"sandbox create", false},
		{"sandbox supervise", false},
		{"sandbox", false},
		{"version", false},
		{"run --task x", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := Fast(strings.Fields(tt.args)); got != tt.want {
			t.Errorf("Fast(%q) = %v, want %v", tt.args, got, tt.want)
		}
	}
}

// TestMainDeclines: what the grammar here does not know is left, untouched,
// to the whole command line.
func TestMainDeclines(t *testing.T) {
	for _, args := range []string{
		"sandbox run --allow example.com -- true",
		"sandbox run --policy p.yaml -- true",
		"sandbox run --bogus -- true",
		"sandbox exec --bogus sb-1 -- true",
		"sandbox run --memory",
		// An image the home's store lacks (there is no store), a bad
		// image reference, an image with --rootfs: the whole command line
		// says what is wrong.
		"sandbox run --image busybox -- true",
		"sandbox run --image Not/Valid -- true",
		"sandbox run --image busybox --rootfs / -- true",
	} {
		var out strings.Builder
		env := &Env{Stdout: &out, Stderr: &out, Home: t.TempDir()}
		if status, ok := Main(env, strings.Fields(args)); ok {
			t.Errorf("Main(%q) ran (status %d), want it declined", args, status)
		}
		if out.Len() > 0 {
			t.Errorf("Main(%q) wrote %q before declining", args, out.String())
		}
	}
}

func TestSpec(t *testing.T) {
	tests := []struct {
		name    string
		flags   SpecFlags
		egress  bool
		wantErr string
	}{
		{"defaults", SpecFlags{}, false, ""},
		{"bad memory", SpecFlags{Memory: "lots"}, false, "--memory"},
		{"relative mount", SpecFlags{Mount: []string{"/tmp:rel"}}, false, "absolute"},
		{"proxy without socket", SpecFlags{Network: "proxy"}, false, "--network proxy needs"},
		{"none with egress", SpecFlags{Network: "none"}, true, "conflicts"},
		{"socket with egress", SpecFlags{ProxySocket: "/x.sock"}, true, "airlock runs the proxy"},
		{"mode without workspace", SpecFlags{WorkspaceMode: "rw"}, false, "needs --workspace"},
		{"missing workspace", SpecFlags{Workspace: "/nonexistent/ws"}, false, "--workspace /nonexistent/ws: stat /nonexistent/ws: no such file"},
		{"workspace not a directory", SpecFlags{Workspace: "/dev/null"}, false, "--workspace /dev/null: not a directory"},
		{"missing rootfs", SpecFlags{Rootfs: "/nonexistent/root"}, false, "--rootfs /nonexistent/root: stat"},
		{"missing mount source", SpecFlags{Mount: []string{"/nonexistent/src:/src"}}, false, "--mount /nonexistent/src:/src: stat"},
		{"workspace and mount", SpecFlags{Workspace: "/tmp", Mount: []string{"/tmp:/src:rw"}}, false, ""},
		{"unknown runtime", SpecFlags{Runtime: "kata"}, false, `runtime "kata": want native or gvisor`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := tt.flags.Spec(BuiltinDefaults, tt.egress)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Spec: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Spec error = %v, want one saying %q", err, tt.wantErr)
			case tt.wantErr == "" && s.Limits != BuiltinDefaults.Limits:
				t.Errorf("limits = %+v, want the defaults %+v", s.Limits, BuiltinDefaults.Limits)
			}
		})
	}
	// --runtime wins over the policy's sandbox.runtime, which is the default.
	d := BuiltinDefaults
	d.Runtime = sandbox.RuntimeGVisor
	for _, c := range []struct {
		flag string
		d    Defaults
		want string
	}{{"", BuiltinDefaults, ""}, {"", d, "gvisor"}, {"native", d, "native"}, {"gvisor", BuiltinDefaults, "gvisor"}} {
		s, err := (&SpecFlags{Runtime: c.flag}).Spec(c.d, false)
		if err != nil || s.Runtime != c.want {
			t.Errorf("--runtime %q over policy runtime %q: Spec().Runtime = %q, %v; want %q", c.flag, c.d.Runtime, s.Runtime, err, c.want)
		}
	}
	// --static-read-only, or the policy's sandbox.static_read_only.
	static := BuiltinDefaults
	static.StaticReadOnly = true
	for _, c := range []struct {
		flag bool
		d    Defaults
		want bool
	}{{false, BuiltinDefaults, false}, {true, BuiltinDefaults, true}, {false, static, true}} {
		s, err := (&SpecFlags{StaticReadOnly: c.flag}).Spec(c.d, false)
		if err != nil || s.StaticReadOnly != c.want {
			t.Errorf("--static-read-only=%v over the policy's %v: Spec().StaticReadOnly = %v, %v; want %v", c.flag, c.d.StaticReadOnly, s.StaticReadOnly, err, c.want)
		}
	}
	s, err := (&SpecFlags{SoftLimits: true, Pids: 7}).Spec(BuiltinDefaults, false)
	if err != nil || s.Limits.RequireHard || s.Limits.Pids != 7 {
		t.Errorf("--soft-limits --pids 7: %+v, %v", s.Limits, err)
	}
}
