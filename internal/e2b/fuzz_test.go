package e2b

import (
	"bytes"
	"errors"
	"net/url"
	"path"
	"strconv"
	"strings"
	"testing"
)

func TestDecodeStreamRequest(t *testing.T) {
	msg := []byte(`{"a":1}`)
	tests := []struct {
		name string
		in   []byte
		want []byte
		err  bool
	}{
		{"one message", appendEnvelope(nil, 0, msg), msg, false},
		{"empty message", appendEnvelope(nil, 0, nil), []byte{}, false},
		{"empty body", nil, nil, true},
		{"short prefix", []byte{0, 0}, nil, true},
		{"short message", appendEnvelope(nil, 0, msg)[:8], nil, true},
		{"trailing byte", append(appendEnvelope(nil, 0, msg), 0), nil, true},
		{"two messages", appendEnvelope(appendEnvelope(nil, 0, msg), 0, msg), nil, true},
		{"compressed", appendEnvelope(nil, flagCompressed, msg), nil, true},
		{"end stream", appendEnvelope(nil, flagEndStream, msg), nil, true},
		{"at the limit", appendEnvelope(nil, 0, bytes.Repeat([]byte("x"), 64)), bytes.Repeat([]byte("x"), 64), false},
		{"over the limit", appendEnvelope(nil, 0, bytes.Repeat([]byte("x"), 65)), nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeStreamRequest(bytes.NewReader(tt.in), 64)
			if (err != nil) != tt.err || !bytes.Equal(got, tt.want) {
				t.Errorf("decodeStreamRequest(% x) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.err)
			}
		})
	}
	var tl *TooLargeError
	_, err := decodeStreamRequest(bytes.NewReader([]byte{0, 0xff, 0xff, 0xff, 0xff}), 64)
	if !errors.As(err, &tl) || tl.Size != 1<<32-1 {
		t.Errorf("oversized prefix: %v, want a TooLargeError before reading", err)
	}
	if e := requestError(err); e.Code != codeResourceExhaust {
		t.Errorf("requestError(%v) = %v, want resource_exhausted", err, e)
	}
}

func FuzzEnvelope(f *testing.F) {
	f.Add(appendEnvelope(nil, 0, []byte(`{"process":{"cmd":"/bin/bash","args":["-l","-c","ls"]},"stdin":false}`)))
	f.Add(appendEnvelope(nil, flagEndStream, []byte(`{}`)))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0, 0xff, 0xff, 0xff, 0xff})
	f.Add(appendEnvelope(appendEnvelope(nil, 0, []byte("{}")), 0, []byte("{}")))
	f.Fuzz(func(t *testing.T, b []byte) {
		msg, err := decodeStreamRequest(bytes.NewReader(b), 1<<16)
		if err != nil {
			if e := requestError(err); e.Code != codeInvalidArgument && e.Code != codeResourceExhaust {
				t.Fatalf("requestError(%v) = %s", err, e.Code)
			}
			return
		}
		if int64(len(msg)) > 1<<16 {
			t.Fatalf("message of %d bytes past the limit", len(msg))
		}
		if again := appendEnvelope(nil, 0, msg); !bytes.Equal(again, b) {
			t.Fatalf("decoded message does not re-encode to its input")
		}
		var req startRequest
		_ = decodeMessage(msg, &req)
	})
}

func FuzzParseHost(f *testing.F) {
	for _, s := range []string{"49983-sb-abc.sbx.test", "49983-sb-abc.sbx.test:443", "3000-x.SBX.test", "-sb.sbx.test", "99999999-a.sbx.test", "1-.sbx.test", "a.b.sbx.test"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, host string) {
		id, port, ok := parseHost(host, "sbx.test")
		if !ok {
			return
		}
		if id == "" || port < 1 || port > 65535 || strings.Contains(id, ".") {
			t.Fatalf("parseHost(%q) = %q, %d", host, id, port)
		}
		if !strings.HasPrefix(strings.ToLower(host), strconv.Itoa(port)+"-") {
			t.Fatalf("parseHost(%q): port %d is not the first label's prefix", host, port)
		}
	})
}

func FuzzListQuery(f *testing.F) {
	for _, s := range []string{"metadata=user%3Dalice&state=running,paused&limit=10", "nextToken=MTIzLnNiLWFiYw", "order=desc&startedAfter=2026-01-01T00:00:00Z", "metadata=%25zz", "state=,", "limit=-1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return
		}
		lq, err := parseListQuery(q)
		if err != nil {
			return
		}
		if lq.limit < 1 || lq.limit > maxListLimit || len(lq.states) == 0 {
			t.Fatalf("parseListQuery(%q) = %+v", raw, lq)
		}
		if lq.after.id != "" {
			if c, err := parseCursor(lq.after.token()); err != nil || c != lq.after {
				t.Fatalf("cursor %+v does not round-trip: %+v %v", lq.after, c, err)
			}
		}
	})
}

func FuzzResolvePath(f *testing.F) {
	for _, s := range []string{"a.txt", "/etc/passwd", "~", "~/x", "../../etc", "/workspace/../x", "a\x00b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		got, err := resolvePath(p, Homedir)
		if err != nil {
			return
		}
		if !path.IsAbs(got) || path.Clean(got) != got || strings.ContainsRune(got, 0) {
			t.Fatalf("resolvePath(%q) = %q: want a clean absolute path", p, got)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		ok   bool
	}{
		{"off", Config{}, true},
		{"on", Config{APIAddr: "127.0.0.1:3000", SandboxAddr: "127.0.0.1:49983", Domain: "sbx.example.org"}, true},
		{"one address", Config{APIAddr: "127.0.0.1:3000"}, false},
		{"no host", Config{APIAddr: ":3000", SandboxAddr: "127.0.0.1:49983"}, false},
		{"bad domain", Config{Domain: "-x..y"}, false},
		{"timeouts", Config{DefaultTimeout: 2 * 3600e9, MaxTimeout: 3600e9}, false},
		{"tiny message", Config{MaxMessage: 10}, false},
		{"a tenant's plan", Config{Tenants: map[string]TenantConfig{"a": {MaxTimeout: 24 * 3600e9}}}, true},
		{"a tenant's bound below the default timeout", Config{Tenants: map[string]TenantConfig{"a": {MaxTimeout: 60e9}}}, false},
		{"a tenant's bound over 720h", Config{Tenants: map[string]TenantConfig{"a": {MaxTimeout: 1000 * 3600e9}}}, false},
	}
	for _, tt := range tests {
		if err := tt.c.WithDefaults().Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}
