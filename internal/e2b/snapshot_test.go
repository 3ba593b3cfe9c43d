package e2b_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
)

// makeTree is a workspace with what a copy loses first: modes, a symlink
// (dangling too), an empty directory, a hard link, a name with a space.
const makeTree = `set -e; cd /workspace
mkdir -p src/deep empty 'with space'
printf 'run\n' > src/run.sh; chmod 0750 src/run.sh
printf 'secret\n' > src/deep/key; chmod 0600 src/deep/key
printf 'shared\n' > 'with space/a'; ln 'with space/a' 'with space/b'
ln -s src/run.sh link; ln -s ../nowhere src/dangling
chmod 0705 empty
head -c 300000 /dev/urandom > big.bin`

// treeOf lists s's /workspace: each entry's path, type, mode, link target
// and, for a file, its size, link count and checksum.
func (h *harness) treeOf(s sbx) string {
	h.t.Helper()
	r := parseRun(h.t, h.stream(s, "process.Process/Start", bash(`cd /workspace && find . -mindepth 1 -printf '%P %y %m %l %s %n\n' | sort && find . -type f -print0 | sort -z | xargs -0 -r sha256sum`), nil))
	if r.exit != 0 || r.stdout == "" {
		h.t.Fatalf("list the workspace: %+v", r)
	}
	return r.stdout
}

// pausedOf returns the snapshots the record of sandbox id's last pause
// names.
func pausedOf(t *testing.T, h *harness, id string) []string {
	t.Helper()
	rec := recordOf(t, h.store, id)
	var out []string
	for _, e := range rec.events {
		if e.Type != event.TypeRunPaused {
			continue
		}
		p, err := e.Unpack()
		if err != nil {
			t.Fatal(err)
		}
		out = p.(*event.RunPaused).Snapshots
	}
	return out
}

// TestPauseCheckpoint: a pause keeps the workspace as a checkpoint (its
// digest in the record's pause, no tar file in StateDir), and a resume,
// after the server restarted, gives the same tree: modes, symlinks, hard
// links, an empty directory. A second pause keeps only what changed, and
// resumes to the changed tree.
func TestPauseCheckpoint(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.createRaw("alpha", map[string]any{"timeout": 3600})
	h.run(s, makeTree)
	want := h.treeOf(s)
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	first := pausedOf(t, h, s.ID)
	if len(first) != 1 || !strings.HasPrefix(first[0], "sha256:") {
		t.Fatalf("the pause's snapshots = %q, want one checkpoint digest", first)
	}
	tars, _ := filepath.Glob(filepath.Join(filepath.Dir(h.store.Path()), "e2b", "snapshot-*"))
	if len(tars) != 0 {
		t.Errorf("tar files in StateDir: %q, want none", tars)
	}

	h.serve(t, harnessOptions{}, h.store)
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{"timeout": 600}); res.status != 201 {
		t.Fatalf("resume after a restart: %s", res)
	}
	if got := h.treeOf(s); got != want {
		t.Errorf("tree after resume:\n%s\nwant:\n%s", got, want)
	}

	h.run(s, "cd /workspace && echo more >> src/run.sh && rm -r 'with space' && mkdir -p new/empty && mv big.bin moved.bin")
	want = h.treeOf(s)
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("second pause: %s", res)
	}
	second := pausedOf(t, h, s.ID)
	if len(second) != 1 || second[0] == first[0] {
		t.Fatalf("the second pause's snapshots = %q, want another checkpoint than %q", second, first)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{}); res.status != 201 {
		t.Fatalf("second resume: %s", res)
	}
	if got := h.treeOf(s); got != want {
		t.Errorf("tree after the second resume:\n%s\nwant:\n%s", got, want)
	}
	h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil)
}

