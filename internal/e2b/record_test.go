package e2b_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/auth"
	"github.com/airlockrun/airlock/internal/clock"
	"github.com/airlockrun/airlock/internal/e2b"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/store"
)

// record is a sandbox's record in the store, read whole.
type record struct {
	run    store.Run
	events []event.Event
}

// ops returns the sandbox.op events' payloads.
func (r record) ops(t *testing.T) []event.SandboxOp {
	t.Helper()
	var out []event.SandboxOp
	for _, e := range r.events {
		if e.Type == event.TypeSandboxOp {
			p, err := e.Unpack()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, *p.(*event.SandboxOp))
		}
	}
	return out
}

// usages returns the sandbox.usage events, by seq.
func (r record) usages(t *testing.T) map[int64]event.SandboxUsage {
	t.Helper()
	out := map[int64]event.SandboxUsage{}
	for _, e := range r.events {
		if e.Type == event.TypeSandboxUsage {
			p, err := e.Unpack()
			if err != nil {
				t.Fatal(err)
			}
			out[e.Seq] = *p.(*event.SandboxUsage)
		}
	}
	return out
}

func (r record) types() []string {
	var out []string
	for _, e := range r.events {
		out = append(out, string(e.Type))
	}
	return out
}

// recordOf reads the record of sandbox id from st, its hash chain
// verified.
func recordOf(t *testing.T, st store.Store, id string) record {
	t.Helper()
	ctx := context.Background()
	runs, err := st.ListRuns(ctx, store.RunFilter{Kind: store.KindSandbox})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range runs {
		evs, err := st.Events(ctx, r.ID, 1, store.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 || evs[0].Type != event.TypeSandboxCreated || !bytes.Contains(evs[0].Payload, []byte(`"sandbox_id":"`+id+`"`)) {
			continue
		}
		if _, err := store.VerifyRun(ctx, st, r.ID); err != nil {
			t.Fatalf("record of %s: %v", id, err)
		}
		return record{run: r, events: evs}
	}
	t.Fatalf("no record of sandbox %s", id)
	return record{}
}

// TestRecord: every operation on a sandbox, on either plane, is an event
// of its record, in order, and none holds a token, an environment value,
// typed input or file contents; the record's status follows the
// sandbox's life.
func TestRecord(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	const envValue, input, contents = "env-Zq7VALUE", "typed-Zq7INPUT", "file-Zq7CONTENTS"
	s := h.create("alpha", map[string]any{"envVars": map[string]string{"DB_PASSWORD": envValue}, "metadata": map[string]string{"user": "alice"}})

	r := parseRun(t, h.stream(s, "process.Process/Start", bash("test \"$DB_PASSWORD\" = "+envValue+" && echo same"), nil))
	if r.stdout != "same\n" {
		t.Fatalf("run = %+v", r)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	var cat runResult
	go func() {
		defer wg.Done()
		cat = parseRun(t, h.stream(s, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/bin/cat"}, "stdin": true}, nil))
	}()
	pid := h.onlyProcess(s, "cat to run")
	for range 3 {
		if res := h.unary(s, "process.Process/SendInput", map[string]any{
			"process": map[string]any{"pid": pid},
			"input":   map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte(input + "\n"))},
		}); res.status != 200 {
			t.Fatalf("SendInput: %s", res)
		}
	}
	if res := h.unary(s, "process.Process/CloseStdin", map[string]any{"process": map[string]any{"pid": pid}}); res.status != 200 {
		t.Fatalf("CloseStdin: %s", res)
	}
	wg.Wait()
	if cat.stdout != strings.Repeat(input+"\n", 3) {
		t.Fatalf("cat = %+v", cat)
	}
	// Input that ends its process: the input is in the log before the
	// end it caused.
	wg.Add(1)
	var head runResult
	go func() {
		defer wg.Done()
		head = parseRun(t, h.stream(s, "process.Process/Start", map[string]any{"process": map[string]any{"cmd": "/usr/bin/head", "args": []string{"-n", "1"}}, "stdin": true}, nil))
	}()
	pid = h.onlyProcess(s, "head to run")
	if res := h.unary(s, "process.Process/SendInput", map[string]any{
		"process": map[string]any{"pid": pid},
		"input":   map[string]any{"stdin": base64.StdEncoding.EncodeToString([]byte(input + "\n"))},
	}); res.status != 200 {
		t.Fatalf("SendInput: %s", res)
	}
	wg.Wait()
	if head.stdout != input+"\n" {
		t.Fatalf("head = %+v", head)
	}
	oct := envdHeaders(s)
	oct["Content-Type"] = "application/octet-stream"
	if res := h.do("POST", h.envdURL+"/files?path=a.txt", oct, strings.NewReader(contents)); res.status != 200 {
		t.Fatalf("write: %s", res)
	}
	if res := h.do("GET", h.envdURL+"/files?path=a.txt", envdHeaders(s), nil); res.status != 200 || string(res.body) != contents {
		t.Fatalf("read: %s", res)
	}
	for _, c := range []struct {
		method string
		msg    any
	}{
		{"filesystem.Filesystem/MakeDir", map[string]any{"path": "d"}},
		{"filesystem.Filesystem/Move", map[string]any{"source": "a.txt", "destination": "d/b.txt"}},
		{"filesystem.Filesystem/Stat", map[string]any{"path": "d/b.txt"}},
		{"filesystem.Filesystem/Remove", map[string]any{"path": "d/b.txt"}},
		{"filesystem.Filesystem/Stat", map[string]any{"path": "d/b.txt"}},
	} {
		h.unary(s, c.method, c.msg)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/timeout", map[string]any{"timeout": 600}); res.status != 204 {
		t.Fatalf("timeout: %s", res)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	if rec := recordOf(t, h.store, s.ID); rec.run.Status != event.StatusPaused || rec.run.Kind != store.KindSandbox {
		t.Errorf("paused sandbox's record: kind %q status %s, want sandbox, paused", rec.run.Kind, rec.run.Status)
	}
	if res := h.api("alpha", "POST", "/sandboxes/"+s.ID+"/connect", map[string]any{}); res.status != 201 {
		t.Fatalf("resume: %s", res)
	}
	if rec := recordOf(t, h.store, s.ID); rec.run.Status != event.StatusRunning {
		t.Errorf("resumed sandbox's record: status %s, want running", rec.run.Status)
	}
	// Another tenant's calls on the id land in no one's record.
	h.api("beta", "GET", "/sandboxes/"+s.ID, nil)
	h.api("beta", "DELETE", "/sandboxes/"+s.ID, nil)
	if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}

	rec := recordOf(t, h.store, s.ID)
	if rec.run.Status != event.StatusCancelled || rec.run.Tenant != "alpha" || !rec.run.Finished.After(rec.run.Created) {
		t.Errorf("killed sandbox's record = %+v, want alpha's, cancelled", rec.run)
	}
	types := rec.types()
	if types[0] != string(event.TypeSandboxCreated) || types[len(types)-1] != string(event.TypeSandboxDestroyed) {
		t.Errorf("record events %v: want sandbox.created first, sandbox.destroyed last", types)
	}
	for _, want := range []event.Type{event.TypeSandboxProvisioned, event.TypeRunPaused, event.TypeRunResumed, event.TypeSandboxUsage} {
		if !slices.Contains(types, string(want)) {
			t.Errorf("record events %v: no %s", types, want)
		}
	}
	var ops []string
	for _, op := range rec.ops(t) {
		ops = append(ops, op.Op+":"+op.Outcome)
	}
	// The data plane's in the order they happened (the log keeps it,
	// batched or not); the control plane's (recorded as their answer
	// goes out) there too.
	want := []string{
		"process.start:ok", "process.end:exit:0", "process.start:ok", "process.input:ok", "process.input:ok", "process.input:ok",
		"process.close_stdin:ok", "process.end:exit:0", "process.start:ok", "process.input:ok", "process.end:exit:0", "files.write:ok", "files.read:ok", "files.mkdir:ok", "files.move:ok",
		"files.stat:ok", "files.remove:ok", "files.stat:not_found",
	}
	if !isSubsequence(want, ops) {
		t.Errorf("ops = %v\nwant in this order %v", ops, want)
	}
	for _, op := range []string{"sandbox.boot:ok", "sandbox.timeout:ok", "sandbox.pause:ok", "sandbox.resume:ok", "sandbox.connect:ok", "sandbox.kill:ok"} {
		if !slices.Contains(ops, op) {
			t.Errorf("ops = %v: no %s", ops, op)
		}
	}
	for _, op := range rec.ops(t) {
		if op.Op == "sandbox.kill" && op.KeyID == "" {
			t.Errorf("the kill op %+v names no key", op)
		}
	}
	p, err := rec.events[0].Unpack()
	if err != nil {
		t.Fatal(err)
	}
	if c := p.(*event.SandboxCreated); c.Template != "base" || c.Metadata["user"] != "alice" || !slices.Equal(c.EnvKeys, []string{"DB_PASSWORD"}) || c.KeyID == "" {
		t.Errorf("sandbox.created = %+v", c)
	}
	for _, e := range rec.events {
		for _, secret := range []string{envValue, input, contents, s.Token, h.keys["alpha"]} {
			if bytes.Contains(e.Payload, []byte(secret)) {
				t.Errorf("event %d (%s) holds %q: %s", e.Seq, e.Type, secret, e.Payload)
			}
		}
	}
	// The record is the tenant's run list's? No: agent runs only.
	if runs, err := store.ForTenant(h.store, "alpha").ListRuns(t.Context(), store.RunFilter{}); err != nil || len(runs) != 0 {
		t.Errorf("alpha's agent runs = %d, %v, want none", len(runs), err)
	}
}

// isSubsequence reports whether want appears in got in order.
func isSubsequence(want, got []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

// TestRecordBatching: a stream of operations is appended in batches, not
// a commit each, and none is lost or reordered.
func TestRecordBatching(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	const n = 100
	for i := range n {
		h.unary(s, "filesystem.Filesystem/Stat", map[string]any{"path": "f" + strconv.Itoa(i)})
	}
	if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}
	rec := recordOf(t, h.store, s.ID)
	var got []string
	var last time.Time
	for _, e := range rec.events {
		if e.Type != event.TypeSandboxOp {
			continue
		}
		p, _ := e.Unpack()
		if op := p.(*event.SandboxOp); op.Op == "files.stat" {
			got = append(got, op.Detail)
		}
		if e.Time.Before(last) {
			t.Errorf("event %d is older than the one before", e.Seq)
		}
		last = e.Time
	}
	var want []string
	for i := range n {
		want = append(want, "/home/user/f"+strconv.Itoa(i))
	}
	if !slices.Equal(got, want) {
		t.Fatalf("stat ops = %v\nwant %v", got, want)
	}
}

// TestRateLimits: over its bucket, an API key gets 429 with Retry-After
// (the SDK's RateLimitError), and so does a sandbox's data plane (a
// Connect call as resource_exhausted); other keys and sandboxes are not
// affected, and requests without the sandbox's token spend nothing.
func TestRateLimits(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := newHarness(t, harnessOptions{clock: clk, config: e2b.Config{APIRate: 1, APIBurst: 3, SandboxRate: 2, SandboxBurst: 3}})
	s := h.create("alpha", nil)                                                // 1 of alpha's 3 calls
	other := h.create("beta", nil)                                             // beta's own bucket
	if res := h.api("alpha", "GET", "/v2/sandboxes", nil); res.status != 200 { // 2
		t.Fatalf("list: %s", res)
	}
	if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); res.status != 200 { // 3
		t.Fatalf("info: %s", res)
	}
	res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil)
	if res.status != 429 || res.header.Get("Retry-After") != "1" || !strings.Contains(string(res.body), `"code":429`) {
		t.Errorf("4th call in a burst of 3 = %s (Retry-After %q), want 429, Retry-After 1, code 429", res, res.header.Get("Retry-After"))
	}
	if res := h.api("beta", "GET", "/sandboxes/"+other.ID, nil); res.status != 200 {
		t.Errorf("another key's call = %s, want 200", res)
	}
	clk.Advance(time.Second)
	if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); res.status != 200 {
		t.Errorf("a call a second later = %s, want 200", res)
	}

	wrong := s
	wrong.Token = strings.Repeat("0", 64)
	for range 10 {
		if res := h.do("GET", h.envdURL+"/health", envdHeaders(wrong), nil); res.status != 502 {
			t.Fatalf("health with a wrong token = %s, want 502", res)
		}
	}
	for i := range 3 {
		if res := h.do("GET", h.envdURL+"/health", envdHeaders(s), nil); res.status != 204 {
			t.Fatalf("health %d = %s, want 204", i, res)
		}
	}
	res = h.do("GET", h.envdURL+"/health", envdHeaders(s), nil)
	if res.status != 429 || res.header.Get("Retry-After") != "1" || !strings.Contains(string(res.body), `"code":429`) {
		t.Errorf("4th data-plane call = %s, want 429 with Retry-After 1", res)
	}
	res = h.unary(s, "filesystem.Filesystem/Stat", map[string]any{"path": "/"})
	if res.status != 429 || !strings.Contains(string(res.body), `"code":"resource_exhausted"`) || res.header.Get("Retry-After") == "" {
		t.Errorf("Connect call over the limit = %s, want 429 resource_exhausted", res)
	}
	if res := h.do("GET", h.envdURL+"/health", envdHeaders(other), nil); res.status != 204 {
		t.Errorf("another sandbox's call = %s, want 204", res)
	}
	clk.Advance(time.Second)
	if res := h.do("GET", h.envdURL+"/health", envdHeaders(s), nil); res.status != 204 {
		t.Errorf("data-plane call a second later = %s, want 204", res)
	}
	if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}
	var limited int
	for _, op := range recordOf(t, h.store, s.ID).ops(t) {
		if op.Outcome == "limited" {
			limited++
		}
	}
	if limited != 3 {
		t.Errorf("%d limited ops in the record, want 3 (one API call, two data-plane calls)", limited)
	}
}

