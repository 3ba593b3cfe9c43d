package telemetry_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/telemetry"
)

type hostPort struct {
	Host string
	Port int
}

type stringer string

func (s stringer) String() string { return string(s) }

// TestRedactingHandler: a secret in a record's message or any attribute
// (string, error, Stringer, struct, bytes, group, logger.With, a secret
// learnt after the logger was made) never reaches the JSON; the rest of
// the record is kept as it was.
func TestRedactingHandler(t *testing.T) {
	t.Parallel()
	late := "late-secret-987654321"
	for _, tc := range []struct {
		name string
		log  func(l *slog.Logger)
		want map[string]any // fields of the JSON line, besides time/level
	}{
		{
			"message", func(l *slog.Logger) { l.Info("token is " + secretValue) },
			map[string]any{"msg": "token is [redacted]"},
		},
		{
			"string attr", func(l *slog.Logger) { l.Info("m", "run_id", "run_1", "header", "Bearer "+secretValue) },
			map[string]any{"run_id": "run_1", "header": "Bearer [redacted]"},
		},
		{
			"error attr", func(l *slog.Logger) {
				l.Warn("m", "err", fmt.Errorf("upstream said %s: %w", secretValue, errors.New("401")))
			},
			map[string]any{"err": "upstream said [redacted]: 401"},
		},
		{
			"stringer", func(l *slog.Logger) { l.Info("m", "v", stringer("x"+secretValue)) },
			map[string]any{"v": "x[redacted]"},
		},
		{
			"struct with a secret", func(l *slog.Logger) { l.Info("m", "v", hostPort{Host: secretValue, Port: 1}) },
			map[string]any{"v": "{Host:[redacted] Port:1}"},
		},
		{
			"struct without", func(l *slog.Logger) { l.Info("m", "v", hostPort{Host: "example.com", Port: 1}) },
			map[string]any{"v": map[string]any{"Host": "example.com", "Port": float64(1)}},
		},
		{
			"bytes", func(l *slog.Logger) { l.Info("m", "v", []byte("b "+secretValue)) },
			map[string]any{"v": "b [redacted]"},
		},
		{
			"group", func(l *slog.Logger) { l.Info("m", slog.Group("req", "auth", secretValue, "n", 3)) },
			map[string]any{"req": map[string]any{"auth": "[redacted]", "n": float64(3)}},
		},
		{
			"with", func(l *slog.Logger) {
				l.With("tenant", "acme", "key", secretValue).WithGroup("g").Info("m", "a", secretValue)
			},
			map[string]any{"tenant": "acme", "key": "[redacted]", "g": map[string]any{"a": "[redacted]"}},
		},
		{
			"secret.Value", func(l *slog.Logger) { l.Info("m", "v", secret.NewValue([]byte("another-secret-value"))) },
			map[string]any{"v": "[redacted]"},
		},
		{
			"learnt later", func(l *slog.Logger) { l.Info("m " + late) },
			map[string]any{"msg": "m [redacted]"},
		},
		{
			"numbers and bools", func(l *slog.Logger) { l.Info("m", "n", 42, "ok", true) },
			map[string]any{"n": float64(42), "ok": true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			red := newRedactor()
			var buf bytes.Buffer
			l := slog.New(telemetry.NewRedactingHandler(slog.NewJSONHandler(&buf, nil), red))
			red.Add(secret.NewValue([]byte(late)))
			tc.log(l)
			if strings.Contains(buf.String(), secretValue) || strings.Contains(buf.String(), late) {
				t.Fatalf("the secret reached the log: %s", buf.String())
			}
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("log line %q: %v", buf.String(), err)
			}
			for k, want := range tc.want {
				if fmt.Sprint(got[k]) != fmt.Sprint(want) {
					t.Errorf("field %s = %#v, want %#v (line %s)", k, got[k], want, buf.String())
				}
			}
		})
	}
}

// TestRedactingHandlerLevel: the wrapped handler's level decides.
func TestRedactingHandlerLevel(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	l := slog.New(telemetry.NewRedactingHandler(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}), newRedactor()))
	l.Info("dropped")
	l.Warn("kept")
	if strings.Contains(buf.String(), "dropped") || !strings.Contains(buf.String(), "kept") {
		t.Errorf("log %q: want only the warning", buf.String())
	}
}
