package server_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/server/servertest"
	"github.com/airlockrun/airlock/internal/store"
)

const finishScript = `turns:
  - tool_calls:
      - name: finish
        args: {summary: "ok"}
`

const pushScript = `turns:
  - tool_calls:
      - name: run_command
        args: {command: "git push origin main || echo pushed"}
  - tool_calls:
      - name: finish
        args: {summary: "done"}
`

const askPolicy = `tools:
  run_command:
    rules:
      - when: args.command.matches("^git push")
        action: ask
        reason: pushing needs a person
`

// waitApproval polls the approvals list of key's tenant until one waits.
func (h *harness) waitApproval(key string) api.Approval {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		var as struct{ Approvals []api.Approval }
		h.must(http.StatusOK, "GET", "/v1/approvals", key, nil).json(h.t, &as)
		if len(as.Approvals) > 0 {
			return as.Approvals[0]
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.t.Fatal("no pending approval in a minute")
	return api.Approval{}
}

// outputOf returns the output of run id's tool calls, in order.
func (h *harness) outputOf(key, id string) []string {
	h.t.Helper()
	var page api.EventPage
	h.must(http.StatusOK, "GET", "/v1/runs/"+id+"/events?limit=1000", key, nil).json(h.t, &page)
	var out []string
	for _, ev := range page.Events {
		if ev.Type == event.TypeToolFinished {
			var f event.ToolFinished
			if err := json.Unmarshal(ev.Payload, &f); err != nil {
				h.t.Fatal(err)
			}
			out = append(out, f.Output)
		}
	}
	return out
}

// TestApprovals: a stored policy with an ask rule holds a run created
// through the API; the approval is listed, approved (or denied) through
// the API with the key recorded as who decided, and the run completes.
func TestApprovals(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{drive: true})
	admin := h.key("alpha", "admin")
	writer := h.key("alpha", "runs:read", "runs:write")
	approver := h.key("alpha", "approvals")
	var pv api.PolicyVersion
	h.must(http.StatusCreated, "POST", "/v1/policies/ask", admin, []byte(askPolicy)).json(t, &pv)
	if pv.Name != "ask" || pv.Version != 1 || pv.New == nil || !*pv.New {
		t.Fatalf("stored %+v", pv)
	}

	for _, tc := range []struct {
		name    string
		path    string
		body    any
		decided string
		output  string
	}{
		{"approve", "approve", map[string]string{"comment": "go ahead"}, "approved", "pushed"},
		{"deny", "deny", map[string]string{"reason": "not on a Friday"}, "denied", "not on a Friday"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := h.createRun(writer, map[string]any{"task": "push", "script": pushScript, "policy": "ask"})
			a := h.waitApproval(approver)
			if a.RunID != run.ID || !strings.Contains(a.Reason, "pushing needs a person") || !strings.HasPrefix(a.ID, run.ID+".") {
				t.Fatalf("approval %+v", a)
			}
			h.waitStatus(writer, run.ID, event.StatusAwaitingApproval)
			if r := h.do("POST", "/v1/approvals/"+a.ID+"/"+tc.path, writer, tc.body); r.status != http.StatusForbidden {
				t.Errorf("decision by a key without the approvals scope = %d", r.status)
			}
			if tc.path == "deny" {
				if r := h.do("POST", "/v1/approvals/"+a.ID+"/deny", approver, map[string]string{}); r.status != http.StatusBadRequest {
					t.Errorf("deny without a reason = %d %s", r.status, r.body)
				}
			}
			var d map[string]string
			h.must(http.StatusOK, "POST", "/v1/approvals/"+a.ID+"/"+tc.path, approver, tc.body).json(t, &d)
			if d["decision"] != tc.decided || !strings.HasPrefix(d["by"], "key_") {
				t.Errorf("decision %v", d)
			}
			r := h.do("POST", "/v1/approvals/"+a.ID+"/approve", approver, nil)
			if r.status != http.StatusConflict || r.errBody(t).Code != api.CodeConflict {
				t.Errorf("deciding twice = %d %s", r.status, r.body)
			}
			h.waitStatus(writer, run.ID, event.StatusCompleted)
			if out := h.outputOf(writer, run.ID); len(out) == 0 || !strings.Contains(out[0], tc.output) {
				t.Errorf("push output %q, want %q", out, tc.output)
			}
			var page api.EventPage
			h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/events?limit=1000", writer, nil).json(t, &page)
			by := ""
			for _, ev := range page.Events {
				if ev.Type == event.TypeApprovalDecided {
					var p event.ApprovalDecided
					_ = json.Unmarshal(ev.Payload, &p)
					by = p.By
				}
			}
			if by != d["by"] {
				t.Errorf("approval.decided by %q, want the key %q", by, d["by"])
			}
		})
	}

	// approvals.approvers names the keys that may decide.
	named := strings.Replace(askPolicy, "tools:", "approvals:\n  approvers: [key_0000000000000000]\ntools:", 1)
	run := h.createRun(writer, map[string]any{"task": "push", "script": pushScript, "policy_document": named})
	a := h.waitApproval(approver)
	if r := h.do("POST", "/v1/approvals/"+a.ID+"/approve", approver, nil); r.status != http.StatusForbidden {
		t.Errorf("decision by a key the policy does not name = %d %s", r.status, r.body)
	}
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", writer, nil)
	h.waitStatus(writer, run.ID, event.StatusCancelled)
}

