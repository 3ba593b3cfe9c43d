package server_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// TestPurgeRunAPI: DELETE /v1/runs/{id} refuses a run that has not
// ended and one with a fork that has not, a runs:read key, and another
// tenant's run (not found, as a run that does not exist); then it purges
// the run with its fork, answers the audit record naming the key, and
// the record stays listed while the run is gone.
func TestPurgeRunAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	writer, _, err := h.keys.Create(context.Background(), "alpha", "ops-bot", []string{"runs:write"}, auth.FormatAirlock)
	if err != nil {
		t.Fatal(err)
	}
	reader := h.key("alpha", "runs:read")
	beta := h.key("beta", "admin")
	run := h.createRun(writer, map[string]any{"task": "purge me PURGEMARKER", "script": finishScript})

	// Queued: its driver would write into a run that is gone.
	r := h.do("DELETE", "/v1/runs/"+run.ID, writer, nil)
	if e := r.errBody(t); r.status != http.StatusConflict || !strings.Contains(e.Message, "cancel it first") {
		t.Errorf("purge of a queued run = %d %+v, want 409 saying to cancel it", r.status, e)
	}
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", writer, map[string]any{})
	var fork api.Run
	h.must(http.StatusCreated, "POST", "/v1/runs/"+run.ID+"/fork", writer, map[string]any{"at_step": 0}).json(t, &fork)
	r = h.do("DELETE", "/v1/runs/"+run.ID, writer, nil)
	if e := r.errBody(t); r.status != http.StatusConflict || !strings.Contains(e.Message, "forked from this one") {
		t.Errorf("purge of a run with a queued fork = %d %+v, want 409 naming the fork", r.status, e)
	}
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+fork.ID+"/cancel", writer, map[string]any{})

	for _, tc := range []struct {
		name, key string
		status    int
		code      string
	}{
		{"runs:read", reader, http.StatusForbidden, api.CodeForbidden},
		{"another tenant", beta, http.StatusNotFound, api.CodeNotFound},
	} {
		r := h.do("DELETE", "/v1/runs/"+run.ID, tc.key, nil)
		if e := r.errBody(t); r.status != tc.status || e.Code != tc.code {
			t.Errorf("purge with %s = %d %+v, want %d", tc.name, r.status, e, tc.status)
		}
	}
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, reader, nil)

	var rec api.Deletion
	h.must(http.StatusOK, "DELETE", "/v1/runs/"+run.ID, writer, nil).json(t, &rec)
	if rec.ID < 1 || rec.Kind != "run" || rec.Tenant != "alpha" || rec.Target != run.ID || rec.Counts["runs"] != 2 || rec.Counts["events"] < 2 ||
		!strings.HasPrefix(rec.Actor, "key key_") || !strings.HasSuffix(rec.Actor, " (ops-bot)") || rec.Created.IsZero() {
		t.Errorf("purge answered %+v", rec)
	}
	for _, id := range []string{run.ID, fork.ID} {
		h.must(http.StatusNotFound, "GET", "/v1/runs/"+id, reader, nil)
		h.must(http.StatusNotFound, "GET", "/v1/runs/"+id+"/events", reader, nil)
	}
	h.must(http.StatusNotFound, "DELETE", "/v1/runs/"+run.ID, writer, nil)

	var list api.DeletionList
	h.must(http.StatusOK, "GET", "/v1/deletions", reader, nil).json(t, &list)
	if len(list.Deletions) != 1 || list.Deletions[0].ID != rec.ID || list.Deletions[0].Actor != rec.Actor {
		t.Errorf("GET /v1/deletions = %+v, want [%+v]", list, rec)
	}
	h.must(http.StatusOK, "GET", "/v1/deletions", beta, nil).json(t, &list)
	if len(list.Deletions) != 0 {
		t.Errorf("another tenant's GET /v1/deletions = %+v, want none", list)
	}
	_, bodies := h.seen()
	if strings.Count(string(bodies), "PURGEMARKER") == 0 {
		t.Fatal("the marker never appeared in an answer: the test does not see the task")
	}
	if n := h.do("GET", "/v1/runs?limit=100", reader, nil); strings.Contains(string(n.body), "PURGEMARKER") {
		t.Errorf("the purged task is still listed: %s", n.body)
	}
}

