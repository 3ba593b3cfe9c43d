package template_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/template"
)

func TestParse(t *testing.T) {
	doc := `
image: python:3
start: python3 -m http.server 8000
ready:
  command: [wget, -q, -O, /dev/null, "http://127.0.0.1:8000/"]
  timeout: 1m
env:
  PYTHONUNBUFFERED: "1"
workdir: /workspace
user: "1000"
limits:
  memory: 512M
  pids: 128
  cpus: 1.5
  disk: 1G
  command_timeout: 10m
  ttl: 1h
  output: 1M
policy: python-dev
runtime: gvisor
pool: 2
`
	got, err := template.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	want := &template.Template{
		Image: "python:3",
		Start: template.Command{"/bin/sh", "-c", "python3 -m http.server 8000"},
		Ready: &template.Ready{Command: template.Command{"wget", "-q", "-O", "/dev/null", "http://127.0.0.1:8000/"}, Timeout: policy.Duration(time.Minute)},
		Env:   map[string]string{"PYTHONUNBUFFERED": "1"}, Workdir: "/workspace", User: "1000",
		Limits: template.Limits{
			Memory: 512 << 20, Pids: 128, CPUs: 1.5, Disk: 1 << 30, CommandTimeout: policy.Duration(10 * time.Minute),
			TTL: policy.Duration(time.Hour), Output: 1 << 20,
		},
		Policy: "python-dev", Runtime: "gvisor", Pool: 2,
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("Parse: (-want +got)\n%s", d)
	}
	b, err := template.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	again, err := template.Parse(b)
	if err != nil {
		t.Fatalf("Parse(Marshal(t)): %v\n%s", err, b)
	}
	if d := cmp.Diff(got, again); d != "" {
		t.Fatalf("Parse(Marshal(t)): (-want +got)\n%s", d)
	}
}

func TestParseDefaults(t *testing.T) {
	got, err := template.Parse([]byte("image: busybox\nready:\n  command: true\n"))
	if err != nil {
		t.Fatal(err)
	}
	if got.Ready.Timeout != policy.Duration(template.DefaultReadyTimeout) {
		t.Errorf("ready.timeout = %v, want %v", got.Ready.Timeout, template.DefaultReadyTimeout)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"empty", "", "empty document"},
		{"no image", "pool: 1\n", "image: missing"},
		{"unknown key", "image: a\nimage_ref: b\n", "field image_ref not found"},
		{"two documents", "image: a\n---\nimage: b\n", "more than one YAML document"},
		{"image spaces", "image: a b\n", `image "a b"`},
		{"empty start", "image: a\nstart: []\n", "start: empty"},
		{"start mapping", "image: a\nstart: {x: 1}\n", "want a command"},
		{"ready without command", "image: a\nready:\n  timeout: 5s\n", "ready.command: empty"},
		{"ready timeout", "image: a\nready:\n  command: true\n  timeout: 11m\n", "ready.timeout 11m0s"},
		{"ready timeout zero", "image: a\nready:\n  command: true\n  timeout: 0s\n", "ready.timeout 0s"},
		{"ready timeout unit", "image: a\nready:\n  command: true\n  timeout: 5\n", `ready.timeout: "5" is not a duration`},
		{"env name", "image: a\nenv:\n  1X: y\n", `env "1X"`},
		{"env own", "image: a\nenv:\n  HTTPS_PROXY: x\n", "env HTTPS_PROXY: the sandbox sets it itself"},
		{"workdir relative", "image: a\nworkdir: work\n", `workdir "work"`},
		{"workdir unclean", "image: a\nworkdir: /a/../b\n", `workdir "/a/../b"`},
		{"user", "image: a\nuser: \"a:b\"\n", `user "a:b"`},
		{"memory", "image: a\nlimits:\n  memory: lots\n", `limits.memory: "lots" is not a size`},
		{"negative pids", "image: a\nlimits:\n  pids: -1\n", "limits: a limit is negative"},
		{"policy", "image: a\npolicy: Bad Name\n", `policy "Bad Name"`},
		{"pool", "image: a\npool: 33\n", "pool 33: want 0 to 32"},
		{"runtime", "image: a\nruntime: kata\n", `runtime "kata": want native or gvisor`},
		{"too big", "image: a\n#" + strings.Repeat("x", template.MaxSize), "limit is"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := template.Parse([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Parse(%q) = %v, want an error with %q", tc.doc, err, tc.want)
			}
		})
	}
}

func TestParseReportsEveryProblem(t *testing.T) {
	_, err := template.Parse([]byte("image: a\nworkdir: x\npool: -1\n"))
	if err == nil || !strings.Contains(err.Error(), "workdir") || !strings.Contains(err.Error(), "pool -1") {
		t.Fatalf("Parse = %v, want the workdir and pool problems", err)
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte("image: python:3\nstart: sleep 1\nready:\n  command: [true]\n  timeout: 5s\nenv: {A: b}\npool: 1\n"))
	f.Add([]byte("image: a\nlimits:\n  memory: 1.5G\n  cpus: 2\n"))
	f.Add([]byte("image: [a]\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tp, err := template.Parse(b)
		if err != nil {
			return // rejecting garbage is fine; panicking is not
		}
		out, err := template.Marshal(tp)
		if err != nil {
			t.Fatalf("Marshal of a parsed template: %v", err)
		}
		again, err := template.Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal(t)) = %v\n%s", err, out)
		}
		if d := cmp.Diff(tp, again); d != "" {
			t.Fatalf("Parse(Marshal(t)) differs (-want +got)\n%s", d)
		}
	})
}

// TestApplySandbox: a template's limits and runtime go over its policy's;
// what it leaves unset keeps the policy's.
func TestApplySandbox(t *testing.T) {
	for _, tc := range []struct {
		name      string
		tpl       template.Template
		pol, want policy.Sandbox
	}{
		{"runtime", template.Template{Runtime: "gvisor"}, policy.Sandbox{Runtime: "native"}, policy.Sandbox{Runtime: "gvisor"}},
		{"policy's runtime", template.Template{}, policy.Sandbox{Runtime: "gvisor"}, policy.Sandbox{Runtime: "gvisor"}},
		{"limits", template.Template{Limits: template.Limits{Pids: 7}}, policy.Sandbox{Limits: policy.Limits{Pids: 64, CPUs: 2}}, policy.Sandbox{Limits: policy.Limits{Pids: 7, CPUs: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.pol
			tc.tpl.ApplySandbox(&got)
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("ApplySandbox: (-want +got)\n%s", d)
			}
		})
	}
}
