package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// chatServer speaks the OpenAI Chat Completions streaming wire format, as
// vLLM, Ollama and llama.cpp's server do. Its "model" plays a fixed agent:
// it picks its turn from the number of assistant messages it is sent, and
// the second turn answers with what the first tool call printed.
type chatServer struct {
	mu    sync.Mutex
	auth  []string
	seen  []string // the tool result contents it was sent
	calls int
}

func (s *chatServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/chat/completions" || r.Method != http.MethodPost {
		http.NotFound(w, r)
		return
	}
	var req struct {
		Stream   bool `json:"stream"`
		Messages []struct {
			Role    string          `json:"role"`
			Content json.RawMessage `json:"content"`
		} `json:"messages"`
		Tools []json.RawMessage `json:"tools"`
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&req); err != nil || !req.Stream || len(req.Tools) == 0 {
		http.Error(w, `{"error":{"message":"bad request"}}`, http.StatusBadRequest)
		return
	}
	turn := 0
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turn++
		}
		if m.Role == "tool" {
			var c string
			_ = json.Unmarshal(m.Content, &c)
			s.mu.Lock()
			s.seen = append(s.seen, c)
			s.mu.Unlock()
		}
	}
	s.mu.Lock()
	s.auth = append(s.auth, r.Header.Get("Authorization"))
	s.calls++
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/event-stream")
	chunk := func(choices, usage string) {
		fmt.Fprintf(w, "data: {\"id\":\"chatcmpl-%d\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"local-agent\",\"choices\":%s,\"usage\":%s}\n\n", turn, choices, usage)
	}
	call := func(id, name, args string) {
		chunk(fmt.Sprintf(`[{"index":0,"delta":{"role":"assistant","content":null,"tool_calls":[{"index":0,"id":%q,"type":"function","function":{"name":%q,"arguments":""}}]},"finish_reason":null}]`, id, name), "null")
		chunk(fmt.Sprintf(`[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":%q}}]},"finish_reason":null}]`, args), "null")
		chunk(`[{"index":0,"delta":{},"finish_reason":"tool_calls"}]`, "null")
	}
	switch turn {
	case 0:
		chunk(`[{"index":0,"delta":{"role":"assistant","content":"Looking around."},"finish_reason":null}]`, "null")
		call("call_a", "run_command", `{"command":"echo from-the-sandbox > out.txt; cat out.txt"}`)
	default:
		call("call_b", "finish", `{"summary":"wrote out.txt"}`)
	}
	chunk(`[]`, `{"prompt_tokens":120,"completion_tokens":30,"total_tokens":150}`)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// TestAgentRunRealProvider drives airlock run with an OpenAI-compatible
// provider over HTTP: the key goes only in the auth header, never into the
// log, and the run completes and verifies.
func TestAgentRunRealProvider(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	srv := &chatServer{}
	ts := httptest.NewServer(srv)
	defer ts.Close()
	const key = "sk-e2e-canary-4242424242"
	ctx, cancel := context.WithTimeout(t.Context(), commandWait)
	defer cancel()
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, airlockBin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "AIRLOCK_HOME=" + h.dir, "OPENAI_API_KEY=" + key}
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		return out.String(), err
	}
	out, err := run("run", "--model", "openai-compatible:local-agent", "--base-url", ts.URL+"/v1",
		"--verify", "grep -q from-the-sandbox out.txt", "--verify-changed", "out.txt", "--out", filepath.Join(h.dir, "out"), "write a file")
	if err != nil {
		t.Fatalf("airlock run: %v\n%s", err, out)
	}
	for _, want := range []string{"step 1 · local-agent", "Looking around.", "completed in 2 steps"} {
		if !strings.Contains(out, want) {
			t.Errorf("the timeline lacks %q\n%s", want, out)
		}
	}
	srv.mu.Lock()
	if srv.calls != 2 || len(srv.seen) != 1 || !strings.Contains(srv.seen[0], "from-the-sandbox") {
		t.Errorf("the model was called %d times and shown %q", srv.calls, srv.seen)
	}
	for _, a := range srv.auth {
		if a != "Bearer "+key {
			t.Errorf("Authorization = %q", a)
		}
	}
	srv.mu.Unlock()
	patch, err := os.ReadFile(filepath.Join(h.dir, "out", "patch.diff"))
	if err != nil || !strings.Contains(string(patch), "+from-the-sandbox") {
		t.Errorf("patch: %v %q", err, patch)
	}
	// The key is in no event, in no store file.
	if b, err := exec.Command("grep", "-rl", key, h.dir).Output(); len(b) > 0 {
		t.Errorf("the API key is stored in %s (%v)", b, err)
	}
	if strings.Contains(out, key) {
		t.Error("the API key was printed")
	}
}
