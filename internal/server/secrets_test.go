package server_test

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/api"
)

// TestSecrets: a secret is set (201, then 200 when replaced), listed with
// its hosts and times, and deleted; the value is never in any answer, error
// or log line, and the host's redactor learns it. Bad input is refused
// without quoting the value.
func TestSecrets(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{})
	key := h.key("alpha", "secrets:write")
	const value, other = "ghp_SERVERSECRET0123456789", "ghp_REPLACEDVALUE987654"

	var s api.Secret
	h.must(http.StatusCreated, "PUT", "/v1/secrets/GITHUB_TOKEN", key,
		map[string]any{"value": value, "hosts": []string{"API.GitHub.com.", "*.githubusercontent.com"}}).json(t, &s)
	if s.Name != "GITHUB_TOKEN" || strings.Join(s.Hosts, ",") != "*.githubusercontent.com,api.github.com" || s.Created.IsZero() || !s.Updated.Equal(s.Created) {
		t.Errorf("set %+v", s)
	}
	if got := h.red.String("token " + value); got != "token [redacted]" {
		t.Errorf("the redactor makes %q of the value", got)
	}
	var again api.Secret
	h.must(http.StatusOK, "PUT", "/v1/secrets/GITHUB_TOKEN", key, map[string]any{"value": other}).json(t, &again)
	if !again.Created.Equal(s.Created) || len(again.Hosts) != 0 || again.Hosts == nil {
		t.Errorf("replaced %+v (first %+v)", again, s)
	}
	h.must(http.StatusCreated, "PUT", "/v1/secrets/pem.key", key, map[string]any{"value": "-----BEGIN KEY-----\nMIIE\n-----END KEY-----\n"})
	// The store holds the value the request carried, byte for byte.
	v, info, err := h.secrets.Get(context.Background(), "alpha", "GITHUB_TOKEN")
	if err != nil || string(v.Reveal()) != other || info.Name != "GITHUB_TOKEN" {
		t.Errorf("stored %v, %+v", err, info)
	}

	var l api.SecretList
	h.must(http.StatusOK, "GET", "/v1/secrets", key, nil).json(t, &l)
	if l.Tenant != "alpha" || len(l.Secrets) != 2 || l.Secrets[0].Name != "GITHUB_TOKEN" || l.Secrets[1].Name != "pem.key" {
		t.Errorf("list %+v", l)
	}

	for _, tc := range []struct {
		name, path string
		body       any
		code       string
	}{
		{"bad name", "/v1/secrets/bad%2Fname", map[string]any{"value": value}, api.CodeBadRequest},
		{"name too long", "/v1/secrets/" + strings.Repeat("n", 129), map[string]any{"value": value}, api.CodeBadRequest},
		{"no body", "/v1/secrets/x", nil, api.CodeBadRequest},
		{"empty value", "/v1/secrets/x", map[string]any{"value": ""}, api.CodeBadRequest},
		{"value too large", "/v1/secrets/x", map[string]any{"value": strings.Repeat("v", 64<<10+1)}, api.CodeTooLarge},
		{"body too large", "/v1/secrets/x", map[string]any{"value": strings.Repeat("\n", 64<<10)}, api.CodeTooLarge},
		{"bad host", "/v1/secrets/x", map[string]any{"value": value, "hosts": []string{"https://x/"}}, api.CodeBadRequest},
		{"unknown field", "/v1/secrets/x", map[string]any{"value": value, "secret": value}, api.CodeBadRequest},
		{"value as a field name", "/v1/secrets/x", []byte(`{"` + value + `":1}`), api.CodeBadRequest},
		{"bad escape", "/v1/secrets/x", []byte(`{"value":"` + value + `\q"}`), api.CodeBadRequest},
		{"lone surrogate", "/v1/secrets/x", []byte(`{"value":"` + value + `\ud800"}`), api.CodeBadRequest},
		{"not UTF-8", "/v1/secrets/x", []byte("{\"value\":\"" + value + "\xff\"}"), api.CodeBadRequest},
		{"trailing data", "/v1/secrets/x", []byte(`{"value":"a"} {"value":"` + value + `"}`), api.CodeBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := h.do("PUT", tc.path, key, tc.body)
			if e := r.errBody(t); e.Code != tc.code {
				t.Errorf("PUT %s = %d %+v, want %s", tc.path, r.status, e, tc.code)
			}
		})
	}
	if got := h.do("GET", "/v1/secrets", key, nil); bytes.Contains(got.body, []byte(`"x"`)) {
		t.Errorf("a refused secret was stored: %s", got.body)
	}

	h.must(http.StatusNoContent, "DELETE", "/v1/secrets/GITHUB_TOKEN", key, nil)
	for _, name := range []string{"GITHUB_TOKEN", "never-set", "bad%2Fname"} {
		if r := h.do("DELETE", "/v1/secrets/"+name, key, nil); r.status != http.StatusNotFound || r.errBody(t).Code != api.CodeNotFound {
			t.Errorf("DELETE %s = %d %s, want not_found", name, r.status, r.body)
		}
	}
	h.must(http.StatusOK, "GET", "/v1/secrets", key, nil).json(t, &l)
	if len(l.Secrets) != 1 || l.Secrets[0].Name != "pem.key" {
		t.Errorf("after delete: %+v", l)
	}

	// Nothing the server said or logged holds a value, nor a piece of one.
	logs, bodies := h.seen()
	for _, v := range []string{value, other, "SERVERSECRET", "REPLACEDVALUE", "MIIE"} {
		if bytes.Contains(bodies, []byte(v)) {
			t.Errorf("a response holds %q", v)
		}
		if bytes.Contains(logs, []byte(v)) {
			t.Errorf("the server's log holds %q", v)
		}
	}
	if !bytes.Contains(logs, []byte("secret set")) {
		t.Error("the log does not record the secrets set (did it capture anything?)")
	}
}

// TestSecretsUnavailable: a server without a secret store answers the
// secrets endpoints unavailable.
func TestSecretsUnavailable(t *testing.T) {
	t.Parallel()
	h := newHarness(t, harnessOptions{noSecrets: true})
	key := h.key("alpha", "secrets:write")
	for _, tc := range []struct{ method, path string }{{"GET", "/v1/secrets"}, {"PUT", "/v1/secrets/x"}, {"DELETE", "/v1/secrets/x"}} {
		r := h.do(tc.method, tc.path, key, map[string]any{"value": "v"})
		if e := r.errBody(t); e.Code != api.CodeUnavailable {
			t.Errorf("%s %s = %+v, want unavailable", tc.method, tc.path, e)
		}
	}
}