// TestPauseOldFormat: a sandbox paused by a server without checkpoints
// (a tar file in StateDir) resumes on one with them, and its next pause
// is a checkpoint; a snapshot of it while it is paused so is refused.
func TestPauseOldFormat(t *testing.T) {
	old := harnessOptions{noCheckpoints: true}
	h := newHarness(t, old)
	s := h.createRaw("alpha", map[string]any{"timeout": 3600})
	h.run(s, "cd /workspace && mkdir -p a/b && echo kept > a/b/f && chmod 0640 a/b/f")
	want := h.treeOf(s)
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{}); res.status != 501 {
		t.Errorf("snapshot on a server without checkpoints = %s, want 501", res)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	tars, _ := filepath.Glob(filepath.Join(filepath.Dir(h.store.Path()), "e2b", "snapshot-*.tar"))
	if len(tars) != 1 || len(pausedOf(t, h, s.ID)) != 0 {
		t.Fatalf("tar files %q, pause's snapshots %q: want one tar file and no checkpoint", tars, pausedOf(t, h, s.ID))
	}

	h.serve(t, harnessOptions{}, h.store) // now with checkpoints
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{}); res.status != 409 {
		t.Errorf("snapshot of a sandbox paused into a tar file = %s, want 409", res)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{}); res.status != 201 {
		t.Fatalf("resume: %s", res)
	}
	if got := h.treeOf(s); !strings.Contains(got, "a/b/f f 640 ") || !strings.Contains(got, "a/b/f\n") {
		t.Errorf("tree after resuming a tar file:\n%s\nwant:\n%s", got, want)
	}
	if _, err := os.Stat(tars[0]); !os.IsNotExist(err) {
		t.Errorf("the tar file after the resume: %v, want it removed", err)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause again: %s", res)
	}
	if got := pausedOf(t, h, s.ID); len(got) != 1 {
		t.Errorf("the second pause's snapshots = %q, want a checkpoint", got)
	}
	h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil)
}

// snap is a createSnapshot answer, and a listSnapshots row.
type snap struct {
	ID        string   `json:"snapshotID"`
	Names     []string `json:"names"`
	SandboxID string   `json:"sandboxID"`
}

func (h *harness) snapshot(tenant, id string, body map[string]any) snap {
	h.t.Helper()
	res := h.api(tenant, "POST", "/sandboxes/"+id+"/snapshots", body)
	var sn snap
	if res.status != http.StatusCreated || json.Unmarshal(res.body, &sn) != nil || sn.ID == "" || sn.Names == nil {
		h.t.Fatalf("snapshot: %s", res)
	}
	return sn
}

func (h *harness) snapshots(tenant, query string) ([]snap, string) {
	h.t.Helper()
	res := h.api(tenant, "GET", "/snapshots"+query, nil)
	var rows []snap
	if res.status != 200 || json.Unmarshal(res.body, &rows) != nil {
		h.t.Fatalf("list snapshots: %s", res)
	}
	return rows, res.header.Get("X-Next-Token")
}

