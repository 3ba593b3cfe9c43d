package cli_test

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/rogpeppe/go-internal/testscript"

	"github.com/airlockrun/airlock/internal/cli"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// scriptEnv is an Env for an in-process airlock command of script ts on
// home: its executor and a snapshot of its environment.
func scriptEnv(ts *testscript.TestScript, ctx context.Context, home string, stdout, stderr io.Writer) *cli.Env {
	vars := map[string]string{"AIRLOCK_HOME": home}
	for _, k := range []string{"AIRLOCK_EXEC", "USER", "HOME", "PATH", "TMPDIR"} {
		vars[k] = ts.Getenv(k)
	}
	self, _ := os.Executable()
	return &cli.Env{
		Env: sandboxcli.Env{
			Ctx: ctx, Stdin: strings.NewReader(""), Stdout: stdout, Stderr: stderr,
			Home: home, Executor: vars["AIRLOCK_EXEC"], Self: self,
		},
		Getenv: func(k string) string { return vars[k] },
	}
}

// syncBuffer collects a background command's output.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer: serve starts `airlock serve` in-process on a loopback port
// and a home of its own (another host's, as far as the script's airlock
// commands know), with two workers that look for runs every 100 ms. It
// sets $SERVER to its URL and $SERVER_HOME to its home, and serves until
// the script ends; its log goes to the script's log.
func startServer(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) != 0 {
		ts.Fatalf("usage: serve")
	}
	// A short home: egress sockets live under it.
	home, err := os.MkdirTemp("", "als-")
	ts.Check(err)
	cfg := filepath.Join(home, "serve.yaml")
	ts.Check(os.WriteFile(cfg, []byte("worker_poll: 100ms\n"), 0o600))
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var log syncBuffer
	done := make(chan int, 1)
	go func() {
		code := cli.Main(scriptEnv(ts, ctx, home, pw, &log), []string{"serve", "--config", cfg, "--listen", "127.0.0.1:0", "--workers", "2", "--log-level", "warn"})
		pw.Close()
		done <- code
	}()
	stop := func() {
		cancel()
		if code := <-done; code != 0 {
			ts.Logf("airlock serve exited with %d", code)
		}
		if s := log.String(); s != "" {
			ts.Logf("airlock serve log:\n%s", s)
		}
		_ = linux.Forget(filepath.Join(home, "run"))
		os.RemoveAll(home)
	}
	sc := bufio.NewScanner(pr)
	if !sc.Scan() {
		go func() { _, _ = io.Copy(io.Discard, pr) }()
		stop()
		ts.Fatalf("airlock serve exited before listening")
	}
	drained := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, pr)
		close(drained)
	}()
	ts.Defer(func() {
		stop()
		<-drained
	})
	m := regexp.MustCompile(`listening on (http://127\.0\.0\.1:\d+) `).FindStringSubmatch(sc.Text())
	if m == nil {
		ts.Fatalf("airlock serve said %q", sc.Text())
	}
	ts.Setenv("SERVER", m[1])
	ts.Setenv("SERVER_HOME", home)
}

// apiKey: apikey VAR TENANT [SCOPE...] creates TENANT (unless it exists)
// and an API key of it with the scopes (default: the default scopes) in
// the store of the server that serve started, and puts the key in $VAR.
func apiKey(ts *testscript.TestScript, neg bool, args []string) {
	if neg || len(args) < 2 || ts.Getenv("SERVER_HOME") == "" {
		ts.Fatalf("usage: apikey VAR TENANT [SCOPE...], after serve")
	}
	run := func(args ...string) (int, string, string) {
		var out, errOut bytes.Buffer
		code := cli.Main(scriptEnv(ts, context.Background(), ts.Getenv("SERVER_HOME"), &out, &errOut), args)
		return code, out.String(), errOut.String()
	}
	if code, _, stderr := run("tenants", "create", args[1]); code != 0 && !strings.Contains(stderr, "already exists") {
		ts.Fatalf("tenants create %s: exit %d: %s", args[1], code, stderr)
	}
	create := []string{"keys", "create", "--tenant", args[1], "--name", "script"}
	for _, s := range args[2:] {
		create = append(create, "--scope", s)
	}
	code, stdout, stderr := run(create...)
	if code != 0 {
		ts.Fatalf("keys create: exit %d: %s", code, stderr)
	}
	ts.Setenv(args[0], strings.TrimSpace(stdout))
}

// normalizers turn what differs between two runs of the same script into
// placeholders: run and key ids, times and durations, the hash chain's
// hashes, the tenant and the scripted model's name (the API names every
// script api.yaml).
var normalizers = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`run_[0-9A-Z]{26}`), "RUN"},
	{regexp.MustCompile(`key_[0-9a-f]{16}`), "KEY"},
	{regexp.MustCompile(`\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?`), "TIME"},
	{regexp.MustCompile(`\b\d{2}:\d{2}:\d{2}\.\d{3}\b`), "TIME"},
	{regexp.MustCompile(`\b\d+(\.\d+)? m?s\b`), "DURATION"},
	{regexp.MustCompile(`"duration_ms":\d+`), `"duration_ms":N`},
	{regexp.MustCompile(`\(last [0-9a-f]{12}\)`), "(last HASH)"},
	{regexp.MustCompile(`"last_hash":"[0-9a-f]{64}"`), `"last_hash":"HASH"`},
	{regexp.MustCompile(`script:[A-Za-z0-9._-]+`), "script:SCRIPT"},
	{regexp.MustCompile(`"tenant":"[^"]*"`), `"tenant":"TENANT"`},
}

// cmpNormalized: cmpnorm FILE1 FILE2 compares two outputs after the
// normalizers; with ! it fails when they are the same.
func cmpNormalized(ts *testscript.TestScript, neg bool, args []string) {
	if len(args) != 2 {
		ts.Fatalf("usage: cmpnorm FILE1 FILE2")
	}
	norm := func(name string) string {
		s := ts.ReadFile(name)
		for _, n := range normalizers {
			s = n.re.ReplaceAllString(s, n.with)
		}
		return s
	}
	a, b := norm(args[0]), norm(args[1])
	switch {
	case a == b && neg:
		ts.Fatalf("%s and %s are the same after normalizing", args[0], args[1])
	case a != b && !neg:
		ts.Logf("%s (normalized):\n%s", args[0], a)
		ts.Logf("%s (normalized):\n%s", args[1], b)
		ts.Fatalf("%s and %s differ", args[0], args[1])
	}
}
