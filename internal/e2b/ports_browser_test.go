package e2b_test

import (
	"context"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/airlockrun/airlock/internal/e2b"
)

// TestBrowserPreview: headless Chromium loads a page served from inside a
// sandbox through its preview URL, http://8000-<id>.e2b.test:PORT/, and
// the page's script opens a WebSocket back to the same URL's /ws, whose
// echo it shows. The browser resolves *.e2b.test to loopback (a wildcard
// DNS record's part) and nothing else.
func TestBrowserPreview(t *testing.T) {
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (scripts/ci-deps.sh installs it)")
	}
	h := newHarness(t, harnessOptions{config: e2b.Config{Domain: "e2b.test"}})
	s := h.create("alpha", map[string]any{"templateID": "base"})
	h.startServer(s, 8000)
	u, err := url.Parse(h.envdURL)
	if err != nil {
		t.Fatal(err)
	}
	page := "http://8000-" + s.ID + ".e2b.test:" + u.Port() + "/"

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("host-resolver-rules", "MAP *.e2b.test 127.0.0.1, MAP * ~NOTFOUND"),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
	)
	if os.Geteuid() == 0 {
		// Chromium's own sandbox refuses to run as root; the page is
		// this test's.
		opts = append(opts, chromedp.NoSandbox)
	}
	life, cancelLife := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancelLife()
	actx, cancelAlloc := chromedp.NewExecAllocator(life, opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancel()

	if err := chromedp.Do(ctx, chromedp.Navigate(page)); err != nil {
		t.Fatalf("load %s: %v", page, err)
	}
	out, err := chromedp.Run(ctx, chromedp.Poll[string](`document.getElementById('out').textContent !== 'waiting' && document.getElementById('out').textContent`,
		chromedp.WithPollingTimeout(time.Minute), chromedp.WithPollingInterval(50*time.Millisecond)))
	if err != nil {
		t.Fatalf("the page's text: %v", err)
	}
	if out != "echo: ping" {
		t.Errorf("the page says %q, want %q (its WebSocket's echo)", out, "echo: ping")
	}
	// The WebSocket's record is written when it ends: with the browser.
	cancel()
	cancelAlloc()
	waitFor(t, "the audit record of the page's websocket", func() bool {
		for _, r := range h.audit.records(t) {
			if r.Op == "port" && r.Sandbox == s.ID && r.Outcome == "ok" && strings.Contains(r.Detail, "GET /ws") {
				return true
			}
		}
		return false
	})
}
