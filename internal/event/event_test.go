package event_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 123456789, time.UTC)

// chain builds a sealed log of n events for run id.
func chain(t *testing.T, id string, n int) []event.Event {
	t.Helper()
	var out []event.Event
	var prev event.Hash
	for i := range n {
		d, err := event.New(event.ToolFinished{Step: i, CallID: "c", Tool: "run_command", Outcome: "exited"})
		if err != nil {
			t.Fatal(err)
		}
		d.Payload, err = event.CanonicalPayload(d.Payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		d.Time = t0.Add(time.Duration(i) * time.Millisecond)
		event.Seal(id, int64(i), prev, &d)
		prev = d.Hash
		out = append(out, d)
	}
	return out
}

func TestTypeValid(t *testing.T) {
	tests := []struct {
		typ  event.Type
		want bool
	}{
		{"run.created", true},
		{"retry", true},
		{"a.b_2.c", true},
		{"", false},
		{".run", false},
		{"run.", false},
		{"run..created", false},
		{"Run.created", false},
		{"run.2x", false},
		{"run._x", false},
		{"run created", false},
		{"run-created", false},
		{event.Type(strings.Repeat("a", event.MaxTypeLen)), true},
		{event.Type(strings.Repeat("a", event.MaxTypeLen+1)), false},
	}
	for _, tt := range tests {
		if got := tt.typ.Valid(); got != tt.want {
			t.Errorf("Type(%q).Valid() = %v, want %v", tt.typ, got, tt.want)
		}
	}
}

// TestPayloads checks every known type: its name is valid, and its payload
// struct survives New, CanonicalPayload and Unpack.
func TestPayloads(t *testing.T) {
	exit := 3
	samples := []event.Payload{
		event.RunCreated{Tenant: "acme", Task: "fix <the> bug & ship", Model: "anthropic:claude", PolicyHash: "sha256:ab", ParentRunID: event.NewRunID(t0), ParentSeq: 4, ParentHash: "ff"},
		event.RunStarted{Host: "h:1"},
		event.RunPaused{Reason: "user", Snapshots: []string{"sha256:00"}},
		event.RunResumed{Reason: "recovery", FromSeq: 9},
		event.RunCancelled{Reason: "ctrl-c", By: "signal"},
		event.RunCompleted{Summary: "done", Steps: 3, Usage: event.Usage{InputTokens: 10, OutputTokens: 5}},
		event.RunFailed{Status: event.StatusFailedVerification, Reason: "tests fail", Steps: 2},
		event.RunForked{ChildRunID: "run_01J0000000000000000000000", AtStep: 2, AtSeq: 9},
		event.PolicyResolved{PolicyHash: "sha256:cd", Source: "policy.yaml"},
		event.SandboxProvisioned{Sandbox: "main", SandboxID: "sb1", Backend: "linux", DurationMS: 70},
		event.SandboxLost{Sandbox: "main", SandboxID: "sb1", Reason: "oom"},
		event.SandboxDestroyed{Sandbox: "main", SandboxID: "sb1"},
		event.ModelRequest{Step: 1, Provider: "scripted", Model: "demo", Attempt: 1, Messages: 2},
		event.ModelResponse{
			Step: 1, Provider: "scripted", Model: "demo", Text: "hi", StopReason: "tool_use",
			ToolCalls: []event.ToolCall{{ID: "c1", Name: "run_command", Args: json.RawMessage(`{"command":"go test ./..."}`)}},
			Usage:     event.Usage{InputTokens: 100, OutputTokens: 20, CacheReadTokens: 7, CostMicroUSD: 12},
		},
		event.ToolProposed{Step: 1, CallID: "c1", Tool: "edit_file", Args: json.RawMessage(`{"path":"calc.go"}`)},
		event.PolicyDecision{Step: 1, CallID: "c1", Tool: "edit_file", Decision: event.DecisionAllow},
		event.ToolStarted{Step: 1, CallID: "c1", Tool: "run_command", Place: event.PlaceSandbox, Sandbox: "main"},
		event.ToolFinished{
			Step: 1, CallID: "c1", Tool: "run_command", Outcome: "exited", ExitCode: &exit, Output: "FAIL",
			DurationMS: 12, WallMS: 10, Resources: event.Resources{UserMS: 4, SystemMS: 1, MaxRSSKB: 2048},
		},
		event.ToolUncertain{Step: 2, CallID: "c2", Tool: "http", StartedSeq: 17, Reason: "host restarted"},
		event.EgressDecision{Sandbox: "main", Decision: "denied", Method: "CONNECT", Host: "evil.example", Port: 443},
		event.ArtifactStored{Name: "patch", Digest: "sha256:00", Size: 10, MediaType: "text/x-diff", Kind: "patch"},
		event.SnapshotTaken{Step: 2, Sandbox: "main", Digest: "sha256:01", Size: 99, Base: "sha256:00"},
		event.WorkspaceFetched{Sandbox: "main", URL: "https://git.example/a.git", Ref: "v1", Commit: "0123abcd", Digest: "sha256:02", Size: 10},
		event.Retry{Step: 2, What: "model", Attempt: 2, Reason: "429", DelayMS: 500},
		event.VerificationResult{Passed: false, Checks: []event.Check{{Name: "go test", Kind: "command", ExitCode: &exit}}},
		event.BudgetExhausted{Budget: "steps", Limit: 50, Used: 50},
		event.ApprovalRequested{ApprovalID: "ap1", Action: "egress evil.example:443", Expires: t0},
		event.ApprovalDecided{ApprovalID: "ap1", Decision: "approved", By: "alice"},
		event.LLMCall{
			Sandbox: "sb-1", API: "openai.chat", Model: "fast", Upstream: "local", UpstreamModel: "llama3", Stream: true,
			Usage: event.Usage{InputTokens: 120, OutputTokens: 30, CacheReadTokens: 100}, CostMicroCredits: 42, LatencyMS: 812, TTFTMS: 95,
			Status: 200, Outcome: event.LLMOutcomeBudgetExhausted, Budget: "llm_tokens", UsageEstimated: true,
			RequestBody: `{"model":"fast"}`, ResponseBody: "data: {}",
		},
		event.SandboxCreated{
			SandboxID: "sb-0a1b", Template: "base", TemplateSource: "default policy", KeyID: "k1",
			Metadata: map[string]string{"user": "alice"}, EnvKeys: []string{"FOO"}, Internet: true, TimeoutMS: 300000,
			CPUs: 1.5, MemoryBytes: 1 << 30, DiskBytes: 1 << 30, Host: "e2b/x",
		},
		event.SandboxOp{Op: "process.input", Outcome: "ok", KeyID: "k1", Detail: "pid 1: 3 bytes", Count: 2},
		event.SandboxUsage{
			SandboxID: "sb-0a1b", Start: t0, End: t0.Add(30 * time.Second), SandboxMS: 30000, CPUMS: 1200,
			MemoryMiBMS: 1024 * 30000, CostMicroCredits: 450, Final: true,
		},
		event.SandboxEvent{Source: event.SourceSandbox, Sandbox: "main", Kind: "progress", Message: "running tests", Pct: ptr(40.0)},
		event.SandboxEvent{Source: event.SourceSandbox, Sandbox: "main", Kind: "coverage", Data: json.RawMessage(`{"pct":81.5}`)},
		event.SandboxEventsDropped{Sandbox: "main", ExecRate: 99000, Malformed: 2, Artifacts: 1},
	}
	seen := map[event.Type]bool{}
	for _, p := range samples {
		typ := p.EventType()
		t.Run(string(typ), func(t *testing.T) {
			if !typ.Valid() || !typ.Known() {
				t.Fatalf("Type(%q): Valid() = %v, Known() = %v, want true, true", typ, typ.Valid(), typ.Known())
			}
			seen[typ] = true
			d, err := event.New(p)
			if err != nil {
				t.Fatalf("New(%T) = %v", p, err)
			}
			d.Payload, err = event.CanonicalPayload(d.Payload, nil)
			if err != nil {
				t.Fatalf("CanonicalPayload(New(%T)) = %v", p, err)
			}
			got, err := d.Unpack()
			if err != nil {
				t.Fatalf("Unpack() = %v", err)
			}
			if want := reflect.New(reflect.TypeOf(p)); true {
				want.Elem().Set(reflect.ValueOf(p))
				// Args round-trip through canonical form, which is compact
				// already in the samples, so the structs compare equal.
				if !reflect.DeepEqual(got, want.Interface()) {
					t.Errorf("Unpack() = %+v, want %+v", got, want.Interface())
				}
			}
		})
	}
	for _, typ := range event.Types() {
		if !seen[typ] {
			t.Errorf("no sample payload for known type %q", typ)
		}
	}
	if _, err := (event.Event{Type: "x.future", Payload: json.RawMessage(`{}`)}).Unpack(); !errors.Is(err, event.ErrUnknownType) {
		t.Errorf("Unpack(unknown type) = %v, want ErrUnknownType", err)
	}
}

// TestPayloadFieldNames pins the JSON names that the CLI's --json output
// and stored logs rely on.
func TestPayloadFieldNames(t *testing.T) {
	exit := 0
	tests := []struct {
		p    event.Payload
		want string
	}{
		{
			event.ToolFinished{Step: 1, CallID: "c", Tool: "t", Outcome: "exited", ExitCode: &exit, DurationMS: 5},
			`{"step":1,"call_id":"c","tool":"t","outcome":"exited","exit_code":0,"duration_ms":5,"resources":{}}`,
		},
		{
			event.ModelResponse{Step: 2, Provider: "p", Model: "m", StopReason: "end_turn", Usage: event.Usage{InputTokens: 1, OutputTokens: 2}},
			`{"step":2,"provider":"p","model":"m","stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2},"duration_ms":0}`,
		},
		{
			event.RunFailed{Status: event.StatusFailed, Reason: "r"},
			`{"status":"failed","reason":"r","steps":0,"usage":{"input_tokens":0,"output_tokens":0}}`,
		},
		{
			event.LLMCall{
				Sandbox: "sb", API: "anthropic.messages", Model: "m", Upstream: "anthropic", UpstreamModel: "m",
				Usage: event.Usage{InputTokens: 3, OutputTokens: 4}, CostMicroCredits: 5, LatencyMS: 6, Status: 200, Outcome: "ok",
			},
			`{"sandbox":"sb","api":"anthropic.messages","model":"m","upstream":"anthropic","upstream_model":"m",` +
				`"usage":{"input_tokens":3,"output_tokens":4},"cost_micro_credits":5,"latency_ms":6,"status":200,"outcome":"ok"}`,
		},
	}
	for _, tt := range tests {
		d, err := event.New(tt.p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := event.CanonicalPayload(d.Payload, nil)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("payload of %T = %s, want %s", tt.p, got, tt.want)
		}
	}
}

func TestParseHash(t *testing.T) {
	good := strings.Repeat("0123456789abcdef", 4)
	tests := []struct {
		in string
		ok bool
	}{
		{good, true},
		{strings.ToUpper(good), false},
		{good[:63], false},
		{good + "0", false},
		{strings.Repeat("g", 64), false},
		{"", false},
	}
	for _, tt := range tests {
		h, err := event.ParseHash(tt.in)
		if (err == nil) != tt.ok {
			t.Errorf("ParseHash(%q) error = %v, want ok %v", tt.in, err, tt.ok)
		}
		if err == nil && h.String() != tt.in {
			t.Errorf("ParseHash(%q).String() = %q", tt.in, h.String())
		}
	}
}

// TestHashGolden pins the canonical encoding: if this changes, every stored
// log stops verifying, so the change needs a new version tag instead. The
// expected values were computed by an independent implementation of the
// encoding documented on ComputeHash (a dozen lines of Python's hashlib and
// struct.pack('>I'/'>q')), not by this package.
func TestHashGolden(t *testing.T) {
	e := event.Event{
		RunID:   "run_01KB6Q3G0000000000000000AB",
		Seq:     1,
		Type:    event.TypeRunCreated,
		Time:    t0,
		Payload: json.RawMessage(`{"task":"fix it"}`),
	}
	e.PrevHash = event.Genesis(e.RunID)
	const wantGenesis = "eda5e7ac69bcaaf9ec1489d125c447e8fb924342d508634421c76bc684952011"
	const wantHash = "bdc3d5c4dd0026e23fb731ddbc8c3c8d45d5387ed11c37021ef19ce6f66250fd"
	// The same event sealed under v1 (payload bytes, not their digest),
	// which logs written before v2 hold and Verify must still accept.
	const wantV1 = "7727e6b69abf37c4889c2aba9f687b4a05b20badd51bde8b94183cb6670b846a"
	if got := e.PrevHash.String(); got != wantGenesis {
		t.Errorf("Genesis(%q) = %s, want %s", e.RunID, got, wantGenesis)
	}
	if got := e.ComputeHash().String(); got != wantHash {
		t.Errorf("ComputeHash() = %s, want %s", got, wantHash)
	}
	v1 := e
	v1.Hash, _ = event.ParseHash(wantV1)
	if err := event.Verify([]event.Event{v1}); err != nil {
		t.Errorf("Verify(v1 event) = %v, want nil", err)
	}
	if _, err := event.Tombstone(v1, t0, event.ReasonRetention); !errors.Is(err, event.ErrV1Payload) {
		t.Errorf("Tombstone(v1 event) = %v, want ErrV1Payload", err)
	}
	// The location of the time does not matter, only its instant.
	e2 := e
	e2.Time = t0.In(time.FixedZone("x", 3600))
	if e2.ComputeHash() != e.ComputeHash() {
		t.Error("ComputeHash depends on the time's location")
	}
}

// TestHashFieldBoundaries checks that moving bytes between adjacent
// variable-length fields changes the hash (the length prefixes at work).
func TestHashFieldBoundaries(t *testing.T) {
	base := event.Event{RunID: "run_a", Seq: 1, Type: "ab", Time: t0, Payload: json.RawMessage(`{}`)}
	variants := []event.Event{base}
	v := base
	v.RunID, v.Type = "run_ab", "b"
	variants = append(variants, v)
	v = base
	v.Type, v.Payload = "a", json.RawMessage(`b{}`)
	variants = append(variants, v)
	v = base
	v.Seq = 2
	variants = append(variants, v)
	v = base
	v.Time = t0.Add(1)
	variants = append(variants, v)
	v = base
	v.PrevHash[31] = 1
	variants = append(variants, v)
	seen := map[event.Hash]int{}
	for i, e := range variants {
		h := e.ComputeHash()
		if j, ok := seen[h]; ok {
			t.Errorf("variants %d and %d hash alike", j, i)
		}
		seen[h] = i
	}
}

func TestVerify(t *testing.T) {
	id := event.NewRunID(t0)
	other := event.NewRunID(t0.Add(time.Second))
	good := chain(t, id, 5)
	if err := event.Verify(good); err != nil {
		t.Fatalf("Verify(good chain) = %v", err)
	}
	if err := event.Verify(nil); err != nil {
		t.Fatalf("Verify(nil) = %v", err)
	}
	tests := []struct {
		name    string
		mutate  func([]event.Event) []event.Event
		wantErr error
		wantSeq int64
	}{
		{"drop first", func(l []event.Event) []event.Event { return l[1:] }, event.ErrGap, 1},
		{"drop middle", func(l []event.Event) []event.Event { return slices.Delete(l, 2, 3) }, event.ErrGap, 3},
		{"swap", func(l []event.Event) []event.Event { l[1], l[2] = l[2], l[1]; return l }, event.ErrGap, 2},
		{"duplicate", func(l []event.Event) []event.Event { return slices.Insert(l, 2, l[1]) }, event.ErrOrder, 3},
		{"edit payload", func(l []event.Event) []event.Event {
			l[3].Payload = json.RawMessage(`{"step":99}`)
			return l
		}, event.ErrHashMismatch, 4},
		{"edit type", func(l []event.Event) []event.Event { l[2].Type = event.TypeRetry; return l }, event.ErrHashMismatch, 3},
		{"edit time", func(l []event.Event) []event.Event { l[0].Time = l[0].Time.Add(time.Nanosecond); return l }, event.ErrHashMismatch, 1},
		{"edit and rehash", func(l []event.Event) []event.Event {
			l[1].Payload = json.RawMessage(`{"step":99}`)
			l[1].Hash = l[1].ComputeHash()
			return l
		}, event.ErrBrokenLink, 3},
		{"zero genesis", func(l []event.Event) []event.Event {
			l[0].PrevHash = event.Hash{}
			l[0].Hash = l[0].ComputeHash()
			return l
		}, event.ErrBrokenLink, 1},
		{"other run", func(l []event.Event) []event.Event { return append(l, chain(t, other, 6)[5]) }, event.ErrWrongRun, 6},
		{"non-canonical payload", func(l []event.Event) []event.Event {
			l[4].Payload = json.RawMessage(`{ "step": 4 }`)
			l[4].Hash = l[4].ComputeHash()
			return l
		}, event.ErrMalformed, 5},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := tt.mutate(slices.Clone(chain(t, id, 5)))
			err := event.Verify(l)
			var ve *event.VerifyError
			if !errors.Is(err, tt.wantErr) || !errors.As(err, &ve) || ve.Seq != tt.wantSeq {
				t.Fatalf("Verify() = %v, want %v at seq %d", err, tt.wantErr, tt.wantSeq)
			}
		})
	}
}

