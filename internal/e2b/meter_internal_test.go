package e2b

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// measured is a sandbox whose host measures the CPU time it is told.
type measured struct {
	sandbox.Sandbox
	cpu time.Duration
}

func (m *measured) Measure() (sandbox.Metrics, error) { return sandbox.Metrics{CPU: m.cpu}, nil }

// TestUsagePricing: a usage is priced from the host's measures and
// prices, a fraction of a micro-credit is carried to the next usage (so
// many short ticks cost what one long one does), and no measure
// overflows the cost.
func TestUsagePricing(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name   string
		price  Price
		memory int64
		ticks  []time.Duration // wall time of each tick
		cpu    []time.Duration // CPU time the sandbox has at each tick
		want   []int64         // cost of each tick
	}{
		{"sandbox seconds", Price{SandboxSecond: 10}, 0, []time.Duration{30 * time.Second}, []time.Duration{0}, []int64{300}},
		{
			"cpu seconds",
			Price{CPUSecond: 20},
			0,
			[]time.Duration{30 * time.Second, 30 * time.Second},
			[]time.Duration{1500 * time.Millisecond, 4 * time.Second},
			[]int64{30, 50},
		},
		{"memory GiB-seconds", Price{MemoryGiBSecond: 5}, 2 << 30, []time.Duration{10 * time.Second}, []time.Duration{0}, []int64{100}},
		{
			"fractions carried",
			Price{SandboxSecond: 1},
			0,
			[]time.Duration{400 * time.Millisecond, 400 * time.Millisecond, 400 * time.Millisecond},
			[]time.Duration{0, 0, 0},
			[]int64{0, 0, 1},
		},
		{
			"all three",
			Price{SandboxSecond: 10, CPUSecond: 20, MemoryGiBSecond: 5},
			1 << 30,
			[]time.Duration{time.Minute},
			[]time.Duration{30 * time.Second},
			[]int64{600 + 600 + 300},
		},
		{
			"huge",
			Price{SandboxSecond: maxPrice, CPUSecond: maxPrice, MemoryGiBSecond: maxPrice},
			1 << 50,
			[]time.Duration{24 * time.Hour},
			[]time.Duration{time.Hour},
			[]int64{1_000_000_000_000},
		},
		{
			"cpu going back is no credit",
			Price{CPUSecond: 1000},
			0,
			[]time.Duration{time.Second, time.Second},
			[]time.Duration{2 * time.Second, time.Second},
			[]int64{2000, 0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := &Server{cfg: Config{Price: tt.price}}
			b := &box{id: "sb-test", spec: sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: tt.memory}}}
			sb := &measured{}
			m := meterState{at: t0}
			now := t0
			for i, d := range tt.ticks {
				now = now.Add(d)
				sb.cpu = tt.cpu[i]
				u, next := s.usage(b, &live{sb: sb}, m, now, false)
				if u.CostMicroCredits != tt.want[i] || u.SandboxMS != d.Milliseconds() || u.CPUMS < 0 {
					t.Errorf("tick %d: usage %+v, want cost %d", i, u, tt.want[i])
				}
				m = next
			}
		})
	}
}

// FuzzPausedState: a paused state file is decoded without panicking, and
// one that is accepted names either a checkpoint by a well-formed digest
// or a snapshot file inside StateDir.
func FuzzPausedState(f *testing.F) {
	f.Add([]byte(`{"sandbox_id":"sb-0123456789ab","token":"ab","envs":{"K":"v"},"snapshot":"snapshot-1.tar"}`))
	f.Add([]byte(`{"sandbox_id":"sb-1","token":"t","snapshot":"snapshot-../../etc/passwd"}`))
	f.Add([]byte(`{"sandbox_id":"sb-1","token":"t","snapshot":"snapshot-x","envs":{"A=B":"c"}}`))
	f.Add([]byte(`{"sandbox_id":"sb-1","token":"t","checkpoint":"sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}`))
	f.Add([]byte(`{"sandbox_id":"sb-1","token":"t","checkpoint":"../x","snapshot":"snapshot-1.tar"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, err := parsePaused(b)
		if err != nil {
			return
		}
		if ps.Token == "" || (ps.Checkpoint == "") == (ps.Snapshot == "") {
			t.Fatalf("parsePaused accepted %+v: want a token and one of a checkpoint and a snapshot file", ps)
		}
		if ps.Checkpoint != "" {
			if err := blob.ValidDigest(ps.Checkpoint); err != nil {
				t.Fatalf("parsePaused accepted checkpoint %q: %v", ps.Checkpoint, err)
			}
			return
		}
		dir := "/state"
		p := filepath.Join(dir, ps.Snapshot)
		if filepath.Dir(p) != dir || !strings.HasPrefix(filepath.Base(p), snapshotPrefix) {
			t.Fatalf("parsePaused accepted %+v: snapshot %s is not a snapshot file of %s", ps, p, dir)
		}
	})
}
