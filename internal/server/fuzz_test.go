package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/param"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
)

// checkClientError: a decoder's error is one the API can answer, with
// text fit for the client.
func checkClientError(t *testing.T, err error) {
	t.Helper()
	var ae *apiError
	if !errors.As(err, &ae) {
		t.Fatalf("error %v (%T) is not an API error", err, err)
	}
	if _, ok := api.Codes[ae.code]; !ok {
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
		var q api.CreateRunRequest
		err := decodeBody(bytes.NewReader(b), &q, false)
		if err == nil {
			err = validateCreate(&q)
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
		var q api.ForkRequest
		err := decodeBody(bytes.NewReader(b), &q, false)
		if err == nil {
			err = validateFork(&q)
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
		var q api.DecisionRequest
		if err := decodeBody(bytes.NewReader(b), &q, optional); err != nil {
			checkClientError(t, err)
			return
		}
		var a api.ActionRequest
		if err := decodeBody(bytes.NewReader(b), &a, optional); err == nil {
			if err := validateAction(a); err != nil {
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

// FuzzParams: every whole-number parameter of the API is read by
// parseParam, which answers a value within the parameter's bounds or a
// client error.
func FuzzParams(f *testing.F) {
	for _, s := range []string{"", "0", "42", "-1", " 7 ", "9223372036854775807", "9223372036854775808", "1e3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, p := range []param.Int{afterParam, lastEventIDParam, pageParam, runsPageParam} {
			n, err := parseParam(p, s)
			if err != nil {
				checkClientError(t, err)
				continue
			}
			if n < p.Min || n > p.Max {
				t.Fatalf("parseParam(%s, %q) = %d, outside %d to %d", p.Name, s, n, p.Min, p.Max)
			}
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
	b, _ := json.Marshal(api.ErrorBody{Code: api.CodeBadRequest, Message: got})
	if !json.Valid(b) {
		t.Error("error body does not marshal")
	}
}

// FuzzSecretRequest: the body of PUT /v1/secrets/{name} is decoded and
// checked without panicking, and no error ever quotes any of it (a piece
// of the body may be a piece of the value).
func FuzzSecretRequest(f *testing.F) {
	f.Add([]byte(`{"value":"ghp_0123456789abcdef","hosts":["api.github.com","*.GitHubUserContent.com."]}`))
	f.Add([]byte(`{"value":"-----BEGIN KEY-----\nMIIE\n-----END KEY-----\n"}`))
	f.Add([]byte(`{"value":"tok\q"}`))
	f.Add([]byte(`{"value":"\ud800"}`))
	f.Add([]byte(`{"value":"x","hosts":["https://x/"]}`))
	f.Add([]byte(`{"secret_value_in_a_key":1}`))
	f.Add([]byte(`{"value":""}`))
	f.Add([]byte(`{"value":"a"} {"value":"b"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := decodeSecret(bytes.NewReader(b))
		if err != nil {
			// A body that does not decode is answered in fixed words.
			checkClientError(t, err)
			var ae *apiError
			errors.As(err, &ae)
			if !slices.Contains([]string{errSecretBody.msg, "the request needs a JSON body", "value: want UTF-8 text"}, ae.msg) {
				t.Fatalf("decoding %q: message %q", b, ae.msg)
			}
			return
		}
		hosts, err := checkSecret(q)
		if err != nil {
			// A value that does not pass is never quoted (the host
			// patterns a client gave may be: they are no secret).
			checkClientError(t, err)
			var ae *apiError
			errors.As(err, &ae)
			allowed := secretWords + strings.Join(q.Hosts, " ")
			for i := 0; i+6 <= len(q.Value); i++ {
				if piece := q.Value[i : i+6]; strings.Contains(ae.msg, piece) && !strings.Contains(allowed, piece) {
					t.Fatalf("message %q quotes the value %q", ae.msg, q.Value)
				}
			}
			return
		}
		if q.Value == "" || len(q.Value) > secret.MaxValueSize || !utf8.ValidString(q.Value) || strings.ContainsRune(q.Value, utf8.RuneError) {
			t.Fatalf("accepted a value of %d bytes", len(q.Value))
		}
		if len(hosts) > len(q.Hosts) || len(hosts) > maxSecretHosts {
			t.Fatalf("hosts %q from %q", hosts, q.Hosts)
		}
	})
}

// secretWords are the words of checkSecret's messages.
const secretWords = `value: want UTF-8 text (no lone surrogate escapes) value: empty value: over 65536 bytes hosts: patterns, at most 64`

// FuzzGrantRequest: a grant is decoded and checked without panicking;
// what passes credits the key's own tenant a bounded positive amount.
func FuzzGrantRequest(f *testing.F) {
	f.Add([]byte(`{"amount":2500000,"note":"seed"}`))
	f.Add([]byte(`{"tenant":"alpha","amount":1}`))
	f.Add([]byte(`{"tenant":"beta","amount":1}`))
	f.Add([]byte(`{"amount":-5}`))
	f.Add([]byte(`{"amount":1e30}`))
	f.Add([]byte(`{"amount":"7"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var q api.GrantRequest
		err := decodeBody(bytes.NewReader(b), &q, false)
		if err == nil {
			err = checkGrant(q, "alpha")
		}
		if err != nil {
			checkClientError(t, err)
			return
		}
		if (q.Tenant != "" && q.Tenant != "alpha") || q.Amount < 1 || q.Amount > maxGrant {
			t.Fatalf("checkGrant accepted %+v", q)
		}
	})
}

// FuzzMetadataFilter reads a listing's query: a filter it accepts holds
// only labels a run may have, each from one metadata[KEY] parameter; a
// refusal is a bad request.
func FuzzMetadataFilter(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		md, err := parseMetadataFilter(q)
		if err != nil {
			checkClientError(t, err)
			return
		}
		if err := event.CheckMetadata(md); err != nil {
			t.Fatalf("accepted %q: %v", md, err)
		}
		for k, v := range md {
			if vs := q["metadata["+k+"]"]; len(vs) != 1 || vs[0] != v {
				t.Fatalf("accepted %s=%q from %v", k, v, q)
			}
		}
	})
}