// TestTenantIsolation: for every endpoint, tenant alpha's key (with every
// scope) gets not_found on tenant beta's objects, exactly as on ids that
// exist nowhere, and alpha's listings show nothing of beta's.
func TestTenantIsolation(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{drive: true})
	alpha, beta := h.key("alpha", "admin"), h.key("beta", "admin")

	// beta's objects: an upload, a policy, a completed run with a patch,
	// a run waiting for an approval, credits.
	var up api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", beta, tarball(t, true, map[string]string{"f.txt": "beta's\n"})).json(t, &up)
	h.must(http.StatusCreated, "POST", "/v1/policies/ask", beta, []byte(askPolicy))
	done := h.createRun(beta, map[string]any{
		"task": "beta", "script": fixScript, "workspace": map[string]any{"upload": up.ID},
		"metadata": map[string]string{"secret-label": "beta"},
	})
	h.waitStatus(beta, done.ID, event.StatusCompleted)
	held := h.createRun(beta, map[string]any{"task": "push", "script": pushScript, "policy": "ask"})
	approval := h.waitApproval(beta)
	if _, err := h.store.AddLedgerEntry(context.Background(), store.LedgerEntry{Tenant: "beta", Kind: store.LedgerGrant, Amount: 7_000_000, Note: "beta's grant"}); err != nil {
		t.Fatal(err)
	}
	h.must(http.StatusCreated, "PUT", "/v1/secrets/beta-token", beta, map[string]any{"value": "beta's value", "hosts": []string{"api.example.com"}})

	guess := event.NewRunID(time.Now())
	for _, id := range []struct{ name, run, approval string }{
		{"beta's", done.ID, approval.ID},
		{"guessed", guess, guess + ".call_1_0"},
		{"malformed", "run_x", "nothing"},
	} {
		t.Run(id.name, func(t *testing.T) {
			for _, tc := range []struct {
				method, path string
				body         any
			}{
				{"GET", "/v1/runs/" + id.run, nil},
				{"GET", "/v1/runs/" + id.run + "/events", nil},
				{"GET", "/v1/runs/" + id.run + "/events/stream", nil},
				{"GET", "/v1/runs/" + id.run + "/artifacts", nil},
				{"GET", "/v1/runs/" + id.run + "/artifacts/patch.diff", nil},
				{"POST", "/v1/runs/" + id.run + "/cancel", nil},
				{"POST", "/v1/runs/" + id.run + "/pause", nil},
				{"POST", "/v1/runs/" + id.run + "/resume", nil},
				{"POST", "/v1/runs/" + id.run + "/fork", map[string]any{"at_step": 0}},
				{"POST", "/v1/approvals/" + id.approval + "/approve", nil},
				{"POST", "/v1/approvals/" + id.approval + "/deny", map[string]string{"reason": "mine now"}},
			} {
				r := h.do(tc.method, tc.path, alpha, tc.body)
				if r.status != http.StatusNotFound {
					t.Errorf("%s %s with alpha's key = %d %s, want 404", tc.method, tc.path, r.status, r.body)
					continue
				}
				if e := r.errBody(t); e.Code != api.CodeNotFound || strings.Contains(e.Message, "beta") {
					t.Errorf("%s %s: %+v", tc.method, tc.path, e)
				}
			}
		})
	}
	// Not found like a name nothing has, whoever has it.
	for _, tc := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/policies/ask/versions", nil},
		{"GET", "/v1/policies/ask/versions/v1", nil},
		{"GET", "/v1/policies/ask/versions/latest", nil},
		{"DELETE", "/v1/secrets/beta-token", nil},
		{"DELETE", "/v1/secrets/no-such-token", nil},
		{"POST", "/v1/runs", map[string]any{"task": "t", "script": finishScript, "policy": "ask"}},
		{"POST", "/v1/runs", map[string]any{"task": "t", "script": finishScript, "workspace": map[string]any{"upload": up.ID}}},
		{"POST", "/v1/runs", map[string]any{"task": "t", "script": finishScript, "workspace": map[string]any{"upload": "upl_" + strings.Repeat("0", 64)}}},
		{"POST", "/v1/runs/" + done.ID + "/fork", map[string]any{"at_step": 0, "policy": "ask"}},
	} {
		if r := h.do(tc.method, tc.path, alpha, tc.body); r.status != http.StatusNotFound {
			t.Errorf("%s %s with alpha's key = %d %s, want 404", tc.method, tc.path, r.status, r.body)
		}
	}
	// Listings show alpha only its own.
	var runs api.RunList
	h.must(http.StatusOK, "GET", "/v1/runs", alpha, nil).json(t, &runs)
	var as struct{ Approvals []api.Approval }
	h.must(http.StatusOK, "GET", "/v1/approvals", alpha, nil).json(t, &as)
	var ps struct{ Policies []api.PolicyVersion }
	h.must(http.StatusOK, "GET", "/v1/policies", alpha, nil).json(t, &ps)
	var cr api.Credits
	h.must(http.StatusOK, "GET", "/v1/credits", alpha, nil).json(t, &cr)
	var ss api.SecretList
	h.must(http.StatusOK, "GET", "/v1/secrets", alpha, nil).json(t, &ss)
	if len(runs.Runs) != 0 || len(as.Approvals) != 0 || len(ps.Policies) != 0 || cr.Balance != 0 || len(cr.Entries) != 0 || cr.Tenant != "alpha" ||
		len(ss.Secrets) != 0 || ss.Tenant != "alpha" {
		t.Errorf("alpha sees runs %v, approvals %v, policies %v, credits %+v, secrets %+v", runs.Runs, as.Approvals, ps.Policies, cr, ss)
	}
	// A secret of alpha's own by the same name is alpha's, not beta's.
	h.must(http.StatusCreated, "PUT", "/v1/secrets/beta-token", alpha, map[string]any{"value": "alpha's value"})
	h.must(http.StatusNoContent, "DELETE", "/v1/secrets/beta-token", alpha, nil)
	// A grant to another tenant is refused exactly like one to a tenant
	// that does not exist; beta's balance is untouched.
	toBeta := h.do("POST", "/v1/credits/grants", alpha, map[string]any{"tenant": "beta", "amount": 1})
	toNobody := h.do("POST", "/v1/credits/grants", alpha, map[string]any{"tenant": "nobody", "amount": 1})
	if toBeta.status != http.StatusForbidden || toBeta.errBody(t).Message != toNobody.errBody(t).Message {
		t.Errorf("a grant to beta = %d %s; to nobody = %d %s", toBeta.status, toBeta.body, toNobody.status, toNobody.body)
	}
	// beta's own key sees them, and its run is untouched.
	h.must(http.StatusOK, "GET", "/v1/credits", beta, nil).json(t, &cr)
	if cr.Balance != 7_000_000 || cr.Credits != "7" || len(cr.Entries) != 1 {
		t.Errorf("beta's credits %+v", cr)
	}
	h.must(http.StatusOK, "GET", "/v1/secrets", beta, nil).json(t, &ss)
	if len(ss.Secrets) != 1 || ss.Secrets[0].Name != "beta-token" {
		t.Errorf("beta's secrets %+v", ss)
	}
	h.must(http.StatusOK, "GET", "/v1/runs", beta, nil).json(t, &runs)
	if len(runs.Runs) != 2 {
		t.Errorf("beta lists %d runs, want 2", len(runs.Runs))
	}
	var still api.Run
	h.must(http.StatusOK, "GET", "/v1/runs/"+held.ID, beta, nil).json(t, &still)
	if still.Status != event.StatusAwaitingApproval {
		t.Errorf("beta's held run is %s", still.Status)
	}
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+held.ID+"/cancel", beta, nil)
}

