package e2b_test

import (
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestPauseTimes measures pause and resume through the API, a memory
// pause against a filesystem one, with a running process and a workspace
// of a few files: AIRLOCK_BENCH_PAUSE=N runs N rounds of each and logs
// the medians (docs/benchmarks.md). A measurement, not a test: skipped
// unless asked for.
func TestPauseTimes(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_PAUSE"))
	if n <= 0 {
		t.Skip("set AIRLOCK_BENCH_PAUSE=N to measure")
	}
	h := newHarness(t, harnessOptions{})
	s := h.create("alpha", nil)
	h.stream(s, "process.Process/Start", bash(`for i in $(seq 100); do head -c 10000 /dev/urandom > f$i; done`), nil)
	h.streamStarted(s, "process.Process/Start", bash(counter))
	h.onlyProcess(s, "the counter")
	for _, mode := range []struct {
		name string
		body map[string]any
	}{{"memory", map[string]any{"memory": true}}, {"filesystem", map[string]any{"memory": false}}} {
		var pauses, resumes []time.Duration
		for range n {
			if len(h.processes(s)) == 0 {
				// Something to run, as the memory rounds have.
				h.streamStarted(s, "process.Process/Start", bash(counter))
				h.onlyProcess(s, "the counter")
			}
			t0 := time.Now()
			kind, _ := h.pause(s, mode.body)
			t1 := time.Now()
			rkind := h.resume(s)
			t2 := time.Now()
			if kind != mode.name || rkind != mode.name {
				t.Fatalf("%s round: pause %q, resume %q", mode.name, kind, rkind)
			}
			pauses, resumes = append(pauses, t1.Sub(t0)), append(resumes, t2.Sub(t1))
		}
		t.Logf("%s pause: median %s (min %s, max %s); resume: median %s (min %s, max %s); %d rounds",
			mode.name, median(pauses), slices.Min(pauses), slices.Max(pauses), median(resumes), slices.Min(resumes), slices.Max(resumes), n)
	}
	b, _ := os.ReadFile("/proc/loadavg")
	t.Logf("load: %s", strings.TrimSpace(string(b)))
}

func median(d []time.Duration) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}
