package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/secret/token"
)

// Workload-shaped answers: a short chat completion, and a stream of a
// role chunk, eight content deltas, a finish chunk, the usage chunk and
// [DONE].
const benchCompletion = `{"id":"chatcmpl-1","object":"chat.completion","created":1,"model":"gpt-4o-mini","choices":[{"index":0,"message":{"role":"assistant","content":"The tests pass now."},"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":6,"total_tokens":126}}`

var benchStream = func() string {
	var b strings.Builder
	chunk := func(choices, usage string) {
		fmt.Fprintf(&b, `data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"gpt-4o-mini","choices":%s,"usage":%s}`+"\n\n", choices, usage)
	}
	chunk(`[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]`, "null")
	for _, w := range []string{"The", " tests", " pass", " now", ",", " all", " green", "."} {
		chunk(fmt.Sprintf(`[{"index":0,"delta":{"content":%q},"finish_reason":null}]`, w), "null")
	}
	chunk(`[{"index":0,"delta":{},"finish_reason":"stop"}]`, "null")
	chunk(`[]`, `{"prompt_tokens":120,"completion_tokens":8,"total_tokens":128}`)
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}()

const benchRequest = `{"model":"gpt-4o-mini","messages":[{"role":"system","content":"You are a careful engineer."},{"role":"user","content":"Run the tests and tell me whether they pass."}]}`

const benchStreamRequest = `{"model":"gpt-4o-mini","stream":true,"messages":[{"role":"system","content":"You are a careful engineer."},{"role":"user","content":"Run the tests and tell me whether they pass."}]}`

// benchHost is a Gateway behind a real egress proxy on a unix socket, and
// a local upstream reachable directly too.
type benchHost struct {
	up       *httptest.Server
	sock     string
	token    string
	recorded atomic.Int64
}

func newBenchHost(b *testing.B) *benchHost {
	b.Helper()
	h := &benchHost{}
	h.up = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "text/event-stream")
			f := w.(http.Flusher)
			for ev := range strings.SplitAfterSeq(benchStream, "\n\n") {
				_, _ = io.WriteString(w, ev)
				f.Flush()
			}
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, benchCompletion)
	}))
	b.Cleanup(h.up.Close)
	tokens := token.NewStore(nil)
	id := bridge.Identity{Tenant: "acme", Run: "run-bench", Sandbox: "sb-1"}
	tok, err := tokens.Issue(token.Scope{Tenant: id.Tenant, Run: id.Run, Sandbox: id.Sandbox, Purpose: gateway.Purpose}, time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	h.token = tok
	pol := &policy.LLM{Enabled: true, Models: []string{"gpt-4o*"}}
	gw, err := gateway.New(gateway.Config{
		Tokens: tokens,
		Upstreams: map[string]gateway.Upstream{"openai": {
			Kind: gateway.KindOpenAI, BaseURL: h.up.URL + "/v1",
			Key: func(context.Context) (secret.Value, error) { return secret.NewValue([]byte(openaiKey)), nil },
		}},
		Policy: func(context.Context, bridge.Identity) (*policy.LLM, error) { return pol, nil },
		Prices: prices,
		Record: func(context.Context, bridge.Identity, gateway.Call) (int64, error) {
			return h.recorded.Add(1), nil
		},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { gw.Close() })
	p, err := egress.New(egress.Config{Identity: id, Policy: &policy.Default().Network, Audit: discardAudit{}, Local: gw})
	if err != nil {
		b.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "gwb")
	if err != nil {
		b.Fatal(err)
	}
	h.sock = filepath.Join(dir, "s")
	l, err := net.Listen("unix", h.sock)
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = p.Serve(l)
	}()
	b.Cleanup(func() {
		_ = p.Close()
		<-done
		os.RemoveAll(dir)
	})
	return h
}

type discardAudit struct{}

func (discardAudit) Record(egress.Record) {}

// client returns a keep-alive client and the URL of the chat endpoint,
// through the gateway or straight to the upstream.
func (h *benchHost) client(viaGateway bool) (*http.Client, string, string) {
	if !viaGateway {
		return &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}, h.up.URL + "/v1/chat/completions", openaiKey
	}
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", h.sock)
		},
		MaxIdleConnsPerHost: 64,
	}
	return &http.Client{Transport: tr}, base + chatPath, h.token
}

func post(b *testing.B, c *http.Client, url, key, body string) *http.Response {
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := c.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(resp.Body)
		b.Fatalf("status %d: %s", resp.StatusCode, msg)
	}
	return resp
}

// reportPercentiles reports the p50 and p99 of ds.
func reportPercentiles(b *testing.B, ds []time.Duration, unit string) {
	if len(ds) == 0 {
		return
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2].Nanoseconds()), "p50-"+unit)
	b.ReportMetric(float64(ds[len(ds)*99/100].Nanoseconds()), "p99-"+unit)
}

// BenchmarkCall is one non-streamed chat completion, sequentially, on a
// keep-alive connection: straight to the local upstream, and through the
// egress proxy's socket and the gateway (token, policy, rate and budget
// checks, key injection, usage metering, pricing, recording). The
// difference of the two is the latency the gateway adds per call.
func BenchmarkCall(b *testing.B) {
	for _, via := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "gateway"}[via]
		b.Run(name, func(b *testing.B) {
			h := newBenchHost(b)
			c, url, key := h.client(via)
			var ds []time.Duration
			b.ReportAllocs()
			for b.Loop() {
				start := time.Now()
				resp := post(b, c, url, key, benchRequest)
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				ds = append(ds, time.Since(start))
			}
			reportPercentiles(b, ds, "ns")
		})
	}
}

// BenchmarkStreamTTFT is one streamed chat completion: ttft-ns is the time
// from sending the request to reading the first content event, the
// overhead the gateway adds to time-to-first-token.
func BenchmarkStreamTTFT(b *testing.B) {
	for _, via := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "gateway"}[via]
		b.Run(name, func(b *testing.B) {
			h := newBenchHost(b)
			c, url, key := h.client(via)
			var ttft []time.Duration
			for b.Loop() {
				start := time.Now()
				resp := post(b, c, url, key, benchStreamRequest)
				br := bufio.NewReader(resp.Body)
				for {
					line, err := br.ReadString('\n')
					if err != nil {
						b.Fatalf("stream ended before content: %v", err)
					}
					if strings.Contains(line, `"content":"The"`) {
						break
					}
				}
				ttft = append(ttft, time.Since(start))
				_, _ = io.Copy(io.Discard, br)
				resp.Body.Close()
			}
			reportPercentiles(b, ttft, "ttft-ns")
		})
	}
}

// BenchmarkThroughput is non-streamed calls from many goroutines at once
// (one keep-alive connection each, as parallel SDK clients): req/s is the
// sustained rate.
func BenchmarkThroughput(b *testing.B) {
	for _, via := range []bool{false, true} {
		name := map[bool]string{false: "direct", true: "gateway"}[via]
		b.Run(name, func(b *testing.B) {
			h := newBenchHost(b)
			c, url, key := h.client(via)
			start := time.Now()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					resp := post(b, c, url, key, benchRequest)
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			})
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "req/s")
		})
	}
}
