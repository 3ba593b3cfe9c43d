package telemetry_test

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// TestHTTPSpans: each request gets a server span named by the route the
// mux matched, with its status, continuing the client's traceparent;
// flushes (event streams) pass through; handlers can annotate the span.
func TestHTTPSpans(t *testing.T) {
	t.Parallel()
	tel, exp := newTraced(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		trace.SpanFromContext(r.Context()).AddEvent("handled")
		w.WriteHeader(http.StatusNotFound)
	})
	mux.HandleFunc("GET /v1/stream", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = w.Write([]byte("data: one\n\n"))
		w.(http.Flusher).Flush()
		_, _ = w.Write([]byte("data: two\n\n"))
	})
	mux.HandleFunc("GET /boom", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusInternalServerError) })
	srv := httptest.NewServer(tel.HTTP(mux))
	defer srv.Close()

	const parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	req, _ := http.NewRequest("GET", srv.URL+"/v1/runs/run_x?cursor=QUERY-MARKER", nil)
	req.Header.Set("Traceparent", parent)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	resp, err = http.Get(srv.URL + "/v1/stream")
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	resp.Body.Close()
	if strings.Join(lines, "|") != "data: one||data: two|" {
		t.Errorf("stream %q", lines)
	}
	resp, err = http.Get(srv.URL + "/boom")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	spans := exp.GetSpans()
	get := one(t, spans, "GET /v1/runs/{id}")
	if get.Parent.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || get.Parent.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("span's parent %v, want the client's traceparent", get.Parent)
	}
	if get.SpanKind != trace.SpanKindServer || len(get.Events) != 1 {
		t.Errorf("span kind %v, events %v", get.SpanKind, get.Events)
	}
	for key, want := range map[string]any{
		"http.route": "GET /v1/runs/{id}", "http.response.status_code": int64(404),
		"http.request.method": "GET", "url.path": "/v1/runs/run_x",
	} {
		if v, _ := attr(get, key); v.AsInterface() != want {
			t.Errorf("%s = %v, want %v", key, v.String(), want)
		}
	}
	for _, kv := range get.Attributes {
		if strings.Contains(kv.Value.String(), "QUERY-MARKER") {
			t.Errorf("attribute %s carries the query string", kv.Key)
		}
	}
	if v, _ := attr(one(t, spans, "GET /v1/stream"), "http.response.status_code"); v.AsInt64() != 200 {
		t.Errorf("stream status %v", v.String())
	}
	if s := one(t, spans, "GET /boom"); s.Status.Code != codes.Error {
		t.Errorf("500's span status %v", s.Status)
	}
}
