package host

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
)

// TestRotatedSecretScrubbed: the proxies a host starts share its one
// redactor with its run store. A credential set again while a sandbox's
// proxy runs is injected at the next request, and from then on its new
// value is scrubbed from what the run's log records too, not only from
// what the proxy passes back.
func TestRotatedSecretScrubbed(t *testing.T) {
	ctx := context.Background()
	// The upstream echoes the credential it was sent, as a careless API
	// might in an error message.
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "you sent %s", r.Header.Get("Authorization"))
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))

	h, err := New(Config{Home: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	secrets, err := h.Secrets()
	if err != nil {
		t.Fatal(err)
	}
	const old, rotated = "tok-old-0123456789abcdef", "tok-new-fedcba9876543210"
	if err := secrets.Set(ctx, event.LocalTenant, "up_token", secret.NewValue([]byte(old)), nil); err != nil {
		t.Fatal(err)
	}
	doc, err := policy.Parse([]byte(fmt.Sprintf(`
network:
  allow:
    - host: up.test
      ports: [%[1]s]
  resolve:
    - host: up.test:%[1]s
      to: 127.0.0.1:%[1]s
  credentials:
    - host: up.test
      secret: up_token
      header: Authorization
      value: "Bearer {{secret}}"
`, port)))
	if err != nil {
		t.Fatal(err)
	}
	eg, err := h.StartEgress(ctx, EgressOptions{Sandbox: "sb-rotate", Network: &doc.Network, AuditLog: filepath.Join(t.TempDir(), "audit.jsonl")})
	if err != nil {
		t.Fatal(err)
	}
	defer eg.Close()

	if got := get(t, eg.socket, "http://up.test:"+port+"/"); !strings.Contains(got, "[redacted]") || strings.Contains(got, old) {
		t.Fatalf("the proxy passed back %q: want the old value scrubbed", got)
	}
	if err := secrets.Set(ctx, event.LocalTenant, "up_token", secret.NewValue([]byte(rotated)), nil); err != nil {
		t.Fatal(err)
	}
	if got := get(t, eg.socket, "http://up.test:"+port+"/"); strings.Contains(got, rotated) {
		t.Fatalf("the proxy passed back the rotated value: %q", got)
	}

	// The run's log, on the host's store, scrubs the rotated value too.
	st, err := h.Store()
	if err != nil {
		t.Fatal(err)
	}
	id := event.NewRunID(time.Now())
	if _, err := st.CreateRun(ctx, store.Run{ID: id, Tenant: event.LocalTenant, Status: event.StatusQueued}); err != nil {
		t.Fatal(err)
	}
	draft, err := event.New(event.RunPaused{Reason: "the upstream said: you sent Bearer " + rotated})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Append(ctx, id, 1, []event.Event{draft}); err != nil {
		t.Fatal(err)
	}
	evs, err := st.Events(ctx, id, 1, 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if strings.Contains(string(e.Payload), rotated) {
			t.Errorf("event %d holds the rotated credential: %s", e.Seq, e.Payload)
		}
	}
}

// get sends an absolute-form GET through the proxy listening on socket and
// returns the body.
func get(t *testing.T, socket, url string) string {
	t.Helper()
	c, err := net.DialTimeout("unix", socket, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := req.WriteProxy(c); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s through the proxy: %s %s", url, resp.Status, b)
	}
	return string(b)
}