// meterConfig prices only a sandbox's seconds, a millicredit each, and
// meters only when the test says.
var meterConfig = e2b.Config{MeterInterval: time.Hour, Price: e2b.Price{SandboxSecond: 1000, CPUSecond: -1, MemoryGiBSecond: -1}}

// debits returns tenant's debits.
func debits(t *testing.T, st store.Store, tenant string) []store.LedgerEntry {
	t.Helper()
	es, err := st.LedgerEntries(context.Background(), tenant, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return slices.DeleteFunc(es, func(e store.LedgerEntry) bool { return e.Kind != store.LedgerDebit })
}

func grant(t *testing.T, st store.Store, tenant string, micro int64) {
	t.Helper()
	if _, err := st.AddLedgerEntry(context.Background(), store.LedgerEntry{Tenant: tenant, Kind: store.LedgerGrant, Amount: micro, Note: "test"}); err != nil {
		t.Fatal(err)
	}
}

// TestMetering: a metered tenant's sandboxes are debited at each meter
// tick and at each boot's end, every debit linked to its sandbox.usage
// event; once the balance is spent its running sandboxes are killed (and
// that is recorded), and it may create none. An unmetered tenant's usage
// is recorded, not debited.
func TestMetering(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := newHarness(t, harnessOptions{clock: clk, config: meterConfig})
	grant(t, h.store, "alpha", 100_000) // a tenth of a credit: 100 sandbox-seconds
	s := h.create("alpha", map[string]any{"timeout": 3600})
	free := h.create("beta", map[string]any{"timeout": 3600})
	clk.Advance(30 * time.Second)
	h.srv.Meter(t.Context())
	rec := recordOf(t, h.store, s.ID)
	us := rec.usages(t)
	if len(us) != 1 {
		t.Fatalf("usages after a tick = %v, want one", us)
	}
	for seq, u := range us {
		if u.SandboxMS != 30000 || u.CostMicroCredits != 30000 || u.SandboxID != s.ID || u.MemoryMiBMS != 1024*30000 {
			t.Errorf("usage = %+v, want 30 s, 30000 micro-credits", u)
		}
		if ds := debits(t, h.store, "alpha"); len(ds) != 1 || ds[0].Seq != seq || ds[0].RunID != rec.run.ID || ds[0].Amount != 30000 {
			t.Errorf("debits = %+v, want one of 30000 for seq %d of %s", ds, seq, rec.run.ID)
		}
	}
	if bal, _ := h.store.Balance(t.Context(), "alpha"); bal != 70_000 {
		t.Errorf("balance = %d, want 70000", bal)
	}
	if us := recordOf(t, h.store, free.ID).usages(t); len(us) != 1 {
		t.Errorf("an unmetered tenant's usages = %v, want one recorded", us)
	}
	if ds := debits(t, h.store, "beta"); len(ds) != 0 {
		t.Errorf("an unmetered tenant was debited: %+v", ds)
	}

	clk.Advance(90 * time.Second) // 90000 more: the balance is spent
	h.srv.Meter(t.Context())
	if res := h.api("alpha", "GET", "/sandboxes/"+s.ID, nil); res.status != 404 {
		t.Errorf("a sandbox of a tenant without credits = %s, want 404 (killed)", res)
	}
	if res := h.do("GET", h.envdURL+"/health", envdHeaders(s), nil); res.status != 502 {
		t.Errorf("its data plane = %s, want 502", res)
	}
	rec = recordOf(t, h.store, s.ID)
	if rec.run.Status != event.StatusFailed || !slices.Contains(rec.types(), string(event.TypeBudgetExhausted)) {
		t.Errorf("record = %s %v, want failed with budget.exhausted", rec.run.Status, rec.types())
	}
	last, _ := rec.events[len(rec.events)-1].Unpack()
	if d, ok := last.(*event.SandboxDestroyed); !ok || d.Reason != "credits" {
		t.Errorf("last event = %+v, want sandbox.destroyed for credits", last)
	}
	var total int64
	for seq, u := range rec.usages(t) {
		total += u.CostMicroCredits
		found := false
		for _, d := range debits(t, h.store, "alpha") {
			found = found || (d.Seq == seq && d.Amount == u.CostMicroCredits)
		}
		if !found && u.CostMicroCredits > 0 {
			t.Errorf("usage at seq %d (%d) was not debited", seq, u.CostMicroCredits)
		}
	}
	if total != 120_000 {
		t.Errorf("usage cost %d in all, want 120000", total)
	}
	res := h.api("alpha", "POST", "/v2/sandboxes", map[string]any{})
	if res.status != 429 || res.header.Get("Retry-After") != "" || !strings.Contains(string(res.body), "credits") {
		t.Errorf("create without credits = %s (Retry-After %q), want 429 without Retry-After", res, res.header.Get("Retry-After"))
	}
	if res := h.api("beta", "GET", "/sandboxes/"+free.ID, nil); res.status != 200 {
		t.Errorf("an unmetered tenant's sandbox = %s, want it running", res)
	}
	grant(t, h.store, "alpha", 1_000_000)
	h.create("alpha", nil)
}

// failingLedger is a store whose debits fail, as a store that went away
// between a usage's record and its debit would.
type failingLedger struct{ store.Store }

func (f failingLedger) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	if e.Kind == store.LedgerDebit {
		return e, errors.New("the ledger is down")
	}
	return f.Store.AddLedgerEntry(ctx, e)
}

