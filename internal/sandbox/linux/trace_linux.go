package linux

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// monoNS is CLOCK_MONOTONIC in ns: the executor's trace counts from it.
func monoNS() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano()
}

// tracer prints phase timings to stderr when AIRLOCK_TRACE is set; a
// development aid for the cold-start path.
type tracer struct {
	name  string
	start time.Time
	last  time.Time
	b     strings.Builder
}

var traceOn = os.Getenv("AIRLOCK_TRACE") != ""

// frontMarks are the front end's steps before its first traced phase
// (FrontMark), printed with it; pkgInit is the first of them, taken when
// this package is initialised: about where the Go runtime's own start
// ends (the packages' inits together take a fraction of a millisecond).
var (
	frontMu    sync.Mutex
	frontMarks []frontMark
	_          = markInit()
)

type frontMark struct {
	name string
	at   int64 // monoNS
	// cpu (µs of user and system time) and faults (minor) of the process
	// so far; set for the first mark only.
	cpu, faults int64
}

func markInit() bool {
	if traceOn {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		cpu := ru.Utime.Sec*1e6 + ru.Utime.Usec + ru.Stime.Sec*1e6 + ru.Stime.Usec
		m := frontMark{name: "pkginit", at: monoNS(), faults: ru.Minflt, cpu: cpu}
		frontMarks = append(frontMarks, m)
	}
	return true
}

// FrontMark records, with AIRLOCK_TRACE set, that the front end finished
// step name now; the marks are printed on the `trace front:` line, each as
// the time since the one before (the first, pkginit, since AIRLOCK_TRACE's
// time).
func FrontMark(name string) {
	if !traceOn {
		return
	}
	frontMu.Lock()
	frontMarks = append(frontMarks, frontMark{name: name, at: monoNS()})
	frontMu.Unlock()
}

func newTracer(name string) *tracer {
	if !traceOn {
		return nil
	}
	frontOnce.Do(traceFront)
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

// at records where phase began, from the harness's start of the process
// (frontBase), when that is known.
func (t *tracer) at(phase string) {
	if t == nil || frontBase == 0 {
		return
	}
	fmt.Fprintf(&t.b, " %s=%.3fms", phase, float64(monoNS()-frontBase)/1e6)
}

func (t *tracer) done() {
	if t == nil {
		return
	}
	if frontBase > 0 {
		// Where it ended, from the harness's start of the process.
		fmt.Fprintf(&t.b, " end=%.3fms", float64(monoNS()-frontBase)/1e6)
	}
	fmt.Fprintf(os.Stderr, "trace %s: total=%.2fms%s\n", t.name, float64(time.Since(t.start).Microseconds())/1000, t.b.String())
}

var frontOnce sync.Once

// traceFront prints, at this process's first traced phase, the time since
// AIRLOCK_TRACE's value when that is a CLOCK_MONOTONIC time in ns (what
// bench/phases.py sets just before it starts the command): the front
// end's start, with the harness's fork and exec.
func traceFront() {
	base, err := strconv.ParseInt(os.Getenv("AIRLOCK_TRACE"), 10, 64)
	if d := monoNS() - base; err != nil || d <= 0 || d > int64(time.Minute) {
		return // not a time of the last minute (AIRLOCK_TRACE=1)
	}
	frontBase = base
	var b strings.Builder
	frontMu.Lock()
	last := base
	for _, m := range frontMarks {
		fmt.Fprintf(&b, " %s=%.3fms", m.name, float64(m.at-last)/1e6)
		if m.name == "pkginit" {
			fmt.Fprintf(&b, " pkginitcpu=%.3fms pkginitfaults=%d", float64(m.cpu)/1e3, m.faults)
		}
		last = m.at
	}
	frontMu.Unlock()
	now := monoNS()
	fmt.Fprintf(os.Stderr, "trace front:%s last=%.3fms tocreate=%.3fms\n", b.String(), float64(now-last)/1e6, float64(now-base)/1e6)
}

// frontBase is AIRLOCK_TRACE's monotonic time (traceFront), or 0: each
// trace line then says where it ended from there (end=).
var frontBase int64
