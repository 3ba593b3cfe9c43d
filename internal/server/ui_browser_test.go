package server_test

import (
	"context"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// chromium returns the path of Debian's chromium, installing the package
// when it is missing and the test runs as root on Debian (as
// scripts/ci-deps.sh does for CI); it skips the test when it cannot.
func chromium(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("chromium"); err == nil {
		return p
	}
	apt, err := exec.LookPath("apt-get")
	if os.Geteuid() != 0 || err != nil {
		t.Skip("chromium is not installed, and this is not root on Debian to install it (scripts/ci-deps.sh)")
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	install := func() ([]byte, error) {
		cmd := exec.CommandContext(ctx, apt, "install", "-y", "-qq", "--no-install-recommends", "chromium")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		return cmd.CombinedOutput()
	}
	t.Log("installing Debian's chromium package")
	if _, err := install(); err != nil {
		// A stale package list names versions the mirror no longer has.
		if out, err := exec.CommandContext(ctx, apt, "update", "-qq").CombinedOutput(); err != nil {
			t.Skipf("chromium is not installed and apt-get update failed: %v\n%s", err, out)
		}
		if out, err := install(); err != nil {
			t.Skipf("chromium is not installed and apt-get cannot install it: %v\n%s", err, out)
		}
	}
	p, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium was installed but is not in PATH")
	}
	return p
}

// newChrome starts headless chromium for the test. It can reach loopback
// only: every other host resolves to nothing and goes to a proxy address
// where nothing listens, so that no packet leaves the machine whatever a
// page (or the browser itself) asks for.
func newChrome(t *testing.T, path string) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
		chromedp.Flag("proxy-server", "http://127.0.0.1:9"),
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("lang", "en-US"),
	)
	if os.Geteuid() == 0 {
		// Chromium's own sandbox refuses to run as root; the pages are
		// this test's, served on loopback.
		opts = append(opts, chromedp.NoSandbox)
	}
	// Every wait of the test has a timeout of its own; this one bounds
	// the browser's whole life, should chromedp itself hang.
	life, cancelLife := context.WithTimeout(t.Context(), 3*time.Minute)
	actx, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		cancelLife()
	})
	return ctx
}