// TestScopes: each endpoint needs its scope; admin holds all.
func TestScopes(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	keys := map[string]string{
		"runs:read":  h.key("alpha", "runs:read"),
		"runs:write": h.key("alpha", "runs:write"),
		"approvals":  h.key("alpha", "approvals"),
		"admin":      h.key("alpha", "admin"),
		"sandboxes":  h.key("alpha", "sandboxes"),
		"secrets":    h.key("alpha", "secrets:write"),
	}
	id := event.NewRunID(time.Now())
	for _, tc := range []struct {
		method, path string
		allowed      []string // besides admin
	}{
		{"GET", "/v1/runs", []string{"runs:read"}},
		{"GET", "/v1/runs/" + id, []string{"runs:read"}},
		{"GET", "/v1/runs/" + id + "/events", []string{"runs:read"}},
		{"GET", "/v1/runs/" + id + "/events/stream", []string{"runs:read"}},
		{"GET", "/v1/runs/" + id + "/artifacts", []string{"runs:read"}},
		{"GET", "/v1/runs/" + id + "/artifacts/patch.diff", []string{"runs:read"}},
		{"POST", "/v1/runs", []string{"runs:write"}},
		{"POST", "/v1/uploads", []string{"runs:write"}},
		{"POST", "/v1/runs/" + id + "/cancel", []string{"runs:write"}},
		{"POST", "/v1/runs/" + id + "/pause", []string{"runs:write"}},
		{"POST", "/v1/runs/" + id + "/resume", []string{"runs:write"}},
		{"POST", "/v1/runs/" + id + "/fork", []string{"runs:write"}},
		{"DELETE", "/v1/runs/" + id, []string{"runs:write"}},
		{"GET", "/v1/deletions", []string{"runs:read"}},
		// Another tenant's name: nothing is deleted, whoever asks.
		{"DELETE", "/v1/tenants/beta", nil},
		{"GET", "/v1/approvals", []string{"approvals", "runs:read"}},
		{"POST", "/v1/approvals/" + id + ".call_1_0/approve", []string{"approvals"}},
		{"POST", "/v1/approvals/" + id + ".call_1_0/deny", []string{"approvals"}},
		{"GET", "/v1/policies", []string{"runs:read"}},
		{"GET", "/v1/policies/p/versions", []string{"runs:read"}},
		{"POST", "/v1/policies/p", nil},
		{"GET", "/v1/credits", []string{"runs:read"}},
		{"POST", "/v1/credits/grants", nil},
		{"GET", "/v1/policies/p/versions/v1", []string{"runs:read"}},
		{"POST", "/v1/policies/validate", []string{"runs:write"}},
		{"GET", "/v1/secrets", []string{"secrets"}},
		{"PUT", "/v1/secrets/s", []string{"secrets"}},
		{"DELETE", "/v1/secrets/s", []string{"secrets"}},
		{"GET", "/metrics", nil},
		{"GET", "/openapi.json", []string{"runs:read", "runs:write", "approvals", "sandboxes", "secrets"}},
	} {
		for scope, key := range keys {
			want := scope == "admin" || slices.Contains(tc.allowed, scope)
			r := h.do(tc.method, tc.path, key, nil)
			if got := r.status != http.StatusForbidden; got != want {
				t.Errorf("%s %s with %s = %d, want allowed=%v", tc.method, tc.path, scope, r.status, want)
			}
			if r.status == http.StatusForbidden && r.errBody(t).Code != api.CodeForbidden {
				t.Errorf("%s %s: %s", tc.method, tc.path, r.body)
			}
		}
	}
}

// TestErrors: every error has the one shape with a code of the closed set
// and the request id; none leaks internals.
func TestErrors(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{config: server.Config{MaxBody: 4 << 10}})
	key := h.key("alpha", "admin")
	revoked, meta, err := h.keys.Create(context.Background(), "alpha", "old", []string{"admin"}, "airlock")
	if err != nil {
		t.Fatal(err)
	}
	if err := h.store.RevokeAPIKey(context.Background(), "alpha", meta.ID); err != nil {
		t.Fatal(err)
	}
	big := map[string]any{"task": strings.Repeat("x", 8<<10), "script": finishScript}
	for _, tc := range []struct {
		name    string
		method  string
		path    string
		key     string
		body    any
		headers []string
		code    string
	}{
		{"no key", "GET", "/v1/runs", "", nil, nil, api.CodeUnauthenticated},
		{"unknown key", "GET", "/v1/runs", "airlock_" + strings.Repeat("0", 48), nil, nil, api.CodeUnauthenticated},
		{"malformed key", "GET", "/v1/runs", "hunter2", nil, nil, api.CodeUnauthenticated},
		{"revoked key", "GET", "/v1/runs", revoked, nil, nil, api.CodeUnauthenticated},
		{"basic auth", "GET", "/v1/runs", "", nil, []string{"Authorization", "Basic eDp5"}, api.CodeUnauthenticated},
		{"x-api-key", "GET", "/v1/nothing", "", nil, []string{"X-API-Key", key}, api.CodeNotFound},
		{"unknown route", "GET", "/v1/nothing", key, nil, nil, api.CodeNotFound},
		{"wrong method", "DELETE", "/v1/runs", key, nil, nil, api.CodeMethodNotAllowed},
		{"wrong method for a secret", "GET", "/v1/secrets/x", key, nil, nil, api.CodeMethodNotAllowed},
		{"put a run", "PUT", "/v1/runs/" + event.NewRunID(time.Now()), key, nil, nil, api.CodeMethodNotAllowed},
		{"no body", "POST", "/v1/runs", key, nil, nil, api.CodeBadRequest},
		{"malformed JSON", "POST", "/v1/runs", key, []byte(`{"task":`), nil, api.CodeBadRequest},
		{"unknown field", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "base_url": "http://evil"}, nil, api.CodeBadRequest},
		{"trailing data", "POST", "/v1/runs", key, []byte(`{"task":"t","script":"x"} {}`), nil, api.CodeBadRequest},
		{"body too large", "POST", "/v1/runs", key, big, nil, api.CodeTooLarge},
		{"empty task", "POST", "/v1/runs", key, map[string]any{"task": " ", "script": finishScript}, nil, api.CodeBadRequest},
		{"bad script", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": "turns: [[["}, nil, api.CodeBadRequest},
		{"compatible model", "POST", "/v1/runs", key, map[string]any{"task": "t", "model": "openai-compatible:x"}, nil, api.CodeBadRequest},
		{"git workspace with a credential", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "workspace": map[string]any{"git": "https://u:p@example.com/r.git"}}, nil, api.CodeBadRequest},
		{"bad policy", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "policy_document": "budgets: {max_steps: -1}\n"}, nil, api.CodeBadRequest},
		{"host mount", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "policy_document": "sandbox:\n  mounts: [{source: /etc, target: /mnt/etc}]\n"}, nil, api.CodeForbidden},
		{"template and policy", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "template": "web", "policy": "web"}, nil, api.CodeBadRequest},
		{"template and policy document", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "template": "web", "policy_document": "{}\n"}, nil, api.CodeBadRequest},
		{"bad template ref", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "template": "web@2"}, nil, api.CodeBadRequest},
		{"no such template", "POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "template": "web@v2"}, nil, api.CodeNotFound},
		{"bad status", "GET", "/v1/runs?status=done", key, nil, nil, api.CodeBadRequest},
		{"bad cursor", "GET", "/v1/runs?cursor=abc", key, nil, nil, api.CodeBadRequest},
		{"bad limit", "GET", "/v1/runs?limit=100000", key, nil, nil, api.CodeBadRequest},
		{"bad after", "GET", "/v1/credits?after=-1", key, nil, nil, api.CodeBadRequest},
		{"bad policy name", "POST", "/v1/policies/Bad%20Name", key, []byte("{}\n"), nil, api.CodeBadRequest},
		{"bad Last-Event-ID", "GET", "/v1/runs/" + event.NewRunID(time.Now()) + "/events/stream", key, nil, []string{"Last-Event-ID", "x"}, api.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do(tc.method, tc.path, tc.key, tc.body, tc.headers...)
			e := r.errBody(t)
			if e.Code != tc.code {
				t.Fatalf("%s %s = %d %+v, want %s", tc.method, tc.path, r.status, e, tc.code)
			}
			for _, leak := range []string{"sqlite", "/tmp", "engine:", "store:", "goroutine", "hunter2"} {
				if strings.Contains(e.Message, leak) {
					t.Errorf("message %q holds %q", e.Message, leak)
				}
			}
			if e.Code == api.CodeUnauthenticated && r.header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// A request header over the limit is refused before it is read.
	r := h.do("GET", "/v1/runs", key, nil, "X-Padding", strings.Repeat("p", 200<<10))
	if r.status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("huge header = %d", r.status)
	}
}

