package server_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
)

// tarball makes a tar of files (name -> content), gzipped when gz.
func tarball(t *testing.T, gz bool, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	var tw *tar.Writer
	var zw *gzip.Writer
	if gz {
		zw = gzip.NewWriter(&buf)
		tw = tar.NewWriter(zw)
	} else {
		tw = tar.NewWriter(&buf)
	}
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(files[n])); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if zw != nil {
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return buf.Bytes()
}

const fixScript = `turns:
  - text: "Looking."
    tool_calls:
      - name: run_command
        args: {command: "cat src/hello.txt && echo fixed >> src/hello.txt && echo step-two"}
  - tool_calls:
      - name: run_command
        args: {command: "echo more output"}
  - tool_calls:
      - name: finish
        args: {summary: "appended fixed"}
`

// TestEndToEnd: a scripted run created through the API on an uploaded
// tarball workspace runs in a real sandbox; its events stream over SSE
// while it runs; a stream cut mid-run and resumed with Last-Event-ID
// misses and repeats nothing; the patch downloads.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{drive: true})
	key := h.key("alpha", "runs:read", "runs:write")

	// A plain tar: the server gzips it on the way to the blob store.
	var up api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", key, tarball(t, false, map[string]string{"src/hello.txt": "hello from the upload\n"})).json(t, &up)
	if !strings.HasPrefix(up.ID, "upl_") || up.Gzipped || up.Size == 0 {
		t.Fatalf("upload = %+v", up)
	}
	run := h.createRun(key, map[string]any{
		"task": "append fixed", "script": fixScript,
		"workspace": map[string]any{"upload": up.ID},
		"verify":    map[string]any{"commands": []string{"grep -q fixed src/hello.txt"}},
		"metadata":  map[string]string{"ticket": "OPS-7"},
	})
	if run.Status != event.StatusQueued || run.Tenant != "alpha" || run.Metadata["ticket"] != "OPS-7" {
		t.Fatalf("created %+v", run)
	}

	// Stream from the start, hang up after three events, then resume
	// with Last-Event-ID: together they are the log, once each.
	path := "/v1/runs/" + run.ID + "/events/stream"
	first, _, status := h.stream(key, path, func(e sse) bool { return e.id == "3" })
	if status != http.StatusOK {
		t.Fatalf("stream status %d", status)
	}
	got := seqs(t, first, 1, false)
	rest, _, status := h.stream(key, path, nil, "Last-Event-ID", first[len(first)-1].id)
	if status != http.StatusOK {
		t.Fatalf("resumed stream status %d", status)
	}
	got = append(got, seqs(t, rest, 4, true)...)

	var final api.Run
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, key, nil).json(t, &final)
	if final.Status != event.StatusCompleted {
		t.Fatalf("run ended %s (%s)", final.Status, final.Reason)
	}
	if int64(len(got)) != final.Events || got[len(got)-1] != final.Events {
		t.Fatalf("streamed seqs %v, the run has %d events", got, final.Events)
	}
	var end api.StreamEnd
	if err := json.Unmarshal([]byte(rest[len(rest)-1].data), &end); err != nil || end.Status != event.StatusCompleted || end.LastSeq != final.Events {
		t.Errorf("end event %q", rest[len(rest)-1].data)
	}
	if final.Summary != "appended fixed" || final.Verification == nil || !final.Verification.Passed || final.Metadata["ticket"] != "OPS-7" {
		t.Errorf("final run %+v", final)
	}

	// The same log through the paged endpoint, and from ?after=.
	var page api.EventPage
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/events?after=2&limit=3", key, nil).json(t, &page)
	if len(page.Events) != 3 || page.Events[0].Seq != 3 || page.NextAfter != 5 || !page.More {
		t.Errorf("events page = %d events from %d, next_after %d, more %v", len(page.Events), page.Events[0].Seq, page.NextAfter, page.More)
	}
	tail, _, _ := h.stream(key, path+"?after="+strconv.FormatInt(final.Events-2, 10), nil)
	seqs(t, tail, final.Events-1, true)
	// Nothing left: 204, which stops an EventSource from reconnecting.
	if _, _, status := h.stream(key, path, nil, "Last-Event-ID", strconv.FormatInt(final.Events, 10)); status != http.StatusNoContent {
		t.Errorf("stream of a finished, fully sent run = %d, want 204", status)
	}

	// The patch, listed and downloaded.
	var arts struct{ Artifacts []api.Artifact }
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/artifacts", key, nil).json(t, &arts)
	names := []string{}
	for _, a := range arts.Artifacts {
		names = append(names, a.Name)
	}
	if !slices.Contains(names, "patch.diff") || slices.ContainsFunc(names, func(n string) bool { return strings.HasPrefix(n, "snapshots/") || strings.HasPrefix(n, "api/") }) {
		t.Errorf("artifacts %v", names)
	}
	patch := h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/artifacts/patch.diff", key, nil)
	if !strings.Contains(string(patch.body), "+fixed") || patch.header.Get("Content-Type") != "text/x-diff" ||
		!strings.Contains(patch.header.Get("Content-Disposition"), `filename=patch.diff`) {
		t.Errorf("patch %q (%v)", patch.body, patch.header)
	}
	if r := h.do("GET", "/v1/runs/"+run.ID+"/artifacts/files/none", key, nil); r.status != http.StatusNotFound || r.errBody(t).Code != api.CodeNotFound {
		t.Errorf("missing artifact = %d %s", r.status, r.body)
	}
	var list api.RunList
	h.must(http.StatusOK, "GET", "/v1/runs?status=completed", key, nil).json(t, &list)
	if len(list.Runs) != 1 || list.Runs[0].ID != run.ID {
		t.Errorf("completed runs %+v", list.Runs)
	}

	// Fork after step 1 and pause/resume/cancel the child through the API.
	var child api.Run
	h.must(http.StatusCreated, "POST", "/v1/runs/"+run.ID+"/fork", key, map[string]any{"at_step": 1}).json(t, &child)
	if child.ParentRunID != run.ID {
		t.Fatalf("fork %+v", child)
	}
	h.waitStatus(key, child.ID, event.StatusCompleted)
	if r := h.do("POST", "/v1/runs/"+child.ID+"/cancel", key, nil); r.status != http.StatusConflict || r.errBody(t).Code != api.CodeConflict {
		t.Errorf("cancel of a completed run = %d %s", r.status, r.body)
	}
}

