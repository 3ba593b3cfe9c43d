package engine_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/testgit"
)

// pinnedNetwork gives each sandbox a real egress proxy whose policy allows
// host:port (pinned to a loopback server) when allow is set, and nothing
// otherwise.
type pinnedNetwork struct {
	t         *testing.T
	hostPort  string // "git.test:PORT"
	to        string // "127.0.0.1:PORT"
	allow     bool
	allowPort int
}

func (n *pinnedNetwork) Attach(_ context.Context, a sandbox.Attachment) (func(), error) {
	pol := &policy.Network{Default: policy.Deny, Resolve: []policy.Pin{{Host: n.hostPort, To: n.to}}}
	if n.allow {
		pol.Allow = []policy.Rule{{Host: "git.test", Ports: []int{n.allowPort}}}
	}
	return attachProxy(n.t, a, pol, nil)
}

// TestGitWorkspace: a sandbox's workspace can start as a git repository,
// fetched inside the sandbox through its egress proxy: the run's policy
// decides whether the repository is reachable, the fetched tree is recorded
// once and the patch is against it, never including the repository's
// internals.
func TestGitWorkspace(t *testing.T) {
	srv := testgit.NewServer(t)
	first, second := srv.Repo(t, "proj")
	_, portStr, _ := net.SplitHostPort(srv.Listener.Addr().String())
	port, _ := strconv.Atoi(portStr)
	url := "http://git.test:" + portStr + "/proj.git"
	const script = "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"cat README && echo more >> README && git status --short\"}\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"

	for _, tc := range []struct {
		name       string
		ref        string
		allow      bool
		wantStatus event.Status
		wantOut    string
		wantCommit string
	}{
		{"default branch", "", true, event.StatusCompleted, "second", second},
		{"tag", "v1", true, event.StatusCompleted, "first", first},
		{"commit id", first, true, event.StatusCompleted, "first", first},
		{"not allowed by policy", "", false, event.StatusFailed, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv.ResetHits()
			nw := &pinnedNetwork{t: t, hostPort: "git.test:" + portStr, to: srv.Listener.Addr().String(), allow: tc.allow, allowPort: port}
			h := newHarness(t, func(o *engine.Options) { o.Network = nw })
			o := h.run("git", script, engine.Config{Sandboxes: []engine.SandboxConfig{{Name: "main", Git: &engine.GitSource{URL: url, Ref: tc.ref}}}})
			if o.Status != tc.wantStatus {
				t.Fatalf("status %s (%s), want %s", o.Status, o.Reason, tc.wantStatus)
			}
			var fetched []*event.WorkspaceFetched
			for _, e := range h.verifyLog(o.RunID) {
				if e.Type == event.TypeWorkspaceFetched {
					p, err := e.Unpack()
					if err != nil {
						t.Fatal(err)
					}
					fetched = append(fetched, p.(*event.WorkspaceFetched))
				}
			}
			if !tc.allow {
				if !strings.Contains(o.Reason, "git source") {
					t.Errorf("reason %q does not name the git source", o.Reason)
				}
				if n := srv.Hits(); n != 0 {
					t.Errorf("the repository was reached %d times against the policy", n)
				}
				if len(fetched) != 0 {
					t.Errorf("fetched recorded: %+v", fetched)
				}
				return
			}
			if len(fetched) != 1 || fetched[0].Commit != tc.wantCommit || fetched[0].URL != url || fetched[0].Ref != tc.ref {
				t.Fatalf("workspace.fetched %+v, want one of commit %s", fetched, tc.wantCommit)
			}
			if f := h.finished(o.RunID); len(f) == 0 || !strings.Contains(f[0].Output, tc.wantOut) {
				t.Errorf("output %+v, want %q", f, tc.wantOut)
			}
			var patch string
			for _, a := range o.Artifacts {
				if a.Name == "patch.diff" {
					r, err := h.blobs.Open(context.Background(), a.Digest)
					if err != nil {
						t.Fatal(err)
					}
					patch = mustRead(t, r)
				}
			}
			if !strings.Contains(patch, "+more") || strings.Contains(patch, "new file") || strings.Contains(patch, ".git/") {
				t.Errorf("patch against the fetched tree:\n%s", patch)
			}
		})
	}
}

// TestGitSourceValidate: a git source that could carry a credential into
// the record, leave the proxy's reach, or be read as an option or refspec
// is refused when the run is created.
func TestGitSourceValidate(t *testing.T) {
	for _, tc := range []struct {
		url, ref string
		ok       bool
	}{
		{"https://git.example/a/b.git", "", true},
		{"http://git.example:8080/b", "release/1.2", true},
		{"https://git.example/b", "0123456789abcdef0123456789abcdef01234567", true},
		{"ssh://git.example/b", "", false},
		{"git://git.example/b", "", false},
		{"file:///etc", "", false},
		{"https://user:pw@git.example/b", "", false},
		{"https://token@git.example/b", "", false},
		{"https://git.example/b?token=x", "", false},
		{"https://git.example/b#main", "", false},
		{"https:///nohost", "", false},
		{"https://git.example/b c", "", false},
		{"https://git.example/b", "-uhack", false},
		{"https://git.example/b", "a:b", false},
		{"https://git.example/b", "a/../b", false},
		{"https://git.example/b", "x.lock", false},
		{"https://git.example/b", "a b", false},
		{"https://git.example/" + strings.Repeat("a", engine.MaxGitURLLen), "", false},
	} {
		err := engine.GitSource{URL: tc.url, Ref: tc.ref}.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("Validate(%q, %q) = %v, want ok=%v", tc.url, tc.ref, err, tc.ok)
		}
	}
	h := newHarness(t)
	_, err := h.eng.Create(context.Background(), engine.Request{Task: "t", Config: engine.Config{
		Model:     "openai:x",
		Sandboxes: []engine.SandboxConfig{{Name: "main", Git: &engine.GitSource{URL: "https://u:p@git.example/b"}}},
	}})
	if !errors.Is(err, engine.ErrInvalid) || strings.Contains(err.Error(), "u:p") {
		t.Errorf("Create with a credential in the URL = %v", err)
	}
}