// TestWorkspaceGlobs: an artifact or verify glob outside the workspace is
// refused with 400 naming it, whether the request's fields or its policy
// document give it, as a verify.changed path outside it is.
func TestWorkspaceGlobs(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "runs:write", "runs:read")
	for _, tc := range []struct {
		name string
		req  map[string]any
		msg  string
	}{
		{"artifact with ..", map[string]any{"artifacts": []string{"ok.txt", "../../etc/passwd"}}, `artifacts[1]: glob "../../etc/passwd" is outside /workspace`},
		{"absolute artifact", map[string]any{"artifacts": []string{"/etc/*"}}, `artifacts[0]: glob "/etc/*" is outside /workspace`},
		{"only_changed", map[string]any{"verify": map[string]any{"only_changed": []string{"/etc/*"}}}, `verify.only_changed[0]: glob "/etc/*" is outside /workspace`},
		{"changed", map[string]any{"verify": map[string]any{"changed": []string{"../x"}}}, `verify.changed[0]: "../x" is not a path inside /workspace`},
		{"policy artifact", map[string]any{"policy_document": "artifacts: [/etc/*]\n"}, `artifacts[0]: "/etc/*" is outside /workspace`},
		{"policy only_changed", map[string]any{"policy_document": "verify:\n  only_changed: [../*]\n"}, `verify.only_changed[0]: "../*" is outside /workspace`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.req["task"], tc.req["script"] = "t", finishScript
			r := h.do("POST", "/v1/runs", key, tc.req)
			if e := r.errBody(t); r.status != http.StatusBadRequest || !strings.Contains(e.Message, tc.msg) {
				t.Fatalf("POST /v1/runs %v = %d %+v, want 400 saying %q", tc.req, r.status, e, tc.msg)
			}
		})
	}
	// Globs inside the workspace are taken.
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript, "artifacts": []string{"/workspace/out/*.txt", "docs/**"}})
	if run.Status != event.StatusQueued {
		t.Errorf("run %+v", run)
	}
}

// TestRateLimit: a key gets Burst requests at once and Rate per second
// after, with Retry-After; failed authentications are limited per
// address before keys are looked up.
func TestRateLimit(t *testing.T) {
	t.Parallel()
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	h := newHarness(t, harnessOptions{clock: clk, config: server.Config{Rate: 1, Burst: 2}})
	key, other := h.key("alpha", "runs:read"), h.key("alpha", "runs:read")
	h.must(http.StatusOK, "GET", "/v1/runs", key, nil)
	h.must(http.StatusOK, "GET", "/v1/runs", key, nil)
	r := h.do("GET", "/v1/runs", key, nil)
	if r.status != http.StatusTooManyRequests || r.errBody(t).Code != api.CodeRateLimited || r.header.Get("Retry-After") != "1" {
		t.Fatalf("third request = %d %s, Retry-After %q", r.status, r.body, r.header.Get("Retry-After"))
	}
	h.must(http.StatusOK, "GET", "/v1/runs", other, nil) // another key has its own bucket
	clk.Advance(time.Second)
	h.must(http.StatusOK, "GET", "/v1/runs", key, nil)
	h.must(http.StatusOK, "GET", "/healthz", "", nil) // health is not limited

	bad := "airlock_" + strings.Repeat("1", 48)
	for i := 0; i < 2; i++ {
		if r := h.do("GET", "/v1/runs", bad, nil); r.status != http.StatusUnauthorized {
			t.Fatalf("bad key %d = %d", i, r.status)
		}
	}
	r = h.do("GET", "/v1/runs", bad, nil)
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Fatalf("third failed authentication = %d %s", r.status, r.body)
	}
}

