package client_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/server"
	"github.com/airlockrun/airlock/internal/server/servertest"
)

// apiServer is the real API on a SQLite store in a temporary directory,
// served over loopback, with tenants alpha and beta; keys makes their API
// keys.
func apiServer(t *testing.T) (url string, key func(tenant string, scopes ...string) string) {
	t.Helper()
	dir := t.TempDir()
	secrets, err := secret.Open(dir, secret.KeyFile(filepath.Join(dir, "key")))
	if err != nil {
		t.Fatal(err)
	}
	s := servertest.Start(t, servertest.Options{
		Tenants:   []string{"alpha", "beta"},
		Configure: func(o *server.Options) { o.Secrets = secrets },
	})
	return s.URL, func(tenant string, scopes ...string) string {
		t.Helper()
		return s.Key(t, tenant, scopes...)
	}
}

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for name, content := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(content)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(content)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestAgainstServer drives the real API: upload, create, get, list, page
// and stream events, cancel, policies and credits; and another tenant's
// key, or a bad one, reaches nothing.
func TestAgainstServer(t *testing.T) {
	url, key := apiServer(t)
	ctx := context.Background()
	alpha, err := client.New(url, key("alpha", auth.ScopeRunsRead, auth.ScopeRunsWrite, auth.ScopeApprovals), client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	admin, _ := client.New(url, key("alpha", auth.ScopeAdmin), client.Options{})
	beta, _ := client.New(url, key("beta", auth.ScopeRunsRead, auth.ScopeRunsWrite, auth.ScopeApprovals, auth.ScopeAdmin), client.Options{})

	up, err := alpha.Upload(ctx, bytes.NewReader(tarOf(t, map[string]string{"hello.txt": "hello\n"})))
	if err != nil || !strings.HasPrefix(up.ID, "upl_") || up.Gzipped {
		t.Fatalf("Upload = %+v, %v", up, err)
	}
	script := "turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	run, err := alpha.CreateRun(ctx, api.CreateRunRequest{
		Task: "greet", Script: script, Workspace: &api.WorkspaceSource{Upload: up.ID},
		Verify: &api.VerifySpec{Commands: []string{"true"}}, Metadata: map[string]string{"ticket": "OPS-7"},
	})
	if err != nil || run.Status != event.StatusQueued || run.Tenant != "alpha" {
		t.Fatalf("CreateRun = %+v, %v", run, err)
	}
	// beta's upload is not alpha's to use.
	betaUp, err := beta.Upload(ctx, bytes.NewReader(tarOf(t, map[string]string{"x": "y"})))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alpha.CreateRun(ctx, api.CreateRunRequest{Task: "t", Script: script, Workspace: &api.WorkspaceSource{Upload: betaUp.ID}}); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("CreateRun with beta's upload = %v, want not_found", err)
	}

	got, err := alpha.Run(ctx, run.ID)
	if err != nil || got.Steps == nil || *got.Steps != 0 || got.Metadata["ticket"] != "OPS-7" || got.Events != 2 {
		t.Fatalf("Run = %+v, %v", got, err)
	}
	list, err := alpha.ListRuns(ctx, client.ListRunsOptions{Statuses: []event.Status{event.StatusQueued}})
	if err != nil || len(list.Runs) != 1 || list.Runs[0].ID != run.ID {
		t.Fatalf("ListRuns = %+v, %v", list, err)
	}
	page, err := alpha.Events(ctx, run.ID, 0, 1)
	if err != nil || len(page.Events) != 1 || !page.More || page.NextAfter != 1 || page.Events[0].Type != event.TypeRunCreated {
		t.Fatalf("Events = %+v, %v", page, err)
	}
	if arts, err := alpha.Artifacts(ctx, run.ID); err != nil || len(arts) != 0 {
		t.Fatalf("Artifacts = %+v, %v", arts, err)
	}

	// The stream delivers the log so far, then the cancel, then ends.
	followed := make(chan []event.Event, 1)
	var followErr error
	var end api.StreamEnd
	started := make(chan struct{})
	go func() {
		var evs []event.Event
		end, followErr = alpha.Follow(ctx, run.ID, 0, func(ev event.Event) error {
			evs = append(evs, ev)
			if ev.Seq == 2 {
				close(started)
			}
			return nil
		})
		followed <- evs
	}()
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the stream sent nothing")
	}
	if _, err := beta.CancelRun(ctx, run.ID, "not mine"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("beta's CancelRun = %v, want not_found", err)
	}
	if r, err := alpha.CancelRun(ctx, run.ID, "enough"); err != nil || r.Status != event.StatusCancelled {
		t.Fatalf("CancelRun = %+v, %v", r, err)
	}
	evs := <-followed
	if followErr != nil || end.Status != event.StatusCancelled || end.LastSeq != 3 || len(evs) != 3 || evs[2].Type != event.TypeRunCancelled {
		t.Fatalf("Follow = %+v, %v with %d events", end, followErr, len(evs))
	}
	chain := event.NewChain(run.ID)
	for _, ev := range evs {
		if err := chain.Next(ev); err != nil {
			t.Fatalf("streamed events do not chain: %v", err)
		}
	}
	// Resumed after the end: nothing left (204).
	if end, err := alpha.Follow(ctx, run.ID, 3, func(event.Event) error { return errors.New("no event expected") }); err != nil || end.LastSeq != 3 {
		t.Fatalf("Follow after the end = %+v, %v", end, err)
	}
	if _, err := alpha.CancelRun(ctx, run.ID, ""); !client.IsCode(err, api.CodeConflict) {
		t.Errorf("CancelRun again = %v, want conflict", err)
	}

	// beta reaches none of it, as if it did not exist.
	for name, call := range map[string]func() error{
		"Run":       func() error { _, err := beta.Run(ctx, run.ID); return err },
		"Events":    func() error { _, err := beta.Events(ctx, run.ID, 0, 0); return err },
		"Artifacts": func() error { _, err := beta.Artifacts(ctx, run.ID); return err },
		"Download":  func() error { _, err := beta.Download(ctx, run.ID, "patch.diff", &bytes.Buffer{}); return err },
		"PauseRun":  func() error { _, err := beta.PauseRun(ctx, run.ID, ""); return err },
		"ResumeRun": func() error { _, err := beta.ResumeRun(ctx, run.ID); return err },
		"ForkRun":   func() error { _, err := beta.ForkRun(ctx, run.ID, api.ForkRequest{AtStep: new(0)}); return err },
		"Approve":   func() error { _, err := beta.Approve(ctx, run.ID+".call_1_0", ""); return err },
		"Deny":      func() error { _, err := beta.Deny(ctx, run.ID+".call_1_0", "no"); return err },
		"Follow": func() error {
			_, err := beta.Follow(ctx, run.ID, 0, func(event.Event) error { return nil })
			return err
		},
	} {
		if err := call(); !client.IsCode(err, api.CodeNotFound) {
			t.Errorf("beta's %s = %v, want not_found", name, err)
		}
	}
	if l, err := beta.ListRuns(ctx, client.ListRunsOptions{}); err != nil || len(l.Runs) != 0 {
		t.Errorf("beta's ListRuns = %+v, %v", l, err)
	}
	bad, _ := client.New(url, "airlock_"+strings.Repeat("0", 48), client.Options{})
	if _, err := bad.ListRuns(ctx, client.ListRunsOptions{}); !client.IsCode(err, api.CodeUnauthenticated) {
		t.Errorf("a bad key's ListRuns = %v, want unauthenticated", err)
	}

	// Policies: the admin scope stores; versions are the tenant's.
	if _, err := alpha.PutPolicy(ctx, "strict", []byte("budgets: {max_steps: 3}\n")); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("PutPolicy without admin = %v, want forbidden", err)
	}
	v, err := admin.PutPolicy(ctx, "strict", []byte("budgets: {max_steps: 3}\n"))
	if err != nil || v.Version != 1 || v.New == nil || !*v.New || v.Source != "api" {
		t.Fatalf("PutPolicy = %+v, %v", v, err)
	}
	if _, err := admin.PutPolicy(ctx, "strict", []byte("budgets: {max_steps: many}\n")); !client.IsCode(err, api.CodeBadRequest) {
		t.Errorf("PutPolicy of a bad document = %v, want bad_request", err)
	}
	if vs, err := alpha.PolicyVersions(ctx, "strict"); err != nil || len(vs) != 1 || vs[0].Hash != v.Hash {
		t.Errorf("PolicyVersions = %+v, %v", vs, err)
	}
	if ps, err := alpha.Policies(ctx); err != nil || len(ps) != 1 {
		t.Errorf("Policies = %+v, %v", ps, err)
	}
	if _, err := beta.PolicyVersions(ctx, "strict"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("beta's PolicyVersions = %v, want not_found", err)
	}
	if cr, err := alpha.Credits(ctx, 0, 0); err != nil || cr.Tenant != "alpha" || cr.Balance != 0 || len(cr.Entries) != 0 {
		t.Errorf("Credits = %+v, %v", cr, err)
	}
	if as, err := alpha.Approvals(ctx); err != nil || len(as) != 0 {
		t.Errorf("Approvals = %+v, %v", as, err)
	}
}

