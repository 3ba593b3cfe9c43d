package linux

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// tracer prints phase timings to stderr when AIRLOCK_TRACE is set; a
// development aid for the cold-start path.
type tracer struct {
	name  string
	start time.Time
	last  time.Time
	b     strings.Builder
}

var traceOn = os.Getenv("AIRLOCK_TRACE") != ""

func newTracer(name string) *tracer {
	if !traceOn {
		return nil
	}
	now := time.Now()
	return &tracer{name: name, start: now, last: now}
}

func (t *tracer) mark(phase string) {
	if t == nil {
		return
	}
	now := time.Now()
	fmt.Fprintf(&t.b, " %s=%.2fms", phase, float64(now.Sub(t.last).Microseconds())/1000)
	t.last = now
}

func (t *tracer) done() {
	if t == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "trace %s: total=%.2fms%s\n", t.name, float64(time.Since(t.start).Microseconds())/1000, t.b.String())
}