// TestUploads: a gzipped tar is stored as is, a plain tar is gzipped,
// anything else and anything too large is refused.
func TestUploads(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{config: server.Config{MaxUpload: 64 << 10}})
	key := h.key("alpha", "runs:write", "runs:read")
	var up api.Upload
	gz := tarball(t, true, map[string]string{"a.txt": "a"})
	h.must(http.StatusCreated, "POST", "/v1/uploads", key, gz).json(t, &up)
	if !up.Gzipped || up.Size != int64(len(gz)) || up.Received != int64(len(gz)) {
		t.Errorf("gzipped upload %+v", up)
	}
	var again api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", key, gz).json(t, &again)
	if again.ID == up.ID {
		t.Error("two uploads of the same bytes share an id: ids must not be derivable from the content")
	}
	plain := tarball(t, false, map[string]string{"b.txt": strings.Repeat("b", 10<<10)})
	h.must(http.StatusCreated, "POST", "/v1/uploads", key, plain).json(t, &up)
	if up.Gzipped || up.Received != int64(len(plain)) || up.Size >= up.Received {
		t.Errorf("plain upload %+v", up)
	}
	for name, body := range map[string][]byte{
		"garbage":   []byte("not a tarball at all"),
		"empty":     nil,
		"too large": tarball(t, false, map[string]string{"c": strings.Repeat("c", 100<<10)}),
	} {
		r := h.do("POST", "/v1/uploads", key, body)
		want := api.CodeBadRequest
		if name == "too large" {
			want = api.CodeTooLarge
		}
		if e := r.errBody(t); e.Code != want {
			t.Errorf("%s upload = %+v, want %s", name, e, want)
		}
	}
	// The id names the upload for runs of this tenant.
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript, "workspace": map[string]any{"upload": up.ID}})
	if run.Status != event.StatusQueued {
		t.Errorf("run %+v", run)
	}
}

// TestUploadKept: an upload is its tenant's (another tenant's run cannot
// start from it: not_found, as an id never given); a tenant's uploads fit
// its budget (past it: too_large, refused before the body is read once
// it is full; another tenant's budget is its own); an upload the store
// no longer keeps (retention) starts no run.
func TestUploadKept(t *testing.T) {
	t.Parallel()
	gz := tarball(t, true, map[string]string{"a.txt": "a"})
	budget := int64(2*len(gz) + 10)
	h := newHarness(t, harnessOptions{uploadBudget: func(tenant string) int64 {
		if tenant == "alpha" {
			return budget
		}
		return 0
	}})
	alpha := h.key("alpha", "runs:write", "runs:read")
	beta := h.key("beta", "runs:write", "runs:read")
	var a1, a2, b1 api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", alpha, gz).json(t, &a1)
	h.must(http.StatusCreated, "POST", "/v1/uploads", alpha, gz).json(t, &a2)
	if e := h.do("POST", "/v1/uploads", alpha, gz).errBody(t); e.Code != api.CodeTooLarge || !strings.Contains(e.Message, fmt.Sprintf("budget of %d bytes", budget)) {
		t.Errorf("third upload past the budget = %+v, want too_large naming the budget", e)
	}
	for range 3 {
		h.must(http.StatusCreated, "POST", "/v1/uploads", beta, gz).json(t, &b1)
	}
	if n, b, err := h.store.UploadUsage(context.Background(), "alpha"); err != nil || n != 2 || b != 2*int64(len(gz)) {
		t.Errorf("alpha's uploads = %d, %d bytes, %v; want 2, %d", n, b, err, 2*len(gz))
	}
	ws := func(id string) map[string]any {
		return map[string]any{"task": "t", "script": finishScript, "workspace": map[string]any{"upload": id}}
	}
	for _, c := range []struct {
		key, id, who string
	}{{beta, a1.ID, "beta with alpha's upload"}, {alpha, b1.ID, "alpha with beta's upload"}} {
		r := h.do("POST", "/v1/runs", c.key, ws(c.id))
		if e := r.errBody(t); r.status != http.StatusNotFound || e.Message != "no such upload" {
			t.Errorf("run of %s = %d %+v, want 404 no such upload", c.who, r.status, e)
		}
	}
	h.createRun(alpha, ws(a1.ID))
	// Expired: gone from the store, the id starts nothing.
	n, _, err := h.store.ExpireUploads(context.Background(), "alpha", time.Now().Add(time.Hour))
	if err != nil || n != 2 {
		t.Fatalf("ExpireUploads() = %d, %v", n, err)
	}
	if r := h.do("POST", "/v1/runs", alpha, ws(a2.ID)); r.status != http.StatusNotFound {
		t.Errorf("run from an expired upload = %d %s, want 404", r.status, r.body)
	}
	// With room again, alpha uploads.
	h.must(http.StatusCreated, "POST", "/v1/uploads", alpha, gz)
}

// TestUploadChecked: a tar whose entries cannot be unpacked into a
// workspace is refused at upload with 400 naming the entry, gzipped or
// not, and so is one that is cut short; nothing of it can start a run.
func TestUploadChecked(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{config: server.Config{MaxUpload: 64 << 10}})
	key := h.key("alpha", "runs:write", "runs:read")
	build := func(gz bool, hs ...tar.Header) []byte {
		var buf bytes.Buffer
		var w io.Writer = &buf
		var zw *gzip.Writer
		if gz {
			zw = gzip.NewWriter(&buf)
			w = zw
		}
		tw := tar.NewWriter(w)
		for _, th := range hs {
			th.Mode = 0o644
			if th.Typeflag == tar.TypeReg {
				th.Size = 3
			}
			if err := tw.WriteHeader(&th); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte("hi\n")[:th.Size])
		}
		tw.Close()
		if zw != nil {
			zw.Close()
		}
		return buf.Bytes()
	}
	ok := tar.Header{Name: "ok.txt", Typeflag: tar.TypeReg}
	for _, tc := range []struct {
		name  string
		entry tar.Header
		msg   string
	}{
		{"parent dir", tar.Header{Name: "../x.txt", Typeflag: tar.TypeReg}, `entry "../x.txt": a .. element`},
		{"absolute", tar.Header{Name: "/etc/cron.d/x", Typeflag: tar.TypeReg}, `entry "/etc/cron.d/x": an absolute name`},
		{"symlink out", tar.Header{Name: "pw", Typeflag: tar.TypeSymlink, Linkname: "/etc/passwd"}, `entry "pw": a symbolic link to "/etc/passwd": an absolute target`},
		{"symlink up", tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../../x"}, `entry "up": a symbolic link to "../../x": it points outside the workspace`},
		{"hard link out", tar.Header{Name: "h", Typeflag: tar.TypeLink, Linkname: "../../etc/shadow"}, `entry "h": a hard link to "../../etc/shadow": a .. element`},
		{"device", tar.Header{Name: "null", Typeflag: tar.TypeChar}, `entry "null": a character device`},
	} {
		for _, gz := range []bool{true, false} {
			t.Run(fmt.Sprintf("%s gzipped=%v", tc.name, gz), func(t *testing.T) {
				r := h.do("POST", "/v1/uploads", key, build(gz, ok, tc.entry))
				if e := r.errBody(t); r.status != http.StatusBadRequest || !strings.HasPrefix(e.Message, "the upload cannot be a workspace: "+tc.msg) {
					t.Fatalf("upload = %d %+v, want 400 saying %q", r.status, e, tc.msg)
				}
			})
		}
	}
	whole := build(false, ok, tar.Header{Name: "src/a.txt", Typeflag: tar.TypeReg})
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write(whole[:len(whole)-1024]) // no end-of-archive block
	zw.Close()
	gzWhole := build(true, ok)
	for name, body := range map[string][]byte{
		"cut short":         whole[:1024+512],
		"cut short gzipped": zipped.Bytes(),
		"bad gzip":          append(gzWhole[:20:20], bytes.Repeat([]byte{0xff}, 200)...),
	} {
		r := h.do("POST", "/v1/uploads", key, body)
		if e := r.errBody(t); r.status != http.StatusBadRequest || !strings.HasPrefix(e.Message, "the upload is not a whole tar: ") {
			t.Errorf("%s upload = %d %+v, want 400: not a whole tar", name, r.status, e)
		}
	}
	// A tar with links that stay inside is taken, and starts a run.
	var up api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", key, build(true, ok, tar.Header{Name: "link", Typeflag: tar.TypeSymlink, Linkname: "ok.txt"},
		tar.Header{Name: "d/hard", Typeflag: tar.TypeLink, Linkname: "ok.txt"})).json(t, &up)
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript, "workspace": map[string]any{"upload": up.ID}})
	if run.Status != event.StatusQueued {
		t.Errorf("run %+v", run)
	}
}

