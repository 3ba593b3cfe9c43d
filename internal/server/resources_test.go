package server_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
)

// TestPolicyShowAndValidate: a stored version is read with its document,
// byte for byte, by vN, hash prefix or latest; validation checks a
// document as storing it would, and stores nothing.
func TestPolicyShowAndValidate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	admin, reader, writer := h.key("alpha", "admin"), h.key("alpha", "runs:read"), h.key("alpha", "runs:write")
	doc1, doc2 := "# strict, first\nbudgets:\n  max_steps: 5\n", "budgets: {max_steps: 3}\n"
	var v1, v2 api.PolicyVersion
	h.must(http.StatusCreated, "POST", "/v1/policies/strict", admin, []byte(doc1)).json(t, &v1)
	h.must(http.StatusCreated, "POST", "/v1/policies/strict", admin, []byte(doc2)).json(t, &v2)
	hex := strings.TrimPrefix(v1.Hash, "sha256:")
	for _, tc := range []struct {
		ref     string
		version int64
		doc     string
	}{
		{"v1", 1, doc1},
		{"v2", 2, doc2},
		{"latest", 2, doc2},
		{hex[:8], 1, doc1},
		{strings.ToUpper(hex[:12]), 1, doc1},
		{v1.Hash, 1, doc1},
		{strings.TrimPrefix(v1.DocumentHash, "sha256:")[:10], 1, doc1}, // by the document's hash too
	} {
		var got api.PolicyVersion
		h.must(http.StatusOK, "GET", "/v1/policies/strict/versions/"+tc.ref, reader, nil).json(t, &got)
		if got.Version != tc.version || got.Document != tc.doc || got.Name != "strict" || got.New != nil {
			t.Errorf("version %s = %+v, want v%d", tc.ref, got, tc.version)
		}
	}
	for _, tc := range []struct{ path, code string }{
		{"/v1/policies/strict/versions/v3", api.CodeNotFound},
		{"/v1/policies/nope/versions/latest", api.CodeNotFound},
		{"/v1/policies/Bad%20Name/versions/v1", api.CodeNotFound},
		{"/v1/policies/strict/versions/v0", api.CodeBadRequest},
		{"/v1/policies/strict/versions/abc", api.CodeBadRequest},
	} {
		if e := h.do("GET", tc.path, reader, nil).errBody(t); e.Code != tc.code {
			t.Errorf("GET %s = %+v, want %s", tc.path, e, tc.code)
		}
	}
	// Listings and histories carry no document.
	var vs api.PolicyVersionList
	h.must(http.StatusOK, "GET", "/v1/policies/strict/versions", reader, nil).json(t, &vs)
	if len(vs.Versions) != 2 || vs.Versions[0].Document != "" {
		t.Errorf("versions %+v", vs.Versions)
	}

	var chk api.PolicyCheck
	h.must(http.StatusOK, "POST", "/v1/policies/validate", writer, []byte(doc1)).json(t, &chk)
	// One policy hash: what validate says, what the stored version shows.
	if chk.Hash != v1.Hash || chk.CanonicalHash != chk.Hash || chk.DocumentHash != v1.DocumentHash || chk.DocumentHash == chk.Hash ||
		!strings.Contains(chk.Canonical, "max_steps: 5") {
		t.Errorf("validate = %+v; want the policy hash %s and the document's %s", chk, v1.Hash, v1.DocumentHash)
	}
	for _, tc := range []struct {
		name, doc, code string
	}{
		{"invalid", "budgets: {max_stepz: 1}\n", api.CodeBadRequest},
		{"host resources", "sandbox:\n  rootfs: /srv/root\n", api.CodeForbidden},
		{"empty", "", api.CodeBadRequest},
		{"too large", strings.Repeat("#", 2<<20), api.CodeTooLarge},
	} {
		if e := h.do("POST", "/v1/policies/validate", writer, []byte(tc.doc)).errBody(t); e.Code != tc.code {
			t.Errorf("validate %s = %+v, want %s", tc.name, e, tc.code)
		}
	}
	h.must(http.StatusOK, "GET", "/v1/policies/strict/versions", reader, nil).json(t, &vs)
	var ps api.PolicyList
	h.must(http.StatusOK, "GET", "/v1/policies", reader, nil).json(t, &ps)
	if len(vs.Versions) != 2 || len(ps.Policies) != 1 {
		t.Errorf("validation stored something: versions %+v, policies %+v", vs.Versions, ps.Policies)
	}
}

