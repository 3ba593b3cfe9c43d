package telemetry

import (
	"context"
	"fmt"
	"log/slog"
)

// Redactor scrubs secret values from text; internal/secret's *Redactor is
// one. It must be safe for concurrent use, and may learn values over time.
type Redactor interface {
	String(s string) string
}

// RedactingHandler is a slog.Handler that scrubs every registered secret
// value from a record's message and attribute values (in groups too, and
// errors, Stringers and other values by their text) before the handler it
// wraps sees them. Keys and group names are the code's own, and are kept.
type RedactingHandler struct {
	h   slog.Handler
	red Redactor
}

var _ slog.Handler = (*RedactingHandler)(nil)

// NewRedactingHandler returns h behind red.
func NewRedactingHandler(h slog.Handler, red Redactor) *RedactingHandler {
	return &RedactingHandler{h: h, red: red}
}

// Enabled implements slog.Handler.
func (r *RedactingHandler) Enabled(ctx context.Context, l slog.Level) bool {
	return r.h.Enabled(ctx, l)
}

// Handle implements slog.Handler: it passes on a scrubbed copy of rec.
func (r *RedactingHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, r.red.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(r.attr(a))
		return true
	})
	return r.h.Handle(ctx, out)
}

// WithAttrs implements slog.Handler. The attributes are scrubbed with the
// values known now.
func (r *RedactingHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	clean := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		clean[i] = r.attr(a)
	}
	return &RedactingHandler{h: r.h.WithAttrs(clean), red: r.red}
}

// WithGroup implements slog.Handler.
func (r *RedactingHandler) WithGroup(name string) slog.Handler {
	return &RedactingHandler{h: r.h.WithGroup(name), red: r.red}
}

// attr returns a with its value scrubbed.
func (r *RedactingHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve() // a LogValuer (secret.Value) gives its safe form
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, r.red.String(v.String()))
	case slog.KindGroup:
		group := v.Group()
		clean := make([]slog.Attr, len(group))
		for i, g := range group {
			clean[i] = r.attr(g)
		}
		return slog.Attr{Key: a.Key, Value: slog.GroupValue(clean...)}
	case slog.KindAny:
		switch x := v.Any().(type) {
		case error:
			// An error is logged by its text; the handler would call
			// Error() itself, after the scrubbing.
			return slog.String(a.Key, r.red.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, r.red.String(x.String()))
		case []byte:
			return slog.String(a.Key, r.red.String(string(x)))
		default:
			// A structured value keeps its shape unless its text holds
			// a secret; then only the scrubbed text is logged.
			s := fmt.Sprintf("%+v", x)
			if c := r.red.String(s); c != s {
				return slog.String(a.Key, c)
			}
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