// TestAgainstServerResources drives the endpoints beside runs: a stored
// policy's document, validation, a grant, and secrets, which never come
// back with their value; another tenant's key reaches none of them.
func TestAgainstServerResources(t *testing.T) {
	url, key := apiServer(t)
	ctx := context.Background()
	admin, _ := client.New(url, key("alpha", auth.ScopeAdmin), client.Options{})
	reader, _ := client.New(url, key("alpha", auth.ScopeRunsRead), client.Options{})
	beta, _ := client.New(url, key("beta", auth.ScopeAdmin), client.Options{})

	doc := "# strict\nbudgets: {max_steps: 3}\n"
	v1, err := admin.PutPolicy(ctx, "strict", []byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.PutPolicy(ctx, "strict", []byte("budgets: {max_steps: 4}\n")); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{"v1", v1.Hash[len("sha256:") : len("sha256:")+12], v1.Hash} {
		got, err := reader.Policy(ctx, "strict", ref)
		if err != nil || got.Version != 1 || got.Document != doc || got.Hash != v1.Hash {
			t.Errorf("Policy(strict, %s) = %+v, %v", ref, got, err)
		}
	}
	if got, err := reader.Policy(ctx, "strict", ""); err != nil || got.Version != 2 {
		t.Errorf("Policy(strict, latest) = %+v, %v", got, err)
	}
	for _, ref := range []string{"v9", ""} {
		if _, err := beta.Policy(ctx, "strict", ref); !client.IsCode(err, api.CodeNotFound) {
			t.Errorf("beta's Policy(strict, %q) = %v, want not_found", ref, err)
		}
	}
	if _, err := reader.Policy(ctx, "strict", "v9"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("Policy(strict, v9) = %v, want not_found", err)
	}

	chk, err := admin.ValidatePolicy(ctx, []byte(doc))
	if err != nil || chk.Hash != v1.Hash || !strings.HasPrefix(chk.CanonicalHash, "sha256:") || !strings.Contains(chk.Canonical, "max_steps: 3") {
		t.Errorf("ValidatePolicy = %+v, %v", chk, err)
	}
	if _, err := admin.ValidatePolicy(ctx, []byte("budgets: {max_steps: many}\n")); !client.IsCode(err, api.CodeBadRequest) {
		t.Errorf("ValidatePolicy of a bad document = %v, want bad_request", err)
	}
	if _, err := admin.ValidatePolicy(ctx, []byte("sandbox:\n  rootfs: /srv/root\n")); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("ValidatePolicy of a host rootfs = %v, want forbidden", err)
	}

	g, err := admin.Grant(ctx, api.GrantRequest{Amount: 2_500_000, Note: "seed"})
	if err != nil || g.Tenant != "alpha" || g.Balance != 2_500_000 || g.Credits != "2.5" || g.Entry.Kind != "grant" || g.Entry.Note != "seed" {
		t.Fatalf("Grant = %+v, %v", g, err)
	}
	if _, err := admin.Grant(ctx, api.GrantRequest{Tenant: "beta", Amount: 1}); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("Grant to another tenant = %v, want forbidden", err)
	}
	if _, err := reader.Grant(ctx, api.GrantRequest{Amount: 1}); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("Grant without admin = %v, want forbidden", err)
	}
	if cr, err := beta.Credits(ctx, 0, 0); err != nil || cr.Balance != 0 {
		t.Errorf("beta's Credits = %+v, %v", cr, err)
	}

	value := []byte("ghp_CLIENTSECRET0123456789")
	s, err := admin.PutSecret(ctx, "GITHUB_TOKEN", value, []string{"API.GitHub.com."})
	if err != nil || s.Name != "GITHUB_TOKEN" || len(s.Hosts) != 1 || s.Hosts[0] != "api.github.com" {
		t.Fatalf("PutSecret = %+v, %v", s, err)
	}
	l, err := admin.Secrets(ctx)
	if err != nil || l.Tenant != "alpha" || len(l.Secrets) != 1 || l.Secrets[0].Name != "GITHUB_TOKEN" {
		t.Fatalf("Secrets = %+v, %v", l, err)
	}
	if l, err := beta.Secrets(ctx); err != nil || len(l.Secrets) != 0 {
		t.Errorf("beta's Secrets = %+v, %v", l, err)
	}
	if err := beta.DeleteSecret(ctx, "GITHUB_TOKEN"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("beta's DeleteSecret = %v, want not_found", err)
	}
	if _, err := reader.Secrets(ctx); !client.IsCode(err, api.CodeForbidden) {
		t.Errorf("Secrets without secrets:write = %v, want forbidden", err)
	}
	if err := admin.DeleteSecret(ctx, "GITHUB_TOKEN"); err != nil {
		t.Fatal(err)
	}
	if err := admin.DeleteSecret(ctx, "GITHUB_TOKEN"); !client.IsCode(err, api.CodeNotFound) {
		t.Errorf("DeleteSecret twice = %v, want not_found", err)
	}
}