// serve crashes h's server and starts another on st (h's store, maybe
// wrapped) and the same StateDir, as a restarted process would; h's
// requests go to it from then on.
func (h *harness) serve(t *testing.T, o harnessOptions, st store.Store) {
	t.Helper()
	h.srv.Crash()
	// A crashed process writes nothing more: stop what the crashed server
	// still runs (its loops, its listeners' handlers) before another
	// takes its records back.
	h.stop()
	dir := filepath.Dir(h.store.Path())
	b, err := linux.New(linux.Config{Executor: executorPath, StateDir: filepath.Join(dir, "run-"+strconv.FormatInt(time.Now().UnixNano(), 36))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	var now func() time.Time
	if o.clock != nil {
		now = o.clock.Now
	}
	h.srv, err = e2b.New(e2b.Options{
		Now: now, Config: o.config, Backend: b, Keys: auth.NewKeys(st, nil), Store: st,
		Network: &testNetwork{dir: dir, secrets: testSecrets{"api-token": canary}}, Checkpoints: checkpoints(t, dir, o), StateDir: filepath.Join(dir, "e2b"), Audit: h.audit, Images: o.images, Holds: o.holds,
		Logger: slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan struct{})
	srv := h.srv
	go func() {
		defer close(ran)
		_ = srv.Run(ctx)
	}()
	h.listen(t, cancel, ran)
	// Answered once the server has taken back the store's records.
	if res := h.do("GET", h.apiURL+"/health", nil, nil); res.status != 200 {
		t.Fatalf("health: %s", res)
	}
}

// createRaw makes a sandbox without a cleanup (the test's servers come
// and go).
func (h *harness) createRaw(tenant string, body map[string]any) sbx {
	h.t.Helper()
	res := h.api(tenant, "POST", "/v2/sandboxes", body)
	if res.status != http.StatusCreated {
		h.t.Fatalf("create: %s", res)
	}
	var s sbx
	if err := json.Unmarshal(res.body, &s); err != nil {
		h.t.Fatal(err)
	}
	return s
}

// TestRestart: a server that starts again closes the records of the
// sandboxes it ran when it died (so list shows no ghost), keeps the
// paused ones paused and resumable, and settles the debits its earlier
// life recorded but did not make, each exactly once, however often it
// restarts.
func TestRestart(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	o := harnessOptions{clock: clk, config: meterConfig}
	h := newHarness(t, o)
	grant(t, h.store, "alpha", 10_000_000)
	h.serve(t, o, failingLedger{h.store}) // its debits fail

	paused := h.createRaw("alpha", map[string]any{"timeout": 3600, "envVars": map[string]string{"KEPT": "k1"}})
	oct := envdHeaders(paused)
	oct["Content-Type"] = "application/octet-stream"
	if res := h.do("POST", h.envdURL+"/files?path=keep.txt", oct, strings.NewReader("kept\n")); res.status != 200 {
		t.Fatalf("write: %s", res)
	}
	running := h.createRaw("alpha", map[string]any{"timeout": 3600})
	clk.Advance(30 * time.Second)
	if res := h.api("alpha", "POST", "/sandboxes/"+paused.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	h.srv.Meter(t.Context())
	if ds := debits(t, h.store, "alpha"); len(ds) != 0 {
		t.Fatalf("debits through a failing ledger: %+v", ds)
	}
	recorded := map[string]int64{} // "run/seq" -> cost
	for _, id := range []string{paused.ID, running.ID} {
		rec := recordOf(t, h.store, id)
		for seq, u := range rec.usages(t) {
			recorded[rec.run.ID+"/"+strconv.FormatInt(seq, 10)] = u.CostMicroCredits
		}
	}
	if len(recorded) != 2 {
		t.Fatalf("usages recorded = %v, want the paused one's last and the running one's tick", recorded)
	}

	settled := func() {
		t.Helper()
		ds := debits(t, h.store, "alpha")
		got := map[string]int64{}
		for _, d := range ds {
			got[d.RunID+"/"+strconv.FormatInt(d.Seq, 10)] += d.Amount
		}
		if len(ds) != len(recorded) || len(got) != len(recorded) {
			t.Errorf("debits = %+v, want one per recorded usage %v", ds, recorded)
		}
		for k, v := range recorded {
			if got[k] != v {
				t.Errorf("debit of %s = %d, want %d", k, got[k], v)
			}
		}
	}

	h.serve(t, o, h.store) // the first dies with a sandbox running
	var rows []struct {
		ID    string `json:"sandboxID"`
		State string `json:"state"`
	}
	if err := json.Unmarshal(h.api("alpha", "GET", "/v2/sandboxes", nil).body, &rows); err != nil || len(rows) != 1 || rows[0].ID != paused.ID || rows[0].State != "paused" {
		t.Errorf("list after a restart = %+v, %v, want only the paused sandbox", rows, err)
	}
	if res := h.api("alpha", "GET", "/sandboxes/"+running.ID, nil); res.status != 404 {
		t.Errorf("a sandbox that died with its server = %s, want 404", res)
	}
	rec := recordOf(t, h.store, running.ID)
	if rec.run.Status != event.StatusFailed || rec.events[len(rec.events)-1].Type != event.TypeSandboxLost {
		t.Errorf("its record: %s %v, want failed, ending in sandbox.lost", rec.run.Status, rec.types())
	}
	settled()

	res := h.api("alpha", "POST", "/sandboxes/"+paused.ID+"/connect", map[string]any{"timeout": 600})
	var again sbx
	if res.status != 201 || json.Unmarshal(res.body, &again) != nil || again.Token != paused.Token {
		t.Fatalf("resume after a restart = %s, want 201 with the same token", res)
	}
	if res := h.do("GET", h.envdURL+"/files?path="+url.QueryEscape("keep.txt"), envdHeaders(paused), nil); res.status != 200 || string(res.body) != "kept\n" {
		t.Errorf("read after resume = %s, want the file kept", res)
	}
	r := parseRun(t, h.stream(paused, "process.Process/Start", bash("echo $KEPT"), nil))
	if r.stdout != "k1\n" {
		t.Errorf("environment after resume = %+v, want KEPT=k1", r)
	}

	h.serve(t, o, h.store) // and again, with it running
	if rec := recordOf(t, h.store, paused.ID); rec.run.Status != event.StatusFailed {
		t.Errorf("the resumed sandbox's record after its server died: %s, want failed", rec.run.Status)
	}
	settled() // nothing charged twice
	if res := h.api("alpha", "GET", "/v2/sandboxes", nil); string(res.body) != "[]" {
		t.Errorf("list = %s, want none", res)
	}
}

// TestRecordEgress: the egress proxy's decisions on a sandbox's requests,
// denials too, are events of its record, without the credential the proxy
// injected.
func TestRecordEgress(t *testing.T) {
	h := newHarness(t, harnessOptions{trust: true})
	needCurl(t)
	h.putPolicy("alpha", "egress", h.upstream.egressPolicy())
	s := h.createRaw("alpha", map[string]any{"templateID": "egress"})
	port := itoa(h.upstream.port)
	parseRun(t, h.stream(s, "process.Process/Start", bash("curl -sS --max-time 20 http://allowed.test:"+port+"/ ; curl -sS --max-time 20 http://denied.test:"+port+"/"), nil))
	if res := h.api("alpha", "DELETE", "/sandboxes/"+s.ID, nil); res.status != 204 {
		t.Fatalf("kill: %s", res)
	}
	rec := recordOf(t, h.store, s.ID)
	if len(rec.run.Policy) == 0 || rec.run.PolicyHash != store.DocumentHash(rec.run.Policy) {
		t.Errorf("record policy %q hash %q: want the template's document and its hash", rec.run.Policy, rec.run.PolicyHash)
	}
	decisions := map[string]string{}
	for _, e := range rec.events {
		if bytes.Contains(e.Payload, []byte(canary)) {
			t.Errorf("event %d holds the injected credential", e.Seq)
		}
		if e.Type == event.TypeEgressDecision {
			p, _ := e.Unpack()
			d := p.(*event.EgressDecision)
			decisions[d.Host] = d.Decision
		}
	}
	if decisions["allowed.test"] != "allowed" || decisions["denied.test"] != "denied" {
		t.Errorf("egress decisions in the record = %v, want allowed.test allowed and denied.test denied", decisions)
	}
}

// TestRecordEnds: each way a sandbox ends gives its record a final status
// and an end event saying why, after its last usage.
func TestRecordEnds(t *testing.T) {
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	h := newHarness(t, harnessOptions{clock: clk, config: meterConfig})
	timedOut := h.createRaw("alpha", map[string]any{"timeout": 10})
	killed := h.createRaw("alpha", nil)
	pausedKilled := h.createRaw("alpha", nil)
	if res := h.api("alpha", "POST", "/sandboxes/"+pausedKilled.ID+"/pause", map[string]any{}); res.status != 204 {
		t.Fatalf("pause: %s", res)
	}
	clk.Advance(15 * time.Second)
	h.srv.Reap(t.Context())
	for _, id := range []string{killed.ID, pausedKilled.ID} {
		if res := h.api("alpha", "DELETE", "/sandboxes/"+id, nil); res.status != 204 {
			t.Fatalf("kill: %s", res)
		}
	}
	tests := []struct {
		id     string
		status event.Status
		reason string
		usage  int64 // the last usage's sandbox ms
	}{
		{timedOut.ID, event.StatusCompleted, "timeout", 15000},
		{killed.ID, event.StatusCancelled, "killed", 15000},
		{pausedKilled.ID, event.StatusCancelled, "killed", 0},
	}
	for _, tt := range tests {
		rec := recordOf(t, h.store, tt.id)
		last, err := rec.events[len(rec.events)-1].Unpack()
		if err != nil {
			t.Fatal(err)
		}
		d, ok := last.(*event.SandboxDestroyed)
		if rec.run.Status != tt.status || !ok || d.Reason != tt.reason || d.SandboxID != tt.id {
			t.Errorf("record of %s: %s, last %+v; want %s, sandbox.destroyed %s", tt.id, rec.run.Status, last, tt.status, tt.reason)
		}
		var lastUsage event.SandboxUsage
		var at int64
		for seq, u := range rec.usages(t) {
			if seq > at {
				at, lastUsage = seq, u
			}
		}
		if tt.usage > 0 && (lastUsage.SandboxMS != tt.usage || !lastUsage.Final) {
			t.Errorf("record of %s: last usage %+v, want a final one of %d ms", tt.id, lastUsage, tt.usage)
		}
	}
}