const slowScript = `turns:
  - tool_calls:
      - name: run_command
        args: {command: "sleep 0.5; echo one"}
  - tool_calls:
      - name: run_command
        args: {command: "sleep 0.5; echo two"}
  - tool_calls:
      - name: finish
        args: {summary: "done"}
`

// TestPauseResumeCancel: a run paused through the API is resumed by the
// server's workers and completes; a run cancelled through the API ends
// cancelled, with the key recorded as who cancelled.
func TestPauseResumeCancel(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{drive: true})
	key := h.key("alpha", "runs:read", "runs:write")
	run := h.createRun(key, map[string]any{"task": "slow", "script": slowScript})
	h.waitStatus(key, run.ID, event.StatusRunning)
	if r := h.do("POST", "/v1/runs/"+run.ID+"/resume", key, nil); r.status != http.StatusConflict {
		t.Errorf("resume of a running run = %d %s", r.status, r.body)
	}
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/pause", key, map[string]string{"reason": "lunch"})
	h.waitStatus(key, run.ID, event.StatusPaused)
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/resume", key, nil)
	h.waitStatus(key, run.ID, event.StatusCompleted)

	other := h.createRun(key, map[string]any{"task": "slow", "script": slowScript})
	h.waitStatus(key, other.ID, event.StatusRunning)
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+other.ID+"/cancel", key, map[string]string{"reason": "not needed"})
	h.waitStatus(key, other.ID, event.StatusCancelled)
	var page api.EventPage
	h.must(http.StatusOK, "GET", "/v1/runs/"+other.ID+"/events?limit=1000", key, nil).json(t, &page)
	found := false
	for _, ev := range page.Events {
		if ev.Type == event.TypeRunCancelled {
			var p event.RunCancelled
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			found = strings.HasPrefix(p.By, "key_") && p.Reason == "not needed"
		}
	}
	if !found {
		t.Errorf("no run.cancelled by the key in %d events", len(page.Events))
	}
}

// TestGitWorkspaceAPI: a run's workspace can be a git repository, which
// the run fetches inside its sandbox under its policy: a URL that could
// carry a credential, or a source given twice, is refused at create (and
// the refusal does not repeat the credential); a repository the policy
// does not let the sandbox reach fails the run with git's reason.
func TestGitWorkspaceAPI(t *testing.T) {
	h := newHarness(t, harnessOptions{drive: true})
	key := h.key("alpha", "runs:read", "runs:write")
	for name, ws := range map[string]map[string]any{
		"credential in url": {"git": "https://user:hunter2@git.example/a.git"},
		"ssh url":           {"git": "ssh://git.example/a.git"},
		"option as ref":     {"git": "https://git.example/a.git", "ref": "--upload-pack=x"},
		"git and upload":    {"git": "https://git.example/a.git", "upload": "up_0123456789abcdef"},
		"ref alone":         {"ref": "main"},
		"neither":           {},
	} {
		r := h.do("POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "workspace": ws})
		if e := r.errBody(t); r.status != http.StatusBadRequest || e.Code != api.CodeBadRequest || strings.Contains(e.Message, "hunter2") {
			t.Errorf("%s: %d %+v", name, r.status, e)
		}
	}
	// The default policy allows no egress: git cannot reach the host.
	run := h.createRun(key, map[string]any{
		"task": "t", "script": finishScript,
		"workspace": map[string]any{"git": "https://git.example/a.git", "ref": "main"},
	})
	got := h.waitStatus(key, run.ID, event.StatusFailed, event.StatusCompleted)
	if got.Status != event.StatusFailed || !strings.Contains(got.Reason, "git source https://git.example/a.git") {
		t.Errorf("run %s (%s), want failed naming the git source", got.Status, got.Reason)
	}
}
