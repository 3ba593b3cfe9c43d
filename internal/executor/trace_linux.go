package executor

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// execTrace prints the executor's phase timings to its stderr when the
// host started it with AIRLOCK_TRACE set to the host's CLOCK_MONOTONIC
// time (ns) just before the clone (the host does so, and hands it its own
// stderr, only when it traces itself): a development aid for the cold
// start (docs/benchmarks.md, cold29b). Off, every method is a no-op on a
// nil receiver.
type execTrace struct {
	name string
	base int64
	last int64
	b    strings.Builder
}

// traceBase is AIRLOCK_TRACE as a monotonic time, or 0.
var traceBase = func() int64 {
	v, err := strconv.ParseInt(os.Getenv("AIRLOCK_TRACE"), 10, 64)
	if err != nil || v <= 0 {
		return 0
	}
	return v
}()

func monoNS() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// newExecTrace starts a trace named name whose first phase runs from base
// (a monotonic time; 0: now).
func newExecTrace(name string, base int64) *execTrace {
	if traceBase == 0 {
		return nil
	}
	if base == 0 {
		base = monoNS()
	}
	return &execTrace{name: name, base: base, last: base}
}

func (t *execTrace) mark(phase string) {
	if t == nil {
		return
	}
	now := monoNS()
	fmt.Fprintf(&t.b, " %s=%.3fms", phase, float64(now-t.last)/1e6)
	t.last = now
}

func (t *execTrace) done() {
	if t == nil {
		return
	}
	fmt.Fprintf(os.Stderr, "trace %s: total=%.3fms%s\n", t.name, float64(monoNS()-t.base)/1e6, t.b.String())
}