// TestGrants: an admin key grants credits to its own tenant, answered
// with the entry and the balance; bad amounts and notes are refused.
func TestGrants(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	admin := h.key("alpha", "admin")
	var g api.Grant
	h.must(http.StatusCreated, "POST", "/v1/credits/grants", admin, map[string]any{"amount": 2_500_000, "note": "seed"}).json(t, &g)
	if g.Tenant != "alpha" || g.Balance != 2_500_000 || g.Credits != "2.5" || g.Entry.Kind != "grant" || g.Entry.Amount != 2_500_000 || g.Entry.Note != "seed" || g.Entry.ID == 0 {
		t.Errorf("grant %+v", g)
	}
	h.must(http.StatusCreated, "POST", "/v1/credits/grants", admin, map[string]any{"tenant": "alpha", "amount": 500_000}).json(t, &g)
	if g.Balance != 3_000_000 || g.Credits != "3" {
		t.Errorf("second grant %+v", g)
	}
	var cr api.Credits
	h.must(http.StatusOK, "GET", "/v1/credits", admin, nil).json(t, &cr)
	if cr.Balance != 3_000_000 || len(cr.Entries) != 2 || cr.Entries[0].Note != "seed" {
		t.Errorf("credits %+v", cr)
	}
	for _, tc := range []struct {
		name string
		body any
		code string
	}{
		{"zero", map[string]any{"amount": 0}, api.CodeBadRequest},
		{"negative", map[string]any{"amount": -1}, api.CodeBadRequest},
		{"too much", map[string]any{"amount": int64(1e18) + 1}, api.CodeBadRequest},
		{"credits as text", map[string]any{"amount": "2.5"}, api.CodeBadRequest},
		{"control characters in the note", map[string]any{"amount": 1, "note": "a\x00b"}, api.CodeBadRequest},
		{"note too long", map[string]any{"amount": 1, "note": strings.Repeat("n", 2000)}, api.CodeBadRequest},
		{"another tenant", map[string]any{"tenant": "beta", "amount": 1}, api.CodeForbidden},
	} {
		if e := h.do("POST", "/v1/credits/grants", admin, tc.body).errBody(t); e.Code != tc.code {
			t.Errorf("grant %s = %+v, want %s", tc.name, e, tc.code)
		}
	}
}

// TestRunMetadataAndHash: a run's metadata is in its run.created event
// (no hidden artifact) and comes back with GET; a run has its last hash.
func TestRunMetadataAndHash(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "runs:read", "runs:write")
	run := h.createRun(key, map[string]any{"task": "t", "script": finishScript, "metadata": map[string]string{"ticket": "OPS-9", "team": "infra"}})
	if run.Metadata["ticket"] != "OPS-9" || run.LastHash == "" {
		t.Errorf("created %+v", run)
	}
	stored, err := h.store.GetRun(context.Background(), run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got api.Run
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, key, nil).json(t, &got)
	if got.Metadata["team"] != "infra" || len(got.Metadata) != 2 || got.LastHash != stored.LastHash.String() || got.Events != stored.LastSeq {
		t.Errorf("got %+v; the store has last %d %s", got, stored.LastSeq, stored.LastHash)
	}
	var page api.EventPage
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/events?limit=1", key, nil).json(t, &page)
	var created event.RunCreated
	if err := json.Unmarshal(page.Events[0].Payload, &created); err != nil || created.Metadata["ticket"] != "OPS-9" {
		t.Errorf("run.created %s: %v", page.Events[0].Payload, err)
	}
	var arts api.ArtifactList
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/artifacts", key, nil).json(t, &arts)
	if as, err := h.store.ListArtifacts(context.Background(), run.ID); err != nil || len(as) != 0 || len(arts.Artifacts) != 0 {
		t.Errorf("the run has artifacts %v (%v), lists %v", as, err, arts.Artifacts)
	}
	// A run without metadata has none; metadata out of bounds is refused.
	plain := h.createRun(key, map[string]any{"task": "t", "script": finishScript})
	var bare api.Run
	h.must(http.StatusOK, "GET", "/v1/runs/"+plain.ID, key, nil).json(t, &bare)
	if bare.Metadata != nil {
		t.Errorf("metadata of a run without: %v", bare.Metadata)
	}
	for name, md := range map[string]map[string]string{
		"bad key":    {"a b": "x"},
		"long value": {"k": strings.Repeat("x", event.MaxMetadataValueLen+1)},
	} {
		if e := h.do("POST", "/v1/runs", key, map[string]any{"task": "t", "script": finishScript, "metadata": md}).errBody(t); e.Code != api.CodeBadRequest || strings.HasPrefix(e.Message, "event:") {
			t.Errorf("metadata %s: %+v", name, e)
		}
	}
}
