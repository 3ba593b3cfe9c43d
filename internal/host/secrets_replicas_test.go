package host

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
)

// syncBuf is a log sink two goroutines may write.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestSecretsAcrossReplicas: two hosts (two replicas: homes of their own)
// on one store, given one key file. A credential set through A (the API's
// path, Host.SetSecret) is injected by B's egress proxy, its rotation
// through B by A's; A's older secrets file moves into the store at its
// start and B injects from it too; deleted through B, A's proxy no longer
// has it. No log of either host and no event holds a value. On a shared
// SQLite file and on PostgreSQL.
func TestSecretsAcrossReplicas(t *testing.T) {
	for _, kind := range []string{"sqlite", "postgres"} {
		t.Run(kind, func(t *testing.T) {
			var url string
			if kind == "sqlite" {
				url = "sqlite:" + filepath.Join(t.TempDir(), "shared.db")
			} else {
				url = postgresURL(t)
			}
			testSecretsAcrossReplicas(t, url)
		})
	}
}

func testSecretsAcrossReplicas(t *testing.T, url string) {
	ctx := context.Background()
	var seen sync.Map // Authorization headers the upstream received
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.Header.Get("Authorization"), true)
		fmt.Fprint(w, "ok")
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(up.URL, "http://"))

	// The key every replica is given (a Secret on a cluster).
	keyFile := filepath.Join(t.TempDir(), "secret.key")
	if _, err := secret.KeyFile(keyFile).Key(ctx); err != nil {
		t.Fatal(err)
	}
	const legacy, first, rotated = "tok-legacy-5a1e0c9d", "tok-first-0b7c2f11", "tok-rotated-93de4a60"
	homeA, homeB := t.TempDir(), t.TempDir()
	// What an older A kept in its home: a file, under the same key.
	old, err := secret.Open(filepath.Join(homeA, "secrets"), secret.KeyFile(keyFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := old.Set(ctx, "acme", "legacy_token", secret.NewValue([]byte(legacy)), nil); err != nil {
		t.Fatal(err)
	}

	logs := &syncBuf{}
	open := func(home string) *Host {
		h, err := New(Config{Home: home, Store: url, KeyFile: keyFile, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	a, b := open(homeA), open(homeB)
	if _, err := a.SetSecret(ctx, "acme", "up_token", []byte(first), []string{"up.test"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(homeA, "secrets", "secrets.json")); !os.IsNotExist(err) {
		t.Errorf("A's secrets file is still there after its start: %v", err)
	}

	proxy := func(h *Host, name, secretName string) string {
		t.Helper()
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
      secret: %[2]s
      header: Authorization
      value: "Bearer {{secret}}"
`, port, secretName)))
		if err != nil {
			t.Fatal(err)
		}
		eg, err := h.StartEgress(ctx, EgressOptions{Tenant: "acme", Sandbox: name, Network: &doc.Network, AuditLog: filepath.Join(t.TempDir(), "audit.jsonl")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { eg.Close() })
		return eg.socket
	}
	injected := func(socket, value string) bool {
		t.Helper()
		seen.Delete("Bearer " + value)
		get(t, socket, "http://up.test:"+port+"/")
		_, ok := seen.Load("Bearer " + value)
		return ok
	}

	onB := proxy(b, "sb-b", "up_token")
	if !injected(onB, first) {
		t.Fatal("B's proxy did not inject the credential set through A")
	}
	if _, err := b.SetSecret(ctx, "acme", "up_token", []byte(rotated), []string{"up.test"}); err != nil {
		t.Fatal(err)
	}
	onA := proxy(a, "sb-a", "up_token")
	if !injected(onA, rotated) || !injected(onB, rotated) {
		t.Fatal("the rotation through B was not injected by both proxies")
	}
	if !injected(proxy(b, "sb-b-legacy", "legacy_token"), legacy) {
		t.Fatal("B's proxy did not inject the secret moved from A's file")
	}
	infos, err := a.SecretsOf(ctx, "acme")
	if err != nil || len(infos) != 2 {
		t.Errorf("SecretsOf through A = %+v, %v; want legacy_token and up_token", infos, err)
	}
	if err := b.DeleteSecret(ctx, "acme", "up_token"); err != nil {
		t.Fatal(err)
	}
	sa, err := a.Secrets()
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sa.Get(ctx, "acme", "up_token"); err == nil {
		t.Error("A still has the secret deleted through B")
	}

	for _, v := range []string{legacy, first, rotated} {
		if strings.Contains(logs.String(), v) {
			t.Errorf("a host's log holds %q", v)
		}
	}
	if !strings.Contains(logs.String(), "secrets moved into the store") {
		t.Errorf("A's log does not say it moved its file: %s", logs.String())
	}
}
