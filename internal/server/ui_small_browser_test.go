package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
)

// narrowWidth is the viewport of a phone held upright.
const narrowWidth = 420

// fitsJS checks the page at its viewport: nothing wider than the
// viewport (the document does not scroll sideways), and every link of the
// top bar and its buttons, when it is shown, visible: in the viewport,
// not covered by anything else. It returns what does not fit, or "".
const fitsJS = `(() => {
  const w = window.innerWidth;
  const bad = [];
  const sw = Math.max(document.documentElement.scrollWidth, document.body.scrollWidth);
  if (sw > w) {
    const wide = [...document.querySelectorAll('body *')].filter((el) => el.getBoundingClientRect().right > w + 0.5)
      .slice(0, 5).map((el) => el.tagName.toLowerCase() + (el.className ? '.' + String(el.className).replace(/ /g, '.') : ''));
    bad.push('the document is ' + sw + 'px wide at ' + w + 'px (past the edge: ' + wide.join(', ') + ')');
  }
  const bar = document.getElementById('top');
  for (const el of bar.hidden ? [] : bar.querySelectorAll('.nav a, #logout, #help-button')) {
    const r = el.getBoundingClientRect();
    const name = (el.textContent || el.id).trim();
    if (r.width === 0 || r.height === 0 || r.left < 0 || r.right > w + 0.5 || r.top < 0 || r.bottom > window.innerHeight) {
      bad.push(name + ' is not in view (' + [r.left, r.top, r.right, r.bottom].map(Math.round) + ')');
      continue;
    }
    const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
    if (!hit || !el.contains(hit)) bad.push(name + ' is covered by ' + (hit ? hit.tagName.toLowerCase() + '.' + hit.className : 'nothing'));
  }
  return bad.join('; ');
})()`

