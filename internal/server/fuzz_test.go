package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
)

// checkClientError: a decoder's error is one the API can answer, with
// text fit for the client.
func checkClientError(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error", err, err)
	}
	if _, ok := Codes[ae.code]; !ok {
		t.Fatalf("code %q is not in the closed set", ae.code)
	}
	if !utf8.ValidString(ae.msg) || len(ae.msg) > 4*maxMessage {
		t.Fatalf("message is not bounded UTF-8: %q", ae.msg)
	}
}

func FuzzCreateRunRequest(f *testing.F) {
	f.Add([]byte(`{"task":"fix it","script":"turns:\n  - tool_calls:\n      - name: finish\n        args: {summary: ok}\n"}`))
	f.Add([]byte(`{"task":"t","model":"anthropic:claude","policy":"strict@v2","workspace":{"upload":"upl_` + strings.Repeat("ab", 32) + `"},"verify":{"commands":["make test"]},"metadata":{"ticket":"X-1"}}`))
	f.Add([]byte(`{"task":"t","model":"openai-compatible:x"}`))
	f.Add([]byte(`{"task":"t","model":"openai:x","policy_document":"network:\n  allow: [{cidr: 127.0.0.0/8}]\n"}`))
	f.Add([]byte(`{"task":"t","model":"x","extra":1}`))
	f.Add([]byte(`{"task":"t"} {}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var q CreateRunRequest
		err := decodeBody(bytes.NewReader(b), &q, false)
		if err == nil {
			err = q.validate()
		}
		if err != nil {
			checkClientError(t, err)
			return
		}
		if strings.TrimSpace(q.Task) == "" || (q.Model == "") == (q.Script == "") {
			t.Fatalf("validate accepted %+v", q)
		}
		if q.Model != "" && checkModel(q.Model) != nil {
			t.Fatalf("validate accepted model %q", q.Model)
		}
		cfg := engine.PolicyConfig(policy.Default())
		cfg.MaxSteps = lower(cfg.MaxSteps, q.MaxSteps)
		if cfg.MaxSteps < 1 || cfg.MaxSteps > 50 {
			t.Fatalf("max_steps %d raised or zeroed the default budget: %d", q.MaxSteps, cfg.MaxSteps)
		}
	})
}

func FuzzForkRequest(f *testing.F) {
	f.Add([]byte(`{"at_step":1}`))
	f.Add([]byte(`{"at_step":0,"model":"openai:gpt","policy":"p@v1","max_steps":3}`))
	f.Add([]byte(`{"at_step":-1}`))
	f.Add([]byte(`{"model":"openai:gpt"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var q ForkRequest
		err := decodeBody(bytes.NewReader(b), &q, false)
		if err == nil {
			err = q.validate()
		}
		if err != nil {
			checkClientError(t, err)
			return
		}
		if q.AtStep == nil || *q.AtStep < 0 {
			t.Fatalf("validate accepted at_step %v", q.AtStep)
		}
	})
}

func FuzzDecisionRequest(f *testing.F) {
	f.Add([]byte(`{"comment":"ok"}`), true)
	f.Add([]byte(`{"reason":"not on a Friday"}`), false)
	f.Add([]byte(``), true)
	f.Add([]byte(`{"reason":"x","comment":"y"}`), false)
	f.Fuzz(func(t *testing.T, b []byte, optional bool) {
		var q DecisionRequest
		if err := decodeBody(bytes.NewReader(b), &q, optional); err != nil {
			checkClientError(t, err)
			return
		}
		var a ActionRequest
		if err := decodeBody(bytes.NewReader(b), &a, optional); err == nil {
			if err := a.validate(); err != nil {
				checkClientError(t, err)
			}
		}
	})
}

func FuzzCursor(f *testing.F) {
	f.Add(encodeCursor(event.NewRunID(time.Unix(1700000000, 0))))
	f.Add("cjpydW5fMDFKMDAwMDAwMDAwMDAwMDAwMDAwMDAwMDAw")
	f.Add("!!")
	f.Fuzz(func(t *testing.T, c string) {
		id, err := decodeCursor(c)
		if err != nil {
			checkClientError(t, err)
			return
		}
		if event.ValidRunID(id) != nil {
			t.Fatalf("cursor %q gave run id %q", c, id)
		}
		if again, err := decodeCursor(encodeCursor(id)); err != nil || again != id {
			t.Fatalf("cursor of %q does not round-trip: %q, %v", id, again, err)
		}
	})
}

func FuzzParseSeq(f *testing.F) {
	for _, s := range []string{"", "0", "42", "-1", " 7 ", "9223372036854775808", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := parseSeq("after", s)
		if err != nil {
			checkClientError(t, err)
			return
		}
		if n < 0 {
			t.Fatalf("parseSeq(%q) = %d", s, n)
		}
	})
}

// TestClientText: the messages of client errors quote the client's input
// boundedly and drop the packages' prefixes.
func TestClientText(t *testing.T) {
	long := errors.New("engine: invalid request: " + strings.Repeat("é", 3000))
	got := clientText(long)
	if !utf8.ValidString(got) || len(got) > maxMessage+len("…") || strings.HasPrefix(got, "engine:") {
		t.Errorf("clientText = %.40q… (%d bytes)", got, len(got))
	}
	b, _ := json.Marshal(ErrorBody{Code: CodeBadRequest, Message: got})
	if !json.Valid(b) {
		t.Error("error body does not marshal")
	}
}