func TestChainResume(t *testing.T) {
	id := event.NewRunID(t0)
	l := chain(t, id, 6)
	c := event.Resume(id, l[2].Seq, l[2].Hash)
	for _, e := range l[3:] {
		if err := c.Next(e); err != nil {
			t.Fatalf("Next(seq %d) = %v", e.Seq, err)
		}
	}
	if c.Seq() != 6 || c.Last() != l[5].Hash {
		t.Errorf("after resume: Seq() = %d, Last() = %s, want 6, %s", c.Seq(), c.Last(), l[5].Hash)
	}
	// An error leaves the chain where it was.
	if err := c.Next(l[0]); err == nil || c.Seq() != 6 {
		t.Errorf("Next(old event) = %v, Seq() = %d; want an error and 6", err, c.Seq())
	}
}

func TestCanonicalPayload(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"empty", "", `{}`},
		{"spaces", " \n ", `{}`},
		{"compact, order kept", `{ "b": 1, "a": [ 1, 2 ] }`, `{"b":1,"a":[1,2]}`},
		{"numbers as written", `{"a":1.0,"b":1e3,"c":-0,"d":123456789012345678901234567890,"e":-1.5E-7}`, `{"a":1.0,"b":1e3,"c":-0,"d":123456789012345678901234567890,"e":-1.5E-7}`},
		{"html escaped", `{"a":"<b>&\u2028 "}`, `{"a":"\u003cb\u003e\u0026\u2028\u2029"}`},
		{"escapes resolved", `{"a":"\u0041\/\ud83d\ude00"}`, `{"a":"A/😀"}`},
		{"control escapes", `{"a":"\u0000\n\t\u001f"}`, `{"a":"\u0000\n\t\u001f"}`},
		{"lone surrogate", `{"a":"\ud800"}`, `{"a":"�"}`},
		{"invalid utf-8", "{\"a\":\"\xff\"}", `{"a":"�"}`},
		{"duplicate keys kept", `{"a":1,"a":2}`, `{"a":1,"a":2}`},
		{"nested", `{"z":{"y":null,"x":true},"w":[[],{}, false]}`, `{"z":{"y":null,"x":true},"w":[[],{},false]}`},
		{"unicode kept", `{"é":"日本"}`, `{"é":"日本"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.CanonicalPayload([]byte(tt.in), nil)
			if err != nil || string(got) != tt.want {
				t.Fatalf("CanonicalPayload(%q) = %s, %v, want %s", tt.in, got, err, tt.want)
			}
			again, err := event.CanonicalPayload(got, nil)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("CanonicalPayload is not idempotent: %s -> %s, %v", got, again, err)
			}
		})
	}
	bad := []struct{ name, in string }{
		{"array", `[1]`},
		{"string", `"a"`},
		{"null", `null`},
		{"invalid", `{"a":}`},
		{"trailing", `{} {}`},
		{"trailing garbage", `{}x`},
		{"trailing comma", `{"a":1,}`},
		{"bad number", `{"a":01}`},
		{"bad number 2", `{"a":1.}`},
		{"bad number 3", `{"a":-}`},
		{"bad escape", `{"a":"\x41"}`},
		{"short unicode escape", `{"a":"\u41"}`},
		{"raw control char", "{\"a\":\"\n\"}"},
		{"unterminated", `{"a":"b`},
		{"single quotes", `{'a':1}`},
		{"too deep", strings.Repeat(`{"a":`, 1001) + "1" + strings.Repeat("}", 1001)},
		{"too large", `{"a":"` + strings.Repeat("x", event.MaxPayloadSize) + `"}`},
		{"too large after escaping", `{"a":"` + strings.Repeat("<", event.MaxPayloadSize/4) + `"}`},
	}
	for _, tt := range bad {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := event.CanonicalPayload([]byte(tt.in), nil); !errors.Is(err, event.ErrPayload) {
				t.Fatalf("CanonicalPayload(%.40q) = %v, want ErrPayload", tt.in, err)
			}
		})
	}
}

