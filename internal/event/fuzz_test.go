package event

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// FuzzDecode feeds arbitrary text to Decode: it may refuse, but what it
// accepts must validate, encode, and decode again to the same event and the
// same bytes.
func FuzzDecode(f *testing.F) {
	id := "run_01KB6Q3G0000000000000000AB"
	e := Event{RunID: id, Seq: 1, Type: TypeRunCreated, Time: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC), Payload: json.RawMessage(`{"task":"fix \u003cit\u003e"}`)}
	Seal(id, 0, Hash{}, &e)
	b, _ := json.Marshal(e)
	f.Add(b)
	var ind bytes.Buffer
	_ = json.Indent(&ind, b, "", "\t")
	f.Add(ind.Bytes())
	f.Add([]byte(`{"run_id":"run_01KB6Q3G0000000000000000AB","seq":2,"type":"x.y","time":"2026-01-02T03:04:05+01:00","payload":{"a":[1,{"b":null}]},"prev_hash":"` + e.Hash.String() + `","hash":"` + e.Hash.String() + `"}`))
	f.Add([]byte(`{"seq":1,"seq":2}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Decode(b)
		if err != nil {
			return
		}
		if err := e.Validate(); err != nil {
			t.Fatalf("Decode accepted an event that does not validate: %v", err)
		}
		out, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("decoded event does not encode: %v", err)
		}
		e2, err := Decode(out)
		if err != nil {
			t.Fatalf("re-encoded event does not decode: %v\n%s", err, out)
		}
		if e2.ComputeHash() != e.ComputeHash() || e2.Hash != e.Hash || e2.PrevHash != e.PrevHash {
			t.Fatalf("event changed across encode and decode:\n%+v\n%+v", e, e2)
		}
		out2, err := json.Marshal(e2)
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("encoding is not stable:\n%s\n%s", out, out2)
		}
	})
}

// FuzzCanonical checks that the hash encoding is unambiguous: an encoded
// event parses back to the same fields, and any byte string that parses
// encodes back to itself, so two different events can never share an
// encoding (and hence, short of a SHA-256 collision, a hash).
func FuzzCanonical(f *testing.F) {
	f.Add("run_01KB6Q3G0000000000000000AB", int64(1), "run.created", int64(1764417600123456789), []byte(`{"a":1}`), make([]byte, 32), []byte{})
	f.Add("", int64(-1), "", int64(-1), []byte{}, []byte{1, 2}, []byte("\x00\x00\x00\x10airlock.event.v1"))
	f.Add("run_a", int64(1<<62), "ab", int64(0), []byte("{}"), bytes.Repeat([]byte{0xff}, 32), []byte{0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, runID string, seq int64, typ string, ns int64, payload, prev, raw []byte) {
		e := Event{RunID: runID, Seq: seq, Type: Type(typ), Time: time.Unix(0, ns), Payload: payload}
		copy(e.PrevHash[:], prev)
		digest := sha256.Sum256(payload)
		enc := appendCanonical(nil, e, digest)
		if len(enc) != canonicalSize(e) {
			t.Fatalf("canonicalSize = %d, encoding is %d bytes", canonicalSize(e), len(enc))
		}
		got, gotDigest, err := parseCanonical(enc)
		if err != nil {
			t.Fatalf("parseCanonical(appendCanonical(e)) = %v", err)
		}
		if got.RunID != e.RunID || got.Seq != e.Seq || got.Type != e.Type || got.Time.UnixNano() != ns ||
			gotDigest != digest || got.PrevHash != e.PrevHash {
			t.Fatalf("round trip changed the event:\n%+v\n%+v", e, got)
		}
		if _, _, err := parseCanonical(enc[:len(enc)-1]); err == nil {
			t.Fatal("a truncated encoding parses")
		}
		if _, _, err := parseCanonical(append(enc, 0)); err == nil {
			t.Fatal("an encoding with a trailing byte parses")
		}
		if p, d, err := parseCanonical(raw); err == nil {
			if again := appendCanonical(nil, p, d); !bytes.Equal(again, raw) {
				t.Fatalf("parse then encode changed the bytes:\n%x\n%x", raw, again)
			}
		}
	})
}

// FuzzCanonicalPayload checks CanonicalPayload against encoding/json: it
// accepts exactly the valid JSON objects (within its size and depth
// limits), keeps their meaning, and its output is a fixed point of itself
// and of Decode's normalization. With a scrubber, the output stays valid
// and no scrubbed secret survives in any decoded string or key.
func FuzzCanonicalPayload(f *testing.F) {
	f.Add([]byte(`{"b":1,"a":"<x>"}`), "secret")
	f.Add([]byte(`{"a":"\u0073ecret","secret":[1.50,"\u2028"]}`), "secret")
	f.Add([]byte(`{"n":31337}`), "313")
	f.Add([]byte(`{"a":"x"}`), "\"")
	f.Add([]byte("{\"a\":\"\xff\\ud800\",\"a\":[]}"), "\ufffd")
	f.Add([]byte(` {"a" : [ 1 , -0.5e+3 , true , null , { } ] } `), "0.5e")
	f.Add([]byte(`{"pem":"-----BEGIN KEY\nDATA\"x\\y\t-----"}`), "KEY\nDATA\"x\\")
	f.Fuzz(func(t *testing.T, p []byte, secret string) {
		c, err := CanonicalPayload(p, nil)
		trimmed := bytes.TrimSpace(p)
		object := len(trimmed) > 0 && trimmed[0] == '{' && json.Valid(p)
		if len(trimmed) == 0 {
			object = true // empty means {}
		}
		if err != nil {
			msg := err.Error()
			if object && !strings.Contains(msg, "deeply") && !strings.Contains(msg, "limit") {
				t.Fatalf("CanonicalPayload refused a valid JSON object: %v\n%q", err, p)
			}
			return
		}
		if !object {
			t.Fatalf("CanonicalPayload accepted what encoding/json does not: %q -> %s", p, c)
		}
		if err := checkCanonical(c); err != nil {
			t.Fatalf("CanonicalPayload output fails checkCanonical: %v\n%s", err, c)
		}
		again, err := CanonicalPayload(c, nil)
		if err != nil || !bytes.Equal(again, c) {
			t.Fatalf("CanonicalPayload not idempotent: %s -> %s, %v", c, again, err)
		}
		if len(trimmed) > 0 {
			var want, got any
			dw := json.NewDecoder(bytes.NewReader(p))
			dw.UseNumber()
			dg := json.NewDecoder(bytes.NewReader(c))
			dg.UseNumber()
			if err := dw.Decode(&want); err != nil {
				t.Fatal(err)
			}
			if err := dg.Decode(&got); err != nil {
				t.Fatalf("output does not decode: %v\n%s", err, c)
			}
			if !reflect.DeepEqual(want, got) {
				t.Fatalf("meaning changed:\n%q\n%s", p, c)
			}
		}
		if len(secret) < 4 || !utf8.ValidString(secret) {
			// secret.Redactor ignores values this short. A secret that
			// is not UTF-8 cannot occur in decoded JSON text, and scrubbing
			// part of a U+FFFD can leave bytes that decode as another
			// U+FFFD, recreating such a "secret".
			return
		}
		scrub := func(b []byte) []byte { return bytes.ReplaceAll(b, []byte(secret), []byte("[redacted]")) }
		s, err := CanonicalPayload(p, scrub)
		if err != nil {
			return // it may grow past the limit
		}
		if err := checkCanonical(s); err != nil {
			t.Fatalf("scrubbed payload fails checkCanonical: %v\n%s", err, s)
		}
		var v any
		if err := json.Unmarshal(s, &v); err != nil {
			t.Fatalf("scrubbed payload does not unmarshal: %v", err)
		}
		if leaks(v, secret) {
			t.Fatalf("secret %q survives scrubbing in %s", secret, s)
		}
	})
}

// leaks reports whether secret occurs in any decoded string or key of v.
func leaks(v any, secret string) bool {
	switch v := v.(type) {
	case string:
		return bytes.Contains([]byte(v), []byte(secret)) && !bytes.Contains([]byte("[redacted]"), []byte(secret))
	case []any:
		for _, x := range v {
			if leaks(x, secret) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			if leaks(k, secret) || leaks(x, secret) {
				return true
			}
		}
	}
	return false
}