// TestPolicies: uploads are validated, versioned and idempotent; policies
// that reach the host's resources are refused.
func TestPolicies(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "admin")
	var v api.PolicyVersion
	h.must(http.StatusCreated, "POST", "/v1/policies/strict", key, []byte("budgets:\n  max_steps: 5\n")).json(t, &v)
	h.must(http.StatusOK, "POST", "/v1/policies/strict", key, []byte("budgets:\n  max_steps: 5\n")).json(t, &v)
	if v.Version != 1 || *v.New {
		t.Errorf("unchanged upload %+v", v)
	}
	h.must(http.StatusCreated, "POST", "/v1/policies/strict", key, []byte("budgets:\n  max_steps: 3\n"))
	var vs struct{ Versions []api.PolicyVersion }
	h.must(http.StatusOK, "GET", "/v1/policies/strict/versions", key, nil).json(t, &vs)
	if len(vs.Versions) != 2 || vs.Versions[0].Version != 2 || !strings.HasPrefix(vs.Versions[0].By, "key_") || vs.Versions[0].Source != "api" {
		t.Errorf("versions %+v", vs.Versions)
	}
	for name, doc := range map[string]string{
		"workspace source": "sandbox:\n  workspace: {source: /home}\n",
		"rootfs":           "sandbox:\n  rootfs: /srv/root\n",
		"cidr":             "network:\n  allow: [{cidr: 169.254.169.254/32}]\n",
		"pin":              "network:\n  allow: [{host: api.example.com}]\n  resolve: [{host: 'api.example.com:443', to: '127.0.0.1:8080'}]\n",
	} {
		r := h.do("POST", "/v1/policies/host", key, []byte(doc))
		if e := r.errBody(t); e.Code != api.CodeForbidden {
			t.Errorf("%s policy = %+v, want forbidden", name, e)
		}
	}
	// Credentials are the tenant's own: its runs' proxies look the secret
	// up under the tenant, so naming one reaches nothing of the host's.
	h.must(http.StatusCreated, "POST", "/v1/policies/creds", key,
		[]byte("network:\n  allow: [{host: api.example.com}]\n  credentials: [{host: api.example.com, secret: anthropic-api-key, header: X-Key}]\n"))
	if r := h.do("POST", "/v1/policies/bad", key, []byte("budgets: {max_stepz: 1}\n")); r.errBody(t).Code != api.CodeBadRequest {
		t.Errorf("invalid policy = %s", r.body)
	}
	// A run names a version; its budget is the policy's, lowered, never raised, by max_steps.
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript, "policy": "strict@v1", "max_steps": 50})
	evs, err := h.eng.Events(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var created event.RunCreated
	var cfg engine.Config
	if err := json.Unmarshal(evs[0].Payload, &created); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(created.Config, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxSteps != 5 || run.PolicyHash != vs.Versions[1].Hash {
		t.Errorf("max_steps %d under strict@v1 (hash %s, want %s)", cfg.MaxSteps, run.PolicyHash, vs.Versions[1].Hash)
	}
	var got api.Run
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, key, nil).json(t, &got)
	if p := got.Policy; p == nil || p.Version != "strict@v1" || p.Source != "policy strict v1" || p.BaseHash != "" || got.PolicyHash != vs.Versions[1].Hash {
		t.Errorf("GET run: policy %+v, hash %s; want strict@v1, no flags, hash %s", p, got.PolicyHash, vs.Versions[1].Hash)
	}

	// The request's own fields change the policy as flags do: the run
	// records the hash of the policy with them, and the version's as the
	// one they changed. It is the hash of the same document written out.
	flagged := h.createRun(key, map[string]any{
		"task": "t", "script": finishScript, "policy": "strict@v1", "max_steps": 2,
		"verify": map[string]any{"commands": []string{"true"}}, "artifacts": []string{"out/*"},
	})
	var chk api.PolicyCheck
	h.must(http.StatusOK, "POST", "/v1/policies/validate", key,
		[]byte("budgets: {max_steps: 2}\nverify: {commands: ['true']}\nartifacts: [out/*]\n")).json(t, &chk)
	h.must(http.StatusOK, "GET", "/v1/runs/"+flagged.ID, key, nil).json(t, &got)
	if p := got.Policy; p == nil || p.Version != "strict@v1" || p.BaseHash != vs.Versions[1].Hash || got.PolicyHash != chk.Hash || got.PolicyHash == p.BaseHash {
		t.Errorf("GET run with fields: policy %+v, hash %s; want strict@v1 %s + flags -> %s", p, got.PolicyHash, vs.Versions[1].Hash, chk.Hash)
	}
	// A run on the built-in default records the default's policy hash,
	// not the hash of empty input.
	def := h.createRun(key, map[string]any{"task": "t", "script": finishScript})
	h.must(http.StatusOK, "POST", "/v1/policies/validate", key, []byte("{}\n")).json(t, &chk)
	if def.PolicyHash != chk.Hash || strings.HasPrefix(def.PolicyHash, "sha256:e3b0c442") {
		t.Errorf("default run's policy hash %s, want the default's %s", def.PolicyHash, chk.Hash)
	}
}