// TestSnapshots: a snapshot of a running sandbox (which runs on) boots new
// sandboxes, by its id or its name, with its tree, after a restart too;
// it is listed, filtered and paged, and deleted; another tenant cannot
// see, use or delete it, nor snapshot the sandbox.
func TestSnapshots(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.createRaw("alpha", map[string]any{"timeout": 3600})
	h.run(s, makeTree)
	want := h.treeOf(s)
	named := h.snapshot("alpha", s.ID, map[string]any{"name": "team/base:v1"})
	if len(named.Names) != 1 || named.Names[0] != "team/base:v1" || named.SandboxID != s.ID {
		t.Errorf("snapshot = %+v, want the name and the sandbox", named)
	}
	// The sandbox runs on; what it does next is not in the snapshot.
	h.run(s, "cd /workspace && echo later > later.txt && rm src/deep/key")
	later := h.treeOf(s)
	plain := h.snapshot("alpha", s.ID, nil)
	if len(plain.Names) != 0 {
		t.Errorf("unnamed snapshot's names = %q", plain.Names)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{"name": "team/base:v1"}); res.status != 409 {
		t.Errorf("a second snapshot called the same = %s, want 409", res)
	}
	// E2B's own tests name theirs snap-test-…: only an id's shape is taken.
	if sn := h.snapshot("alpha", s.ID, map[string]any{"name": "snap-test-1"}); len(sn.Names) != 1 || sn.Names[0] != "snap-test-1" {
		t.Errorf("snapshot called snap-test-1 = %+v", sn)
	} else if res := h.api("alpha", "DELETE", "/templates/snap-test-1", nil); res.status/100 != 2 {
		t.Errorf("delete snap-test-1 = %s", res)
	}
	for _, bad := range []string{"base", "snap-0123456789abcdef0123", "a b", strings.Repeat("x", 129)} {
		if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/snapshots", map[string]any{"name": bad}); res.status != 400 {
			t.Errorf("snapshot called %q = %s, want 400", bad, res)
		}
	}

	for _, ref := range []string{named.ID, "team/base:v1"} {
		c := h.createRaw("alpha", map[string]any{"templateID": ref})
		if c.TemplateID != named.ID {
			t.Errorf("created from %s: template %q, want %q", ref, c.TemplateID, named.ID)
		}
		if got := h.treeOf(c); got != want {
			t.Errorf("tree of a sandbox created from %s:\n%s\nwant:\n%s", ref, got, want)
		}
		h.api("alpha", "DELETE", "/sandboxes/"+c.ID, nil)
	}

	// Another tenant sees none of it.
	if rows, _ := h.snapshots("beta", ""); len(rows) != 0 {
		t.Errorf("beta's snapshots = %+v, want none", rows)
	}
	if res := h.api("beta", "POST", "/v2/sandboxes", map[string]any{"templateID": named.ID}); res.status != 404 {
		t.Errorf("beta creating from alpha's snapshot = %s, want 404", res)
	}
	if res := h.api("beta", "DELETE", "/templates/"+named.ID, nil); res.status != 404 || !strings.Contains(string(res.body), `"code":404`) {
		t.Errorf("beta deleting alpha's snapshot = %s, want 404", res)
	}
	if res := h.api("beta", "POST", "/sandboxes/"+s.ID+"/snapshots", nil); res.status != 404 {
		t.Errorf("beta snapshotting alpha's sandbox = %s, want 404", res)
	}

	// Listed, filtered and paged; kept across a restart (which the
	// sandbox they were taken from does not live through).
	third := h.snapshot("alpha", s.ID, map[string]any{"name": "other"})
	h.serve(t, harnessOptions{}, h.store)
	rows, next := h.snapshots("alpha", "?limit=2")
	if len(rows) != 2 || rows[0].ID != named.ID || rows[1].ID != plain.ID || next == "" {
		t.Fatalf("first page = %+v, next %q", rows, next)
	}
	rows, next = h.snapshots("alpha", "?limit=2&nextToken="+url.QueryEscape(next))
	if len(rows) != 1 || rows[0].ID != third.ID || next != "" {
		t.Errorf("second page = %+v, next %q", rows, next)
	}
	if rows, _ := h.snapshots("alpha", "?name=other"); len(rows) != 1 || rows[0].ID != third.ID {
		t.Errorf("by name = %+v", rows)
	}
	if rows, _ := h.snapshots("alpha", "?sandboxID="+s.ID); len(rows) != 3 {
		t.Errorf("by sandbox = %+v, want 3", rows)
	}
	if rows, _ := h.snapshots("alpha", "?sandboxID=nope"); len(rows) != 0 {
		t.Errorf("by another sandbox = %+v, want none", rows)
	}
	c := h.createRaw("alpha", map[string]any{"templateID": plain.ID})
	if got := h.treeOf(c); got != later {
		t.Errorf("tree of a sandbox created after a restart:\n%s\nwant:\n%s", got, later)
	}

	// Deleted: gone from the list and as a template, and again 404.
	if res := h.api("alpha", "DELETE", "/templates/"+named.ID, nil); res.status != 204 {
		t.Fatalf("delete: %s", res)
	}
	if res := h.api("alpha", "DELETE", "/templates/"+named.ID, nil); res.status != 404 {
		t.Errorf("delete again = %s, want 404", res)
	}
	if res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{"templateID": "team/base:v1"}); res.status != 404 {
		t.Errorf("create from a deleted snapshot's name = %s, want 404", res)
	}
	if rows, _ := h.snapshots("alpha", ""); len(rows) != 2 {
		t.Errorf("after a delete = %+v, want 2", rows)
	}
	// A snapshot of a paused sandbox is its pause's checkpoint.
	h.run(c, "echo paused > /workspace/paused.txt")
	paused := h.treeOf(c)
	if res := h.api("alpha", "POST", "/sandboxes/"+c.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	fromPaused := h.snapshot("alpha", c.ID, nil)
	if got := pausedOf(t, h, c.ID); len(got) != 1 {
		t.Fatalf("pause's snapshots = %q", got)
	}
	d := h.createRaw("alpha", map[string]any{"templateID": fromPaused.ID})
	if got := h.treeOf(d); got != paused {
		t.Errorf("tree of a sandbox created from a paused one's snapshot:\n%s\nwant:\n%s", got, paused)
	}
	h.api("alpha", "DELETE", "/sandboxes/"+d.ID, nil)
	h.api("alpha", "DELETE", "/sandboxes/"+c.ID, nil)
}

// TestSnapshotLimit: a pause or snapshot of a workspace over MaxSnapshot
// answers 507, and the sandbox runs on.
func TestSnapshotLimit(t *testing.T) {
	h := newHarness(t, harnessOptions{config: e2b.Config{MaxSnapshot: 1 << 20}})
	s := h.create("alpha", nil)
	h.run(s, "head -c 1500000 /dev/urandom > /workspace/big")
	for _, path := range []string{"/snapshots", "/pause"} {
		if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+path, map[string]any{}); res.status != 507 {
			t.Errorf("%s of a workspace over the limit = %s, want 507", path, res)
		}
	}
	h.run(s, "rm /workspace/big && echo small > /workspace/small")
	h.snapshot("alpha", s.ID, nil)
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Errorf("pause under the limit = %s", res)
	}
}