// scrubber redacts "hunter2" the way secret.Redactor does: on the bytes
// it is given.
func scrubber(b []byte) []byte { return bytes.ReplaceAll(b, []byte("hunter2"), []byte("[redacted]")) }

func TestCanonicalPayloadScrub(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"string", `{"out":"password=hunter2\n"}`, `{"out":"password=[redacted]\n"}`},
		{"escaped in JSON", `{"out":"\u0068unter2"}`, `{"out":"[redacted]"}`},
		{"key", `{"hunter2":1}`, `{"[redacted]":1}`},
		{"escaped key", `{"\u0068unter2":1,"b":"<hunter2>"}`, `{"[redacted]":1,"b":"\u003c[redacted]\u003e"}`},
		{"nested", `{"a":[{"b":"xhunter2x"}]}`, `{"a":[{"b":"x[redacted]x"}]}`},
		{"untouched", `{"a":"hunter","n":12}`, `{"a":"hunter","n":12}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := event.CanonicalPayload([]byte(tt.in), scrubber)
			if err != nil || string(got) != tt.want {
				t.Fatalf("CanonicalPayload(%q, scrub) = %s, %v, want %s", tt.in, got, err, tt.want)
			}
		})
	}
	// A secret with a character JSON escapes (a PEM key's newlines) is
	// found in the decoded text.
	pem := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("KEY\nDATA\"x"), []byte("[redacted]")) }
	got, err := event.CanonicalPayload([]byte(`{"k":"-----BEGIN KEY\nDATA\"x\n-----"}`), pem)
	if err != nil || string(got) != `{"k":"-----BEGIN [redacted]\n-----"}` {
		t.Fatalf("CanonicalPayload(escaped secret, scrub) = %s, %v", got, err)
	}
	// A number holding the secret becomes a string.
	digits := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte("4242"), []byte("[redacted]")) }
	got, err = event.CanonicalPayload([]byte(`{"pin":142421}`), digits)
	if err != nil || string(got) != `{"pin":"[redacted]"}` {
		t.Fatalf("CanonicalPayload(number, scrub) = %s, %v", got, err)
	}
	// An error never echoes the payload.
	_, err = event.CanonicalPayload([]byte(`{"a":"hunter2"`), scrubber)
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("CanonicalPayload(broken) = %v; want an error without the payload", err)
	}
}

func TestJSONRoundTrip(t *testing.T) {
	id := event.NewRunID(t0)
	l := chain(t, id, 3)
	d, err := event.New(event.RunCreated{Task: "a <b> & \"c\" \u2028 é 😀", Tenant: "t"})
	if err != nil {
		t.Fatal(err)
	}
	d.Payload, _ = event.CanonicalPayload(d.Payload, nil)
	d.Time = t0.Add(time.Hour)
	event.Seal(id, 3, l[2].Hash, &d)
	l = append(l, d)

	var buf bytes.Buffer
	for _, e := range l {
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		direct, err := e.MarshalJSON()
		if err != nil || !bytes.Equal(b, direct) {
			t.Fatalf("json.Marshal and MarshalJSON differ:\n%s\n%s", b, direct)
		}
		got, err := event.Decode(b)
		if err != nil {
			t.Fatalf("Decode(%s) = %v", b, err)
		}
		if !eventsEqual(got, e) {
			t.Fatalf("Decode(Marshal(e)) = %+v, want %+v", got, e)
		}
		// Pretty-printed JSON still decodes to the same event.
		buf.Reset()
		if err := json.Indent(&buf, b, "", "  "); err != nil {
			t.Fatal(err)
		}
		got, err = event.Decode(buf.Bytes())
		if err != nil || !eventsEqual(got, e) {
			t.Fatalf("Decode(indented) = %+v, %v, want %+v", got, err, e)
		}
	}
	var back []event.Event
	all, err := json.Marshal(l)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(all, &back); err != nil {
		t.Fatal(err)
	}
	if err := event.Verify(back); err != nil {
		t.Fatalf("Verify(unmarshalled log) = %v", err)
	}
	if !strings.Contains(string(all), `"seq":1,"type":"tool.finished"`) {
		t.Errorf("JSON form lacks the stable field names: %s", all)
	}
}

func eventsEqual(a, b event.Event) bool {
	return a.RunID == b.RunID && a.Seq == b.Seq && a.Type == b.Type && a.Time.Equal(b.Time) &&
		bytes.Equal(a.Payload, b.Payload) && a.PrevHash == b.PrevHash && a.Hash == b.Hash
}

func TestDecodeStrict(t *testing.T) {
	id := event.NewRunID(t0)
	good, err := json.Marshal(chain(t, id, 1)[0])
	if err != nil {
		t.Fatal(err)
	}
	if _, err := event.Decode(good); err != nil {
		t.Fatalf("Decode(good) = %v", err)
	}
	replace := func(from, to string) string {
		if !strings.Contains(string(good), from) {
			t.Fatalf("%q not in %s", from, good)
		}
		return strings.Replace(string(good), from, to, 1)
	}
	tests := []struct{ name, in string }{
		{"empty", ""},
		{"array", "[]"},
		{"unknown field", replace(`{"run_id"`, `{"x":1,"run_id"`)},
		{"field case", replace(`"seq"`, `"Seq"`)},
		{"duplicate field", replace(`,"seq":1`, `,"seq":1,"seq":1`)},
		{"missing field", replace(`,"seq":1`, ``)},
		{"null field", replace(`"seq":1`, `"seq":null`)},
		{"null hash", replace(`"hash":"`, `"hash":null,"x":"`)},
		{"trailing data", string(good) + "{}"},
		{"seq zero", replace(`"seq":1`, `"seq":0`)},
		{"seq float", replace(`"seq":1`, `"seq":1.5`)},
		{"seq string", replace(`"seq":1`, `"seq":"1"`)},
		{"bad run id", replace(id, strings.ToLower(id))},
		{"bad type", replace(`"tool.finished"`, `"Tool finished"`)},
		{"bad time", replace(`"time":"2026`, `"time":"x2026`)},
		{"payload array", replace(`"payload":{`, `"payload":[{`)},
		{"bad hash", replace(`"hash":"`, `"hash":"Z`)},
		{"short prev hash", replace(`"prev_hash":"`, `"prev_hash":"`+`0"`+`,"x":"`)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := event.Decode([]byte(tt.in)); !errors.Is(err, event.ErrDecode) {
				t.Fatalf("Decode(%s) = %v, want ErrDecode", tt.in, err)
			}
		})
	}
}

func TestRunID(t *testing.T) {
	var ids []string
	for i := range 50 {
		ids = append(ids, event.NewRunID(t0.Add(time.Duration(i)*time.Millisecond)))
	}
	if !sort.StringsAreSorted(ids) {
		t.Errorf("run ids made a millisecond apart do not sort by time: %v", ids)
	}
	for _, id := range ids {
		if err := event.ValidRunID(id); err != nil {
			t.Fatalf("ValidRunID(%q) = %v", id, err)
		}
	}
	got, err := event.RunIDTime(ids[7])
	if want := t0.Add(7 * time.Millisecond).Truncate(time.Millisecond); err != nil || !got.Equal(want) {
		t.Errorf("RunIDTime(%q) = %v, %v, want %v", ids[7], got, err, want)
	}
	if a, b := event.NewRunID(t0), event.NewRunID(t0); a == b {
		t.Error("two run ids of the same millisecond are equal")
	}
	last := event.NewRunID(time.UnixMilli(1<<48 - 1))
	if err := event.ValidRunID(last); err != nil || !strings.HasPrefix(last, "run_7ZZZZZZZZZ") {
		t.Errorf("NewRunID(max time) = %q, %v", last, err)
	}
	bad := []string{
		"", "run_", "run_01KB6Q3G0000000000000000A", "run_01KB6Q3G0000000000000000ABC", "job_01KB6Q3G0000000000000000AB",
		"run_01kb6q3g0000000000000000ab", "run_81KB6Q3G0000000000000000AB", "run_01KB6Q3G000000000000000IAB", "run_01KB6Q3G00000000000000 0AB",
	}
	for _, s := range bad {
		if err := event.ValidRunID(s); !errors.Is(err, event.ErrRunID) {
			t.Errorf("ValidRunID(%q) = %v, want ErrRunID", s, err)
		}
	}
}

func TestStatusTransitions(t *testing.T) {
	type pair struct{ from, to event.Status }
	legal := map[pair]bool{}
	for _, p := range []pair{
		{event.StatusQueued, event.StatusRunning},
		{event.StatusQueued, event.StatusPaused},
		{event.StatusQueued, event.StatusFailed},
		{event.StatusQueued, event.StatusCancelled},
		{event.StatusRunning, event.StatusAwaitingApproval},
		{event.StatusRunning, event.StatusPaused},
		{event.StatusRunning, event.StatusCompleted},
		{event.StatusRunning, event.StatusFailedVerification},
		{event.StatusRunning, event.StatusFailed},
		{event.StatusRunning, event.StatusCancelled},
		{event.StatusAwaitingApproval, event.StatusRunning},
		{event.StatusAwaitingApproval, event.StatusPaused},
		{event.StatusAwaitingApproval, event.StatusFailed},
		{event.StatusAwaitingApproval, event.StatusCancelled},
		{event.StatusPaused, event.StatusQueued},
		{event.StatusPaused, event.StatusRunning},
		{event.StatusPaused, event.StatusFailed},
		{event.StatusPaused, event.StatusCancelled},
	} {
		legal[p] = true
	}
	all := append(event.Statuses(), "bogus", "")
	for _, from := range all {
		for _, to := range all {
			err := event.CheckTransition(from, to)
			if want := legal[pair{from, to}]; (err == nil) != want {
				t.Errorf("CheckTransition(%q, %q) = %v, want legal %v", from, to, err, want)
			}
			if err != nil && !errors.Is(err, event.ErrTransition) {
				t.Errorf("CheckTransition(%q, %q) = %v, want ErrTransition", from, to, err)
			}
		}
	}
	final := map[event.Status]bool{event.StatusCompleted: true, event.StatusFailedVerification: true, event.StatusFailed: true, event.StatusCancelled: true}
	unfinished := map[event.Status]bool{event.StatusQueued: true, event.StatusRunning: true, event.StatusAwaitingApproval: true}
	for _, s := range all {
		if got := s.Final(); got != final[s] {
			t.Errorf("Status(%q).Final() = %v, want %v", s, got, final[s])
		}
		if got := s.Unfinished(); got != unfinished[s] {
			t.Errorf("Status(%q).Unfinished() = %v, want %v", s, got, unfinished[s])
		}
	}
}

func ptr[T any](v T) *T { return &v }