// watchConsole fails the test on any exception in a page and on any
// Content-Security-Policy or Trusted Types violation (which the browser
// reports in the console), and logs the rest, until the test ends.
func watchConsole(t *testing.T, ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	msgs := chromedp.Console(ctx)
	var wg sync.WaitGroup
	t.Cleanup(func() {
		cancel()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for m, err := range msgs {
			if err != nil {
				return
			}
			text := m.String()
			switch {
			case m.IsException(),
				strings.Contains(text, "Content Security Policy"),
				strings.Contains(text, "Refused to"),
				strings.Contains(text, "TrustedHTML"), strings.Contains(text, "Trusted Type"):
				t.Errorf("browser console: %s (%s:%d)", text, m.URL, m.Line+1)
			default:
				t.Logf("browser console: %s", text)
			}
		}
	}()
}

const uiPolicy = `tools:
  run_command:
    rules:
      - when: args.command.matches("^sed ")
        action: ask
        reason: editing files in place needs a person
`

const uiScript = `turns:
  - text: "I'll look at the greeting first."
    tool_calls:
      - name: run_command
        args: {command: "cat src/hello.txt && ls -la src && airlock-event progress --pct 50 'read the greeting'"}
  - text: "There is a typo: 'helo'. Fixing it in place."
    tool_calls:
      - name: run_command
        args: {command: "sed -i 's/helo/hello/' src/hello.txt && cat src/hello.txt"}
  - tool_calls:
      - name: finish
        args: {summary: "Fixed the typo in src/hello.txt (helo -> hello); the check passes."}
`

// TestUIBrowser drives the web UI in headless Chromium: log in with a
// key; a run created through the API, whose policy asks before a
// command, fills its timeline; the approval is granted in the inbox (in a
// second tab) while the run's page, left open, shows the run go on live to
// completion; the patch renders as a diff and downloads; a secret is set
// (its value never shown again) and deleted. With
// AIRLOCK_UI_SCREENSHOTS=1 it saves the pages to docs/screenshots/.
func TestUIBrowser(t *testing.T) {
	t.Parallel()
	chrome := chromium(t)
	h := newHarness(t, harnessOptions{drive: true})
	admin := h.key("alpha", "admin")
	h.must(http.StatusCreated, "POST", "/v1/policies/careful", admin, []byte(uiPolicy))
	h.must(http.StatusCreated, "POST", "/v1/policies/default", admin, []byte("budgets:\n  max_steps: 20\n"))
	// Earlier runs, for the list.
	summary := h.createRun(admin, map[string]any{"task": "Summarize what the repository does", "script": finishScript})
	broken := h.createRun(admin, map[string]any{
		"task": "Make the test suite pass", "script": finishScript,
		"verify": map[string]any{"commands": []string{"test -f go.mod"}},
	})
	h.waitStatus(admin, summary.ID, event.StatusCompleted)
	h.waitStatus(admin, broken.ID, event.StatusFailedVerification)

	ctx := newChrome(t, chrome)
	do := func(ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := chromedp.Do(actx, actions...); err != nil {
			shot(t, ctx, "failure-"+strings.ReplaceAll(what, " ", "-"), true)
			t.Fatalf("%s: %v", what, err)
		}
	}
	// text is the rendered text of the first element sel selects, once
	// it has some.
	text := func(ctx context.Context, sel string) string {
		t.Helper()
		tctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		s, err := chromedp.Run(tctx, chromedp.Poll[string](`(document.querySelector(`+jsString(sel)+`) || {}).innerText`,
			chromedp.WithPollingTimeout(30*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
		if err != nil {
			shot(t, ctx, "failure-text", true)
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	// front makes a tab the visible one: a page in a background tab
	// draws no frames (nor screenshots).
	front := chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.BringToFront, cdp.Empty{})
		return err
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start chromium: %v", err)
	}
	watchConsole(t, ctx)

	// Log in: the page asks for a key; a wrong one is refused.
	do(ctx, "open the login page",
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(h.url+"/"),
		chromedp.WaitVisible(chromedp.CSS("#key")))
	do(ctx, "log in with a wrong key",
		chromedp.SendKeys(chromedp.CSS("#key"), "airlock_"+strings.Repeat("0", 64)),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(".login .error")))
	if got := text(ctx, ".login .error"); !strings.Contains(got, "not valid") {
		t.Errorf("wrong key: the page says %q", got)
	}
	do(ctx, "log in",
		chromedp.Evaluate[chromedp.Void](`document.querySelector('#key').value = ''`),
		chromedp.SendKeys(chromedp.CSS("#key"), admin),
		chromedp.Click(chromedp.CSS("form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS("table.runs tbody tr")))
	if who := text(ctx, "#who"); !strings.HasPrefix(who, "alpha · key_") {
		t.Errorf("the top bar says %q", who)
	}
	// The page holds no key: not in storage, not in the DOM, not in a
	// cookie script can read.
	leak, err := within(ctx, chromedp.Evaluate[bool](`document.cookie !== "" || localStorage.length > 0 || sessionStorage.length > 0 || document.documentElement.outerHTML.includes(`+jsString(admin)+`)`))
	if err != nil || leak {
		t.Errorf("the page or its storage holds the key or the cookie (%v)", err)
	}

	// A run that will wait for a person, on an uploaded workspace.
	var up api.Upload
	h.must(http.StatusCreated, "POST", "/v1/uploads", admin, tarball(t, true, map[string]string{"src/hello.txt": "helo, world\n", "README.md": "# greeter\n"})).json(t, &up)
	run := h.createRun(admin, map[string]any{
		"task": "Fix the typo in the greeting", "script": uiScript, "policy": "careful",
		"workspace": map[string]any{"upload": up.ID},
		"verify":    map[string]any{"commands": []string{"grep -q 'hello, world' src/hello.txt"}},
		"metadata":  map[string]string{"ticket": "OPS-42"},
	})
	row := `table.runs tr[data-run="` + run.ID + `"]`
	do(ctx, "see the run in the list",
		chromedp.WaitVisible(chromedp.CSS(row+" .st-awaiting_approval")),
		chromedp.WaitVisible(chromedp.CSS("#approval-count")))
	shot(t, ctx, "runs", false)

	// Keyboard: j selects the first row, Enter opens it.
	do(ctx, "open the run with the keyboard",
		chromedp.Click(chromedp.CSS(`.chip[data-filter="awaiting_approval"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(`table.runs tr[data-run="`+summary.ID+`"]`)),
		chromedp.KeyEvent("j"),
		chromedp.KeyEvent("\r"),
		chromedp.WaitVisible(chromedp.CSS(".approval-box")))
	if got := text(ctx, "#run-title"); got != "Fix the typo in the greeting" {
		t.Errorf("run page title %q", got)
	}
	tl := text(ctx, ".timeline")
	for _, want := range []string{"I'll look at the greeting first.", "cat src/hello.txt", "helo, world", "Approval requested", "editing files in place needs a person"} {
		if !strings.Contains(tl, want) {
			t.Errorf("the timeline lacks %q:\n%s", want, tl)
		}
	}
	// The page stays open: what follows must arrive over its stream.
	do(ctx, "mark the page", chromedp.Evaluate[chromedp.Void](`window.stillHere = true`))
	before, _ := within(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.timeline li.ev').length`))

	// The inbox, in a second tab of the same browser (the same session).
	tab, closeTab := chromedp.NewContext(ctx)
	defer closeTab()
	// The first action on a context opens its tab for the context's life:
	// one without a timeout.
	if err := chromedp.Do(tab); err != nil {
		t.Fatalf("open a tab: %v", err)
	}
	card := `article.approval[data-id^="` + run.ID + `."]`
	do(tab, "open the inbox",
		front,
		chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(h.url+"/ui/approvals"),
		chromedp.WaitVisible(chromedp.CSS(card)))
	if got := text(tab, card); !strings.Contains(got, "sed -i") || !strings.Contains(got, "editing files in place needs a person") {
		t.Errorf("the approval says %q", got)
	}
	shot(t, tab, "approvals", false)
	// Deny asks for a reason; Escape takes the form back; then approve.
	do(tab, "start to deny",
		chromedp.Click(chromedp.CSS(card+` button[data-act="deny"]`)),
		chromedp.WaitVisible(chromedp.CSS(card+" textarea")),
		chromedp.SendKeys(chromedp.CSS(card+" textarea"), "\x1b"),
		chromedp.WaitVisible(chromedp.CSS(card+` button[data-act="approve"]`)))
	do(tab, "approve",
		chromedp.Click(chromedp.CSS(card+` button[data-act="approve"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(card)),
		chromedp.WaitVisible(chromedp.CSS(".inbox ~ .empty")))

	// The run's page shows the rest live, without a reload.
	do(ctx, "watch the run complete",
		front,
		chromedp.WaitVisible(chromedp.CSS(".approval-box.decided")),
		chromedp.WaitVisible(chromedp.CSS(".run-title .st-completed")),
		chromedp.WaitVisible(chromedp.CSS(".patch .diff .dl.add")),
		chromedp.WaitVisible(chromedp.CSS("#patch-download")))
	if still, err := within(ctx, chromedp.Evaluate[bool](`window.stillHere === true`)); err != nil || !still {
		t.Errorf("the run's page was reloaded (%v)", err)
	}
	after, _ := within(ctx, chromedp.Evaluate[int](`document.querySelectorAll('.timeline li.ev').length`))
	if after <= before {
		t.Errorf("the timeline has %d entries after the approval, %d before", after, before)
	}
	tl = text(ctx, ".timeline")
	for _, want := range []string{"approved", "hello, world", "Verification", "passed", "Completed", "helo -> hello", "reports", "50%", "read the greeting"} {
		if !strings.Contains(tl, want) {
			t.Errorf("the finished timeline lacks %q:\n%s", want, tl)
		}
	}
	if diff := text(ctx, ".patch .diff"); !strings.Contains(diff, "-helo, world") || !strings.Contains(diff, "+hello, world") || !strings.Contains(diff, "src/hello.txt") {
		t.Errorf("the diff reads %q", diff)
	}
	do(ctx, "scroll to the top", chromedp.Evaluate[chromedp.Void](`window.scrollTo(0, 0)`))
	shot(t, ctx, "run", true)

	// Download the patch with the browser.
	dir := t.TempDir()
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	progress := chromedp.BrowserEvents(dctx, cdpbrowser.DownloadProgress)
	do(ctx, "download the patch",
		chromedp.Func(func(ctx context.Context, _ *chromedp.Target) error {
			_, err := chromedp.CallBrowser(ctx, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
				Behavior: cdpbrowser.SetDownloadBehaviorBehaviorAllowAndName, DownloadPath: dir, EventsEnabled: new(true),
			})
			return err
		}),
		chromedp.Click(chromedp.CSS("#patch-download")))
	var got []byte
	for ev, err := range progress {
		if err != nil {
			t.Fatalf("download: %v", err)
		}
		if ev.State == cdpbrowser.DownloadProgressStateCanceled {
			t.Fatal("the download was cancelled")
		}
		if ev.State == cdpbrowser.DownloadProgressStateCompleted {
			if got, err = os.ReadFile(filepath.Join(dir, ev.GUID)); err != nil {
				t.Fatal(err)
			}
			break
		}
	}
	want := h.must(http.StatusOK, "GET", "/v1/runs/"+run.ID+"/artifacts/patch.diff", admin, nil).body
	if string(got) != string(want) || !strings.Contains(string(got), "+hello, world") {
		t.Errorf("downloaded patch %q, want %q", got, want)
	}

	// Credits (granted only now: a tenant with a ledger is metered, and
	// the scripted model has no price) and policies.
	if _, err := h.store.AddLedgerEntry(context.Background(), store.LedgerEntry{Tenant: "alpha", Kind: store.LedgerGrant, Amount: 25_000_000, Note: "monthly grant"}); err != nil {
		t.Fatal(err)
	}
	do(ctx, "open the credits",
		chromedp.Click(chromedp.CSS(`.nav a[data-page="credits"]`)),
		chromedp.WaitVisible(chromedp.CSS(".panel table tbody tr")))
	if got := text(ctx, ".balance .amount"); got != "25" {
		t.Errorf("the balance reads %q, want 25", got)
	}
	do(ctx, "open the policies (keyboard: g p)",
		chromedp.KeyEvent("gp"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-policy="careful"]`)),
		chromedp.Click(chromedp.CSS(`tr[data-policy="careful"]`)),
		chromedp.WaitVisible(chromedp.CSS(`tr.versions`)))

	// Secrets: set one (the value field is emptied and the value is
	// nowhere in the page), see it listed with its hosts, delete it.
	const secretValue = "ghp_UIBROWSERSECRET0123456789"
	srow := `table.secrets tr[data-secret="UI_TOKEN"]`
	do(ctx, "open the secrets (keyboard: g s)",
		chromedp.KeyEvent("gs"),
		chromedp.WaitVisible(chromedp.CSS("#secret-name")))
	do(ctx, "set a secret",
		chromedp.SendKeys(chromedp.CSS("#secret-name"), "UI_TOKEN"),
		chromedp.SendKeys(chromedp.CSS("#secret-value"), secretValue),
		chromedp.SendKeys(chromedp.CSS("#secret-hosts"), "api.github.com, *.Example.com"),
		chromedp.Click(chromedp.CSS(".secret-form button[type=submit]")),
		chromedp.WaitVisible(chromedp.CSS(srow)))
	if got := text(ctx, srow); !strings.Contains(got, "UI_TOKEN") || !strings.Contains(got, "*.example.com") || !strings.Contains(got, "api.github.com") {
		t.Errorf("the secret's row reads %q", got)
	}
	leak, err = within(ctx, chromedp.Evaluate[bool](`document.querySelector('#secret-value').value !== "" || document.documentElement.outerHTML.includes(`+jsString(secretValue)+`)`))
	if err != nil || leak {
		t.Errorf("the page still holds the secret's value (%v)", err)
	}
	if v, _, err := h.secrets.Get(context.Background(), "alpha", "UI_TOKEN"); err != nil || string(v.Reveal()) != secretValue {
		t.Errorf("the store does not hold the value set in the page (%v)", err)
	}
	shot(t, ctx, "secrets", false)
	do(ctx, "delete the secret",
		chromedp.Click(chromedp.CSS(srow+` button[data-act="delete"]`)),
		chromedp.Click(chromedp.CSS(srow+` button[data-act="confirm"]`)),
		chromedp.WaitNotPresent(chromedp.CSS(srow)),
		chromedp.WaitVisible(chromedp.CSS(".empty")))
	if _, _, err := h.secrets.Get(context.Background(), "alpha", "UI_TOKEN"); err == nil {
		t.Error("the deleted secret is still stored")
	}

	// Log out: the session ends for both tabs.
	do(ctx, "log out",
		chromedp.Click(chromedp.CSS("#logout")),
		chromedp.WaitVisible(chromedp.CSS("#key")))
	status, err := within(tab, chromedp.Evaluate[int](`fetch('/v1/runs').then(r => r.status)`, chromedp.EvalAwaitPromise))
	if err != nil || status != http.StatusUnauthorized {
		t.Errorf("the other tab's API call after logout = %d (%v), want 401", status, err)
	}
	do(tab, "reload the other tab", front, chromedp.Navigate(h.url+"/ui/approvals"), chromedp.WaitVisible(chromedp.CSS("#key")))
}

// shot saves a screenshot of the page as docs/screenshots/NAME.png when
// AIRLOCK_UI_SCREENSHOTS is set (failure screenshots go to the test's
// log directory instead: $AIRLOCK_UI_SCREENSHOTS_FAILED, when set).
func shot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	dir := ""
	switch {
	case strings.HasPrefix(name, "failure-"):
		dir = os.Getenv("AIRLOCK_UI_SCREENSHOTS_FAILED")
	case os.Getenv("AIRLOCK_UI_SCREENSHOTS") != "":
		dir = filepath.Join("..", "..", "docs", "screenshots")
	}
	if dir == "" {
		return
	}
	action := chromedp.CaptureScreenshot()
	if full {
		action = chromedp.FullScreenshot(100)
	}
	sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	b, err := chromedp.Run(sctx, action)
	if err != nil {
		t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// within runs an action with a timeout, so that a page that hangs fails
// the test rather than holding it until the package's timeout.
func within[T any](ctx context.Context, action chromedp.Action[T]) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return chromedp.Run(ctx, action)
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(s) + `"`
}