// TestUIBrowserSmallScreen drives the web UI in headless Chromium at a
// phone's width, 420 px: every page fits the screen, with the top bar's
// links and buttons in view; Enter in the deny-reason box denies; a
// secret name the server would refuse is refused in the page, with a
// message that says the rule the server enforces.
func TestUIBrowserSmallScreen(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	h := newHarness(t, harnessOptions{drive: true, resolveImage: imageStore(t), sandboxes: exampleSandboxes()})
	admin := h.key("alpha", "admin")
	h.must(http.StatusCreated, "POST", "/v1/policies/careful", admin, []byte(uiPolicy))
	h.must(http.StatusCreated, "POST", "/v1/templates/python-with-a-long-name", admin, []byte("image: localhost/tiny:1\npolicy: careful\n"))
	done := h.createRun(admin, map[string]any{
		"task":   "Summarize what the repository does, in a task long enough to need more than one line on a phone",
		"script": finishScript, "metadata": map[string]string{"ticket": "OPS-7"},
	})
	h.waitStatus(admin, done.ID, event.StatusCompleted)
	var up api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", admin, tarball(t, true, map[string]string{"src/hello.txt": "helo, world\n"})).json(t, &up)
	asks := h.createRun(admin, map[string]any{
		"task": "Fix the typo in the greeting", "script": uiScript, "policy": "careful",
		"workspace": map[string]any{"upload": up.ID},
	})
	h.waitStatus(admin, asks.ID, event.StatusAwaitingApproval)
	if _, err := h.store.AddLedgerEntry(context.Background(), store.LedgerEntry{
		Tenant: "alpha", Kind: store.LedgerGrant, Amount: 25_000_000,
		Note: "the monthly grant of the team that runs the nightly dependency updates",
	}); err != nil {
		t.Fatal(err)
	}
	h.must(http.StatusCreated, "PUT", "/v1/secrets/GITHUB_TOKEN_FOR_A_LONG_NAMED_INTEGRATION", admin,
		map[string]any{"value": "v", "hosts": []string{"api.github.com", "uploads.github.com", "*.githubusercontent.com"}})

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
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	watchConsole(t, ctx)
	do("log in at 420 px",
		chromedp.EmulateViewport(narrowWidth, 860),
		chromedp.Navigate(h.url+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS("#key")))
	if bad, err := within(ctx, chromedp.Evaluate[string](fitsJS)); err != nil || bad != "" {
		t.Errorf("the login page at %d px: %s (%v)", narrowWidth, bad, err)
	}
	do("log in",
		chromedp.SendKeys(chromedp.CSS("#key"), admin),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("table.runs tbody tr")))

	// Every page fits.
	for _, p := range []struct{ name, path, ready string }{
		{"runs", "/ui/", "table.runs tbody tr"},
		{"a run", "/ui/runs/" + done.ID, ".run-title .st-completed"},
		{"a run that asks", "/ui/runs/" + asks.ID, ".approval-box"},
		{"approvals", "/ui/approvals", "article.approval"},
		{"credits", "/ui/credits", ".panel table tbody tr"},
		{"policies", "/ui/policies", `tr[data-policy="careful"]`},
		{"templates", "/ui/templates", `tr[data-template="python-with-a-long-name"]`},
		{"sandboxes", "/ui/sandboxes", `tr[data-sandbox="iabc123def456"]`},
		{"secrets", "/ui/secrets", "#secret-name"},
	} {
		do("open "+p.name, chromedp.Navigate(h.url+p.path), chromedp.WaitVisible(chromedp.CSS(p.ready)))
		if bad, err := within(ctx, chromedp.Evaluate[string](fitsJS)); err != nil || bad != "" {
			shot(t, ctx, "failure-narrow-"+strings.ReplaceAll(p.name, " ", "-"), true)
			t.Errorf("%s at %d px: %s (%v)", p.name, narrowWidth, bad, err)
		}
	}

	// A bad secret name: the page says which names are allowed, and
	// sends nothing.
	const msgSel = ".secret-form .error"
	do("set a secret with a bad name",
		chromedp.SendKeys(chromedp.CSS("#secret-name"), "my token"),
		chromedp.SendKeys(chromedp.CSS("#secret-value"), "v"),
		chromedp.Click(chromedp.CSS(".secret-form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(msgSel)))
	msg, err := within(ctx, chromedp.Evaluate[string](`document.querySelector(`+jsString(msgSel)+`).innerText`))
	if err != nil || !strings.Contains(msg, "letters, digits") || !strings.Contains(msg, "128") || !strings.Contains(msg, "starting with a letter or digit") {
		t.Errorf("a bad secret name: the page says %q (%v), want the rule for names", msg, err)
	}
	if _, _, err := h.secrets.Get(context.Background(), "alpha", "my token"); err == nil {
		t.Error("a secret with a bad name was stored")
	}
	// The page's rule is the server's: for each name, the page accepts
	// it exactly when secret.ValidName does.
	names := []string{
		"GITHUB_TOKEN", "a", "9lives", "a.b-c_d", "-x", "_x", ".x", "my token", "tök", "a/b", "a\\b", "a:b", "",
		strings.Repeat("a", 128), strings.Repeat("a", 129), "x\u200b",
	}
	for _, n := range names {
		js := `(() => { const i = document.querySelector('#secret-name'); i.value = ` + jsString(n) + `;
  i.dispatchEvent(new Event('input')); return i.validity.valid; })()`
		ok, err := within(ctx, chromedp.Evaluate[bool](js))
		if err != nil {
			t.Fatalf("check name %q in the page: %v", n, err)
		}
		if want := secret.ValidName(n) == nil; ok != want {
			t.Errorf("the page takes secret name %q: %v; the server: %v", n, ok, want)
		}
	}

	// Enter in the deny-reason box denies, with what was typed.
	card := `article.approval[data-id^="` + asks.ID + `."]`
	do("open the inbox", chromedp.Navigate(h.url+"/ui/approvals"), chromedp.WaitVisible(chromedp.CSS(card)))
	do("deny with Enter",
		chromedp.Click(chromedp.CSS(card+` button[data-act="deny"]`)),
		chromedp.WaitVisible(chromedp.CSS(card+" textarea")),
		chromedp.SendKeys(chromedp.CSS(card+" textarea"), "not in place: use a patch"),
		chromedp.KeyEvent("\r"),
		chromedp.WaitNotPresent(chromedp.CSS(card)))
	// The card goes once the server answered: the decision is in the log.
	var page api.EventPage
	h.must(http.StatusOK, "GET", "/v1/runs/"+asks.ID+"/events?limit=1000", admin, nil).json(t, &page)
	denied := false
	for _, ev := range page.Events {
		if ev.Type != event.TypeApprovalDecided {
			continue
		}
		p, err := ev.Unpack()
		if d, ok := p.(*event.ApprovalDecided); err == nil && ok && d.Decision == "denied" && d.Reason == "not in place: use a patch" {
			denied = true
		}
	}
	if !denied {
		t.Errorf("no approval.decided denying with the typed reason in the run's log")
	}
}
