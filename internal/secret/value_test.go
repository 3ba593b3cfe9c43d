package secret

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"testing"
)

const testSecret = "s3cr3t-VALUE-xyz"

func TestValueNeverPrints(t *testing.T) {
	v := NewValue([]byte(testSecret))
	type exported struct {
		Token Value
		N     int
	}
	type unexported struct {
		token Value
		n     int
	}
	outer := unexported{token: v, n: 1}
	formats := []string{"%v", "%+v", "%#v", "%s", "%q", "%x", "%X", "%d", "%10.3s", "%T %v"}
	subjects := map[string]any{
		"value":              v,
		"pointer":            &v,
		"exported field":     exported{Token: v},
		"unexported field":   outer,
		"unexported pointer": &outer,
		"slice":              []Value{v, v},
		"map":                map[string]Value{"k": v},
		"interface":          any(v),
		"reflect field":      reflect.ValueOf(outer).Field(0),
	}
	for name, subj := range subjects {
		for _, f := range formats {
			t.Run(name+" "+f, func(t *testing.T) {
				var got string
				if strings.HasPrefix(f, "%T") {
					got = fmt.Sprintf(f, subj, subj)
				} else {
					got = fmt.Sprintf(f, subj)
				}
				if leaks(got) {
					t.Errorf("Sprintf(%q) = %q leaks the value", f, got)
				}
			})
		}
	}
	t.Run("print", func(t *testing.T) {
		if got := fmt.Sprint(v, &v, outer) + fmt.Sprintln(v, outer); leaks(got) {
			t.Errorf("Sprint = %q leaks", got)
		}
	})
	t.Run("errorf", func(t *testing.T) {
		if got := fmt.Errorf("x %v: %w", v, fmt.Errorf("%s", v)).Error(); leaks(got) {
			t.Errorf("Errorf = %q leaks", got)
		}
	})
}

// leaks reports whether s shows the test value in any common encoding.
func leaks(s string) bool {
	return strings.Contains(s, testSecret) ||
		strings.Contains(s, fmt.Sprintf("%x", testSecret)) ||
		strings.Contains(s, fmt.Sprintf("%X", testSecret)) ||
		strings.Contains(s, "s3cr3t") ||
		strings.Contains(s, fmt.Sprint([]byte(testSecret))) //nolint:staticcheck // QF1010: the bytes' decimal form, [115 51 ...], is the encoding looked for
}

func TestValueMarshal(t *testing.T) {
	v := NewValue([]byte(testSecret))
	for _, subj := range []any{v, &v, struct{ V Value }{v}, map[string]any{"v": v}} {
		b, err := json.Marshal(subj)
		if err != nil {
			t.Fatalf("json.Marshal: %v", err)
		}
		if leaks(string(b)) || !strings.Contains(string(b), redacted) {
			t.Errorf("json.Marshal(%T) = %s", subj, b)
		}
	}
	txt, err := v.MarshalText()
	if err != nil || string(txt) != redacted {
		t.Errorf("MarshalText = %q, %v", txt, err)
	}
}

func TestValueSlog(t *testing.T) {
	v := NewValue([]byte(testSecret))
	for name, h := range map[string]func(*bytes.Buffer) slog.Handler{
		"text": func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
		"json": func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
	} {
		t.Run(name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(h(&buf))
			//nolint:sloglint // every way a Value reaches a log line: pairs, attributes and groups
			l.Info("msg", "v", v, "p", &v, "s", struct{ V Value }{v}, slog.Any("any", v), slog.Group("g", "v", v))
			l.With("w", v).Info("with")
			if leaks(buf.String()) {
				t.Errorf("slog %s output leaks: %s", name, buf.String())
			}
			if !strings.Contains(buf.String(), redacted) {
				t.Errorf("slog %s output lacks %q: %s", name, redacted, buf.String())
			}
		})
	}
}

func TestValueReveal(t *testing.T) {
	src := []byte(testSecret)
	v := NewValue(src)
	src[0] = 'X'
	got := v.Reveal()
	if string(got) != testSecret {
		t.Fatalf("Reveal = %q after caller changed its slice", got)
	}
	got[0] = 'Y'
	if string(v.Reveal()) != testSecret {
		t.Fatalf("Reveal returned shared bytes")
	}
	if v.Len() != len(testSecret) {
		t.Errorf("Len = %d, want %d", v.Len(), len(testSecret))
	}
	var zero Value
	if zero.Reveal() != nil || zero.Len() != 0 || zero.String() != redacted {
		t.Errorf("zero Value: Reveal=%v Len=%d String=%q", zero.Reveal(), zero.Len(), zero.String())
	}
}