// TestStreams: a stream sends keepalives while nothing happens, picks up
// events another process appends (by polling the store), ends when the
// run does; a key holds at most MaxStreams; closing the server ends them.
func TestStreams(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{config: server.Config{Keepalive: 100 * time.Millisecond, StreamPoll: 50 * time.Millisecond, MaxStreams: 1}})
	key := h.key("alpha", "runs:read", "runs:write")
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript})
	path := "/v1/runs/" + run.ID + "/events/stream"

	_, comments, status := h.stream(key, path, func(e sse) bool { return e.event == "comment" })
	if status != http.StatusOK || len(comments) != 1 || comments[0] != ": keepalive" {
		t.Fatalf("stream of an idle run: %d %q", status, comments)
	}

	// Another engine on the store, as another process: no feed wakes
	// the stream, the poll finds its event.
	other, err := engine.New(engine.Options{Store: h.store, Blobs: h.blobs, Backend: servertest.NoSandboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	got, started := h.backgroundStream(key, path)
	<-started
	// While the stream is open the key has no second one.
	if st := h.streamStatus(key, path); st != http.StatusTooManyRequests {
		t.Errorf("a second stream of the key = %d, want 429", st)
	}
	if err := other.Cancel(context.Background(), run.ID, "elsewhere", "test"); err != nil {
		t.Fatal(err)
	}
	evs := <-got
	seqs(t, evs, 1, true)
	if last := evs[len(evs)-2]; last.event != string(event.TypeRunCancelled) {
		t.Errorf("last event %s", last.event)
	}
	// The events the feed carried to the stream have their delivery
	// timed (those it caught up on from the store do not).
	m := h.must(http.StatusOK, "GET", "/metrics", h.key("alpha", "admin"), nil)
	if !regexp.MustCompile(`(?m)^airlock_api_event_delivery_seconds_count [1-9]`).Match(m.body) {
		t.Errorf("no event delivery timed:\n%s", m.body)
	}

	// Closing the server ends open streams, without an end event (the
	// run goes on; the client reconnects).
	run2 := h.createRun(key, map[string]any{"task": "t", "script": finishScript})
	got, started = h.backgroundStream(key, "/v1/runs/"+run2.ID+"/events/stream")
	<-started
	h.srv.CloseStreams()
	if evs := <-got; len(evs) == 0 || evs[len(evs)-1].event == "end" {
		t.Errorf("closed stream sent %v", evs)
	}
	if r := h.do("GET", "/readyz", "", nil); r.status != http.StatusServiceUnavailable || r.errBody(t).Code != api.CodeUnavailable {
		t.Errorf("readyz while draining = %d %s", r.status, r.body)
	}
}

// endsBetween is a store whose first read of run's events, from the stream
// under test, comes after the run ended: the run it read just before was
// not final yet.
type endsBetween struct {
	store.Store
	run  string
	end  func()
	once sync.Once
}

func (s *endsBetween) Events(ctx context.Context, id string, from int64, n int) ([]event.Event, error) {
	if id == s.run {
		s.once.Do(s.end)
	}
	return s.Store.Events(ctx, id, from, n)
}

// TestStreamEndsBetweenReads: a stream that reads a run's final event from
// the store, after a read of the run that was not final yet, ends with it
// (nothing would wake it again: the run appends nothing more).
func TestStreamEndsBetweenReads(t *testing.T) {
	t.Parallel()
	es := &endsBetween{}
	h := newHarness(t, harnessOptions{
		config:    server.Config{Keepalive: 100 * time.Millisecond, StreamPoll: 50 * time.Millisecond},
		wrapStore: func(st store.Store) store.Store { es.Store = st; return es },
	})
	key := h.key("alpha", "runs:read", "runs:write")
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript})
	other, err := engine.New(engine.Options{Store: h.store, Blobs: h.blobs, Backend: servertest.NoSandboxes{}})
	if err != nil {
		t.Fatal(err)
	}
	es.run = run.ID
	es.end = func() {
		if err := other.Cancel(context.Background(), run.ID, "meanwhile", "test"); err != nil {
			t.Error(err)
		}
	}
	idle := 0
	evs, _, status := h.stream(key, "/v1/runs/"+run.ID+"/events/stream", func(e sse) bool {
		if e.event == "comment" {
			idle++ // 20 keepalives: two seconds with nothing to send
		}
		return e.event == "end" || idle >= 20
	})
	if status != http.StatusOK || len(evs) == 0 || evs[len(evs)-1].event != "end" {
		t.Fatalf("stream of a run that ended between two reads: %d, %d keepalives, events %v", status, idle, evs)
	}
	if last := evs[len(evs)-2]; last.event != string(event.TypeRunCancelled) {
		t.Errorf("last event before the end %s", last.event)
	}
}