// TestDeleteTenantAPI: DELETE /v1/tenants/{name} is for admin keys, of
// the caller's own tenant only (another's is not found and stays);
// a tenant with a run going is refused; then the tenant goes with its
// keys (the caller's own key stops working) and runs, the other tenant
// stays, and the audit record is the answer.
func TestDeleteTenantAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	admin := h.key("alpha", "admin")
	writer := h.key("alpha", "runs:write")
	beta := h.key("beta", "admin")
	run := h.createRun(writer, map[string]any{"task": "tenant data", "script": finishScript})
	betaRun := h.createRun(beta, map[string]any{"task": "beta's", "script": finishScript})

	for _, tc := range []struct {
		name, key, tenant string
		status            int
	}{
		{"runs:write", writer, "alpha", http.StatusForbidden},
		{"another tenant's admin", beta, "alpha", http.StatusNotFound},
		{"an admin, another tenant", admin, "beta", http.StatusNotFound},
		{"an admin, no such tenant", admin, "gamma", http.StatusNotFound},
	} {
		if r := h.do("DELETE", "/v1/tenants/"+tc.tenant, tc.key, nil); r.status != tc.status {
			t.Errorf("delete %s with %s = %d %s, want %d", tc.tenant, tc.name, r.status, r.body, tc.status)
		}
	}
	r := h.do("DELETE", "/v1/tenants/alpha", admin, nil)
	if e := r.errBody(t); r.status != http.StatusConflict || !strings.Contains(e.Message, "cancel") {
		t.Errorf("delete with a queued run = %d %+v, want 409", r.status, e)
	}
	for _, q := range []string{"?force=yes", "?force=1", "?force=TRUE"} {
		if r := h.do("DELETE", "/v1/tenants/alpha"+q, admin, nil); r.status != http.StatusBadRequest {
			t.Errorf("delete %s = %d %s, want 400", q, r.status, r.body)
		}
	}
	if r := h.do("DELETE", "/v1/tenants/alpha?force=false", admin, nil); r.status != http.StatusConflict {
		t.Errorf("delete ?force=false with a queued run = %d %s, want 409", r.status, r.body)
	}
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, admin, nil)
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", admin, map[string]any{})

	var rec api.Deletion
	h.must(http.StatusOK, "DELETE", "/v1/tenants/alpha", admin, nil).json(t, &rec)
	if rec.Kind != "tenant" || rec.Target != "alpha" || rec.Counts["runs"] != 1 || rec.Counts["api_keys"] != 2 || rec.Counts["tenants"] != 1 ||
		!strings.HasPrefix(rec.Actor, "key key_") {
		t.Errorf("delete answered %+v", rec)
	}
	for _, key := range []string{admin, writer} {
		h.must(http.StatusUnauthorized, "GET", "/v1/runs", key, nil)
	}
	if _, err := h.store.GetTenant(context.Background(), "alpha"); err == nil {
		t.Error("the tenant is still stored")
	}
	if _, err := h.store.GetRun(context.Background(), run.ID); err == nil {
		t.Error("the tenant's run is still stored")
	}
	h.must(http.StatusOK, "GET", "/v1/runs/"+betaRun.ID, beta, nil)
	recs, err := h.store.ListDeletions(context.Background(), "alpha", 0)
	if err != nil || !slices.ContainsFunc(recs, func(d store.Deletion) bool { return d.ID == rec.ID }) {
		t.Errorf("the audit record is not kept: %+v, %v", recs, err)
	}
	var list api.DeletionList
	h.must(http.StatusOK, "GET", "/v1/deletions", beta, nil).json(t, &list)
	if len(list.Deletions) != 0 {
		t.Errorf("beta sees alpha's deletion: %+v", list)
	}
}

// TestRetainedRunAPI: a run whose payloads retention deleted is still
// shown by GET /v1/runs/{id} (its row, and payloads_deleted), and a fork
// of it is refused with 409 saying why (before: 500s, from a log that no
// longer rebuilds).
func TestRetainedRunAPI(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	writer := h.key("alpha", "admin")
	run := h.createRun(writer, map[string]any{"task": "retain me", "script": finishScript})
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", writer, map[string]any{})
	n, _, _, err := h.store.TombstonePayloads(context.Background(), run.ID, time.Now(), event.ReasonRetention)
	if err != nil || n == 0 {
		t.Fatalf("TombstonePayloads = %d, %v", n, err)
	}
	var got api.Run
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, writer, nil).json(t, &got)
	if got.Status != event.StatusCancelled || got.PayloadsDeleted == nil || int64(got.PayloadsDeleted.Count) != n || got.PayloadsDeleted.At.IsZero() {
		t.Errorf("GET /v1/runs/{id} of a retained run = %+v (deleted %+v), want cancelled with %d payloads deleted", got, got.PayloadsDeleted, n)
	}
	r := h.do("POST", "/v1/runs/"+run.ID+"/fork", writer, map[string]any{"at_step": 0})
	if e := r.errBody(t); r.status != http.StatusConflict || !strings.Contains(e.Message, "deleted by retention") {
		t.Errorf("fork of a retained run = %d %+v, want 409 saying its payloads were deleted", r.status, e)
	}
}
