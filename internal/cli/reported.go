package cli

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/airlockrun/airlock/internal/event"
)

// reported is what a run's sandboxes reported about themselves (sandbox.event,
// sandbox.events_dropped), as runs show gathers it from the log.
type reported struct {
	// Progress is the latest progress event of each sandbox, in the order
	// the sandboxes first reported.
	Progress []event.SandboxEvent `json:"progress"`
	// Events are the sandboxes' events, the latest maxShownEvents.
	Events []event.SandboxEvent `json:"events"`
	// Total counts them all.
	Total int `json:"total"`
	// Dropped are the latest counts of each sandbox that dropped any.
	Dropped []event.SandboxEventsDropped `json:"dropped"`
}

// maxShownEvents bounds the sandbox events runs show prints.
const maxShownEvents = 50

// gatherReported reads run id's log for its sandboxes' reports.
func gatherReported(ctx context.Context, b interface {
	events(context.Context, string, int64) ([]event.Event, error)
}, id string,
) (reported, error) {
	out := reported{Progress: []event.SandboxEvent{}, Events: []event.SandboxEvent{}, Dropped: []event.SandboxEventsDropped{}}
	progress := map[string]int{}
	dropped := map[string]int{}
	for from := int64(1); ; {
		page, err := b.events(ctx, id, from)
		if err != nil {
			return out, err
		}
		if len(page) == 0 {
			return out, nil
		}
		for _, e := range page {
			if e.Type != event.TypeSandboxEvent && e.Type != event.TypeEventsDropped {
				continue
			}
			p, err := e.Unpack()
			if err != nil {
				continue // runs events shows it raw
			}
			switch p := p.(type) {
			case *event.SandboxEvent:
				out.Total++
				out.Events = append(out.Events, *p)
				if len(out.Events) > maxShownEvents {
					out.Events = out.Events[1:]
				}
				if p.Kind == "progress" {
					if i, ok := progress[p.Sandbox]; ok {
						out.Progress[i] = *p
					} else {
						progress[p.Sandbox] = len(out.Progress)
						out.Progress = append(out.Progress, *p)
					}
				}
			case *event.SandboxEventsDropped:
				if i, ok := dropped[p.Sandbox]; ok {
					out.Dropped[i] = *p
				} else {
					dropped[p.Sandbox] = len(out.Dropped)
					out.Dropped = append(out.Dropped, *p)
				}
			}
		}
		from = page[len(page)-1].Seq + 1
	}
}

// print writes the reports as runs show's lines. Everything in them came
// from inside a sandbox: the host replaced control characters when it
// recorded them, and each line says whose it is.
func (r reported) print(w io.Writer) {
	for _, p := range r.Progress {
		fmt.Fprintf(w, "progress [%s] %s\n", p.Sandbox, describeReported(p))
	}
	if skipped := r.Total - len(r.Events); skipped > 0 {
		fmt.Fprintf(w, "sandbox  %d earlier events (airlock runs events lists them)\n", skipped)
	}
	for _, e := range r.Events {
		fmt.Fprintf(w, "sandbox  [%s] %s %s\n", e.Sandbox, e.Kind, describeReported(e))
	}
	for _, d := range r.Dropped {
		fmt.Fprintf(w, "dropped  [%s] %s\n", d.Sandbox, describeDropped(d))
	}
}

// describeDropped says what of a sandbox's events was not kept.
func describeDropped(d event.SandboxEventsDropped) string {
	host := d.Malformed + d.UnknownKind + d.Oversize + d.Rate + d.Invalid
	exec := d.ExecOversize + d.ExecRate + d.ExecQueue + d.ExecConns
	return fmt.Sprintf("%d refused by the host (%s), %d dropped in the sandbox (%s), %d artifacts not stored",
		host, counts("malformed", d.Malformed, "unknown kind", d.UnknownKind, "too big", d.Oversize, "too fast", d.Rate, "invalid", d.Invalid),
		exec, counts("too long", d.ExecOversize, "too fast", d.ExecRate, "queue full", d.ExecQueue, "connections", d.ExecConns), d.Artifacts)
}

// describeReported is one line of what a sandbox event says.
func describeReported(e event.SandboxEvent) string {
	var parts []string
	num := func(f *float64) string { return strconv.FormatFloat(*f, 'g', 6, 64) }
	switch e.Kind {
	case "progress":
		if e.Pct != nil {
			parts = append(parts, num(e.Pct)+"%")
		}
		parts = append(parts, e.Message)
	case "log":
		parts = append(parts, cmpOr(e.Level, "info")+":", e.Message)
	case "metric":
		if e.Value != nil {
			parts = append(parts, e.Name, "=", num(e.Value)+e.Unit)
		}
	case "test":
		parts = append(parts, e.Name, e.Status)
		if e.DurationS != nil {
			parts = append(parts, "("+num(e.DurationS)+"s)")
		}
	case "artifact":
		parts = append(parts, e.Path)
		if e.Artifact != "" {
			parts = append(parts, "-> "+e.Artifact)
		}
		if e.Refused != "" {
			parts = append(parts, "refused: "+e.Refused)
		}
	default:
		parts = append(parts, string(e.Data))
	}
	return clip(oneLine(strings.Join(parts, " ")), 200)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// counts lists the nonzero of name, n pairs: "2 malformed, 1 too big".
func counts(pairs ...any) string {
	var out []string
	for i := 0; i+1 < len(pairs); i += 2 {
		if n := pairs[i+1].(int64); n > 0 {
			out = append(out, fmt.Sprintf("%d %s", n, pairs[i]))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