// backgroundStream reads a stream in the background, opening it again
// while the key's earlier streams still count; started is closed at its
// first event, got receives its events when it ends.
func (h *harness) backgroundStream(key, path string) (got chan []sse, started chan struct{}) {
	got, started = make(chan []sse, 1), make(chan struct{})
	var once sync.Once
	go func() {
		for {
			evs, _, st := h.stream(key, path, func(sse) bool {
				once.Do(func() { close(started) })
				return false
			})
			if st == http.StatusTooManyRequests {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			got <- evs
			return
		}
	}()
	return got, started
}

// streamStatus opens a stream and returns its status at once.
func (h *harness) streamStatus(key, path string) int {
	h.t.Helper()
	req, err := http.NewRequest("GET", h.url+path, nil)
	if err != nil {
		h.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestHealthAndMetrics: health needs no key; metrics need admin and count
// requests and errors without naming tenants.
func TestHealthAndMetrics(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	h.must(http.StatusOK, "GET", "/healthz", "", nil)
	h.must(http.StatusOK, "GET", "/readyz", "", nil)
	admin := h.key("alpha", "admin")
	h.must(http.StatusCreated, "POST", "/v1/runs", admin, map[string]any{"task": "t", "script": finishScript})
	h.do("GET", "/v1/runs/run_x", admin, nil)
	m := h.must(http.StatusOK, "GET", "/metrics", admin, nil)
	for _, want := range []string{
		`airlock_http_requests_total{code="201",route="POST /v1/runs"} 1`,
		`airlock_http_request_duration_seconds_count{code="201",route="POST /v1/runs"} 1`,
		`airlock_api_errors_total{code="not_found"} 1`,
		`airlock_api_runs_created_total 1`,
		`# TYPE airlock_api_event_streams gauge`,
	} {
		if !bytes.Contains(m.body, []byte(want)) {
			t.Errorf("metrics lack %q:\n%s", want, m.body)
		}
	}
	if bytes.Contains(m.body, []byte("alpha")) {
		t.Error("metrics name a tenant")
	}
	var doc map[string]any
	h.must(http.StatusOK, "GET", "/openapi.json", admin, nil).json(t, &doc)
	if doc["openapi"] == nil {
		t.Error("openapi.json served without openapi")
	}
}

// TestRunPaging: runs list newest first in pages with next_cursor, and
// filter by status.
func TestRunPaging(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "runs:read", "runs:write")
	var ids []string
	for i := 0; i < 5; i++ {
		ids = append(ids, h.createRun(key, map[string]any{"task": "t", "script": finishScript}).ID)
		time.Sleep(2 * time.Millisecond) // ids order by millisecond
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		var l api.RunList
		h.must(http.StatusOK, "GET", "/v1/runs?limit=2&cursor="+cursor, key, nil).json(t, &l)
		for _, r := range l.Runs {
			got = append(got, r.ID)
		}
		if l.NextCursor == "" || pages > 5 {
			break
		}
		cursor = l.NextCursor
	}
	slices.Reverse(ids)
	if !slices.Equal(got, ids) {
		t.Errorf("paged %v, want %v", got, ids)
	}
	var l api.RunList
	h.must(http.StatusOK, "GET", "/v1/runs?status=running,completed", key, nil).json(t, &l)
	if len(l.Runs) != 0 {
		t.Errorf("no run is running or completed, listed %d", len(l.Runs))
	}
	h.must(http.StatusOK, "GET", "/v1/runs?status=queued&order=asc&limit=1", key, nil).json(t, &l)
	if len(l.Runs) != 1 || l.Runs[0].ID != ids[len(ids)-1] {
		t.Errorf("oldest queued %v", l.Runs)
	}
}

// TestRunListMetadata: ?metadata[KEY]=VALUE lists the runs whose metadata
// has every pair given, of the caller's tenant only; a bad filter is a
// bad request.
func TestRunListMetadata(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	a := h.key("alpha", "runs:read", "runs:write")
	b := h.key("beta", "runs:read", "runs:write")
	infra42 := h.createRun(a, map[string]any{"task": "t", "script": finishScript, "metadata": map[string]string{"team": "infra", "pr": "42"}}).ID
	infra43 := h.createRun(a, map[string]any{"task": "t", "script": finishScript, "metadata": map[string]string{"team": "infra", "pr": "43"}}).ID
	h.createRun(a, map[string]any{"task": "t", "script": finishScript, "metadata": map[string]string{"team": "web"}})
	h.createRun(a, map[string]any{"task": "t", "script": finishScript})
	h.createRun(b, map[string]any{"task": "t", "script": finishScript, "metadata": map[string]string{"team": "infra", "pr": "42"}})
	for _, tc := range []struct {
		key   string
		query url.Values
		want  []string
	}{
		{a, url.Values{"metadata[team]": {"infra"}}, []string{infra42, infra43}},
		{a, url.Values{"metadata[team]": {"infra"}, "metadata[pr]": {"42"}}, []string{infra42}},
		{a, url.Values{"metadata[team]": {"infra"}, "metadata[pr]": {"44"}}, nil},
		{a, url.Values{"metadata[team]": {"infra"}, "status": {"completed"}}, nil},
		{b, url.Values{"metadata[pr]": {"42"}, "metadata[team]": {"web"}}, nil},
	} {
		var l api.RunList
		h.must(http.StatusOK, "GET", "/v1/runs?"+tc.query.Encode(), tc.key, nil).json(t, &l)
		var got []string
		for _, r := range l.Runs {
			got = append(got, r.ID)
		}
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tc.want))
		if !slices.Equal(got, want) {
			t.Errorf("%s: listed %v, want %v", tc.query.Encode(), got, want)
		}
	}
	// The other tenant's run with the same labels is never listed.
	var l api.RunList
	h.must(http.StatusOK, "GET", "/v1/runs?"+url.Values{"metadata[pr]": {"42"}}.Encode(), b, nil).json(t, &l)
	if len(l.Runs) != 1 || l.Runs[0].ID == infra42 {
		t.Errorf("beta lists %v for pr 42, want its own run only", l.Runs)
	}
	for _, q := range []string{"metadata=x", "metadata.team=infra", "metadata[bad%20key]=x", "metadata[team]=a&metadata[team]=b", "metadata[k]=%ff", "metadatateam]=infra", "metadata[team=infra"} {
		h.must(http.StatusBadRequest, "GET", "/v1/runs?"+q, a, nil)
	}
}

// TestSlowClients: a request body that does not arrive in time is cut
// off with an error that says nothing of the connection; an event stream
// outlives that timeout.
func TestSlowClients(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{config: server.Config{RequestTimeout: 300 * time.Millisecond, Keepalive: 100 * time.Millisecond}})
	key := h.key("alpha", "runs:read", "runs:write")
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript})

	conn, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nContent-Length: 100\r\n\r\n{\"task\":", key)
	_ = conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // a bound on a broken test, not a timing check
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	b, _ := io.ReadAll(resp.Body)
	r := response{status: resp.StatusCode, header: resp.Header, body: b}
	if e := r.errBody(t); e.Code != api.CodeBadRequest || strings.Contains(e.Message, "tcp") || strings.Contains(e.Message, "timeout") {
		t.Errorf("stalled body = %+v", e)
	}

	// Six keepalives span twice the request timeout: the stream lives on.
	n := 0
	_, comments, status := h.stream(key, "/v1/runs/"+run.ID+"/events/stream", func(e sse) bool {
		if e.event == "comment" {
			n++
		}
		return n == 6
	})
	if status != http.StatusOK || len(comments) != 6 {
		t.Errorf("stream: %d, %d keepalives", status, len(comments))
	}
}
