package server_test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockrun/airlock/internal/event"
)

// TestUIBrowserDeletion drives the deletions of the web UI in headless
// Chromium: a run that has ended is purged from its page after its id is
// typed (a wrong text leaves the button off), the page then shows the
// audit record naming the key, and the Deletions page lists it; an admin
// deletes the tenant, forced, after typing its name, and the record is
// shown.
func TestUIBrowserDeletion(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	h := newHarness(t, harnessOptions{})
	admin := h.key("alpha", "admin")
	run := h.createRun(admin, map[string]any{"task": "A run to purge from the UI", "script": finishScript})
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", admin, map[string]any{})
	h.waitStatus(admin, run.ID, event.StatusCancelled)

	ctx := newChrome(t, chrome)
	do := func(what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			shot(t, ctx, "failure-"+strings.ReplaceAll(what, " ", "-"), true)
			t.Fatalf("%s: %v", what, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := within(ctx, chromedp.Poll[string](`(document.querySelector(`+jsString(sel)+`) || {}).innerText`,
			chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err != nil {
			shot(t, ctx, "failure-text", true)
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	disabled := func(sel string) bool {
		t.Helper()
		d, err := within(ctx, chromedp.Evaluate[bool](`document.querySelector(`+jsString(sel)+`).disabled`))
		if err != nil {
			t.Fatalf("is %s disabled: %v", sel, err)
		}
		return d
	}
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	watchConsole(t, ctx)
	do("log in",
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(h.url+"/ui/runs/"+run.ID),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), admin),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(".run-title .st-cancelled")))

	// The confirm step: the button acts only on the run's id, typed.
	const submit = ".confirm-box button[type=submit]"
	do("start to purge",
		chromedp.Click(chromedp.CSS("#purge")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-purge")),
		chromedp.SendKeys(chromedp.CSS("#confirm-purge"), run.ID[:len(run.ID)-1]))
	if !disabled(submit) {
		t.Error("the purge button is on before the run's id is typed in full")
	}
	h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID, admin, nil)
	do("type the id", chromedp.SendKeys(chromedp.CSS("#confirm-purge"), run.ID[len(run.ID)-1:]))
	if disabled(submit) {
		t.Error("the purge button is off with the run's id typed")
	}
	do("purge",
		chromedp.Click(chromedp.CSS(submit)),
		chromedp.WaitVisible(chromedp.CSS(".deleted .actor")))
	if got := text(".deleted"); !strings.Contains(got, "Run purged") || !strings.Contains(got, run.ID) ||
		!strings.Contains(got, "key key_") || !strings.Contains(got, "1 runs") {
		t.Errorf("the purged page reads %q", got)
	}
	h.must(http.StatusNotFound, "GET", "/v1/runs/"+run.ID, admin, nil)

	do("open the deletions",
		chromedp.Click(chromedp.CSS(`.nav a[data-page="deletions"]`)),
		chromedp.WaitVisible(chromedp.CSS("[data-deletion]")))
	if got := text("[data-deletion]"); !strings.Contains(got, run.ID) || !strings.Contains(got, "run") {
		t.Errorf("the deletions page reads %q", got)
	}
	shot(t, ctx, "deletions", false)

	do("start to delete the tenant",
		chromedp.Click(chromedp.CSS("#tenant-delete")),
		chromedp.WaitVisible(chromedp.CSS("#confirm-delete")),
		chromedp.SendKeys(chromedp.CSS("#confirm-delete"), "beta"))
	if !disabled(submit) {
		t.Error("the delete button is on with another name typed")
	}
	// Forced: the request the page sends says so (the fetches recorded
	// in the page).
	do("delete the tenant",
		chromedp.Evaluate[chromedp.Void](`window.sent = []; const f = window.fetch; window.fetch = (u, o) => { window.sent.push(((o && o.method) || 'GET') + ' ' + u); return f(u, o); }`),
		chromedp.Click(chromedp.CSS("#tenant-delete-force")),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#confirm-delete').value = ''`),
		chromedp.SendKeys(chromedp.CSS("#confirm-delete"), "alpha"),
		chromedp.Click(chromedp.CSS(submit)),
		chromedp.WaitVisible(chromedp.CSS(".deleted .counts")))
	sent, err := within(ctx, chromedp.Evaluate[[]string](`window.sent`))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(sent, "DELETE /v1/tenants/alpha?force=true") {
		t.Errorf("the page sent %q, want a DELETE of /v1/tenants/alpha?force=true", sent)
	}
	if got := text(".deleted"); !strings.Contains(got, "Tenant deleted") || !strings.Contains(got, "tenant alpha") || !strings.Contains(got, "1 api keys") {
		t.Errorf("the deleted tenant's page reads %q", got)
	}
	if _, err := h.store.GetTenant(context.Background(), "alpha"); err == nil {
		t.Error("the tenant is still stored")
	}
	h.must(http.StatusUnauthorized, "GET", "/v1/runs", admin, nil)
}

// TestUIBrowserRetainedRun: the page of a run whose payloads retention
// deleted says so, as `airlock runs show` does: how many, and the day.
func TestUIBrowserRetainedRun(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	h := newHarness(t, harnessOptions{})
	admin := h.key("alpha", "admin")
	run := h.createRun(admin, map[string]any{"task": "A run retention emptied", "script": finishScript})
	h.must(http.StatusAccepted, "POST", "/v1/runs/"+run.ID+"/cancel", admin, map[string]any{})
	h.waitStatus(admin, run.ID, event.StatusCancelled)
	at := time.Now().UTC()
	n, _, _, err := h.store.TombstonePayloads(context.Background(), run.ID, at, event.ReasonRetention)
	if err != nil || n == 0 {
		t.Fatalf("TombstonePayloads = %d, %v", n, err)
	}

	ctx := newChrome(t, chrome)
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	watchConsole(t, ctx)
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := chromedp.Do(actx,
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(h.url+"/ui/runs/"+run.ID),
		chromedp.WaitVisible(chromedp.CSS("#key")),
		chromedp.SendKeys(chromedp.CSS("#key"), admin),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(".run-title .st-cancelled"))); err != nil {
		shot(t, ctx, "failure-retained", true)
		t.Fatalf("open the run: %v", err)
	}
	got, err := within(ctx, chromedp.Poll[string](`(() => { const e = document.querySelector('#retained'); return e && !e.hidden && e.innerText; })()`,
		chromedp.WithPollingTimeout(10*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		shot(t, ctx, "failure-retained", true)
		t.Fatalf("the run page does not say its payloads were deleted: %v", err)
	}
	want := fmt.Sprintf("%d payloads deleted by retention on %s", n, at.Format(time.DateOnly))
	if !strings.Contains(got, want) {
		t.Errorf("the retained run's page reads %q, want %q", got, want)
	}
	// Its steps and usage went with the payloads: the header does not
	// say 0 of them.
	meta, err := within(ctx, chromedp.Evaluate[string](`document.querySelector('dl.meta').innerText`))
	if err != nil || strings.Contains(meta, "0 in") || !strings.Contains(meta, "deleted") {
		t.Errorf("the retained run's header reads %q (%v), want its steps and tokens said deleted", meta, err)
	}
	shot(t, ctx, "retained-run", false)
}
