package cgroup

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestValidName(t *testing.T) {
	for _, name := range []string{"", ".", "..", "a/b", "../x", "a..b", "a\x00b", strings.Repeat("x", 256)} {
		if validName(name) == nil {
			t.Errorf("validName(%q) = nil, want an error", name)
		}
	}
	for _, name := range []string{"a", "sbx-01HZY", "a.b", "airlock"} {
		if err := validName(name); err != nil {
			t.Errorf("validName(%q) = %v, want nil", name, err)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	bad := []Limits{{MemoryBytes: -1}, {Pids: -1}, {CPUs: -0.5}, {CPUs: 1e300}}
	for _, l := range bad {
		if l.validate() == nil {
			t.Errorf("%+v.validate() = nil, want an error", l)
		}
	}
	if err := (Limits{MemoryBytes: 1 << 30, Pids: 100, CPUs: 1.5}).validate(); err != nil {
		t.Errorf("validate() = %v, want nil", err)
	}
	for _, tt := range []struct {
		cpus float64
		want int64
	}{{0.5, 50000}, {2, 200000}, {0.001, 1000}, {0.0123, 1230}} {
		if got := (Limits{CPUs: tt.cpus}).cpuQuota(); got != tt.want {
			t.Errorf("Limits{CPUs: %v}.cpuQuota() = %d, want %d", tt.cpus, got, tt.want)
		}
	}
}

func TestReasonsFor(t *testing.T) {
	reasons := []string{
		"memory,pids: enable in /x/cgroup.subtree_control: device or resource busy",
		"cgroup2: cannot create cgroups in /y: permission denied",
		"cpu controller is not delegated to /z",
		"cpuacct: cannot create cgroups in /w: permission denied",
	}
	tests := []struct {
		c      ctrlSet
		pureV2 bool
		want   []int
	}{
		{ctrlMemory, false, []int{0}},
		{ctrlPids, false, []int{0}},
		{ctrlCPU, false, []int{2}},
		{ctrlCPU, true, []int{1, 2}},
		{ctrlCPUAcct, false, []int{3}},
	}
	for _, tt := range tests {
		var want []string
		for _, i := range tt.want {
			want = append(want, reasons[i])
		}
		if got := reasonsFor(reasons, tt.c, tt.pureV2); !slices.Equal(got, want) {
			t.Errorf("reasonsFor(%s, pureV2=%v) = %q, want %q", tt.c, tt.pureV2, got, want)
		}
	}
	if got := noteMissing(nil, ctrlMemory|ctrlPids, false); !slices.Equal(got, []string{"cpu controller is not available"}) {
		t.Errorf("noteMissing(memory,pids) = %q", got)
	}
}

// fakeV2 makes a directory standing in for the caller's cgroup2 cgroup, with
// the given cgroup.controllers, and returns it.
func fakeV2(t *testing.T, controllers string) string {
	t.Helper()
	own := t.TempDir()
	writeTestFile(t, own+"/cgroup.controllers", controllers+"\n")
	writeTestFile(t, own+"/cgroup.subtree_control", "")
	return own
}

func writeTestFile(t *testing.T, p, data string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func readTestFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestPureV2Prepare runs detection and preparation of a pure cgroup v2
// machine against a plain directory: what is probed and which
// subtree_control files are written.
func TestPureV2Prepare(t *testing.T) {
	own := fakeV2(t, "cpuset cpu io memory hugetlb pids rdma misc")
	loc := location{version: "v2", v2Mount: "/sys/fs/cgroup", v2Path: "/x", v2Dir: own}
	lay := probe(loc)
	if md := lay.mode(); !slices.Equal(md.Controllers, []string{"memory", "pids", "cpu"}) || md.Reason != "" {
		t.Errorf("probe().mode() = %+v, want memory, pids, cpu and no reason", md)
	}
	// The parent exists already (prepare accepts that), with its control file.
	if err := os.Mkdir(own+"/airlock", 0o755); err != nil {
		t.Fatal(err)
	}
	writeTestFile(t, own+"/airlock/cgroup.subtree_control", "memory")
	m := &Manager{parent: "airlock", lay: lay}
	md := m.Mode()
	if !slices.Equal(md.Controllers, []string{"memory", "pids", "cpu"}) || md.Unified != "/sys/fs/cgroup" {
		t.Errorf("Mode() = %+v, want memory, pids, cpu on /sys/fs/cgroup", md)
	}
	if got := readTestFile(t, own+"/cgroup.subtree_control"); got != "+memory +pids +cpu" {
		t.Errorf("own cgroup.subtree_control = %q, want +memory +pids +cpu", got)
	}
	if got := readTestFile(t, own+"/airlock/cgroup.subtree_control"); got != "+pids +cpu" {
		t.Errorf("parent cgroup.subtree_control = %q, want the missing +pids +cpu", got)
	}

	notDelegated := probe(location{version: "v2", v2Mount: "/sys/fs/cgroup", v2Path: "/x", v2Dir: fakeV2(t, "memory pids")})
	if md := notDelegated.mode(); !slices.Equal(md.Controllers, []string{"memory", "pids"}) || !strings.Contains(md.Reason, "cpu controller is not delegated") {
		t.Errorf("probe() without cpu = %+v, want memory, pids and a reason for cpu", md)
	}
}

// TestV2Files checks the cgroup v2 file names and formats of setLimits,
// readEnforced and Stats against plain files.
func TestV2Files(t *testing.T) {
	dir := t.TempDir()
	// Empty: unlike cgroupfs, a plain file is not truncated by a write.
	for _, f := range []string{"memory.max", "memory.swap.max", "pids.max", "cpu.max"} {
		writeTestFile(t, dir+"/"+f, "")
	}
	g := &Group{name: "g", v2: dir, v2Ctrls: limitCtrls, fd: -1}
	if err := g.setLimits(Limits{MemoryBytes: 64 << 20, Pids: 20, CPUs: 1.5}, true); err != nil {
		t.Fatalf("setLimits() = %v", err)
	}
	want := map[string]string{"memory.max": "67108864", "memory.swap.max": "0", "pids.max": "20", "cpu.max": "150000 100000"}
	for f, v := range want {
		if got := readTestFile(t, dir+"/"+f); got != v {
			t.Errorf("%s = %q, want %q", f, got, v)
		}
	}
	all := []string{"memory", "swap", "pids", "cpu"}
	if got := g.Enforced(); !slices.Equal(got, all) {
		t.Errorf("Enforced() = %q, want %q", got, all)
	}
	if got := g.readEnforced(); !slices.Equal(got, all) {
		t.Errorf("readEnforced() = %q, want %q", got, all)
	}

	writeTestFile(t, dir+"/memory.current", "1234\n")
	writeTestFile(t, dir+"/memory.peak", "5678\n")
	writeTestFile(t, dir+"/memory.events", "low 0\nhigh 0\nmax 7\noom 2\noom_kill 1\noom_group_kill 0\n")
	writeTestFile(t, dir+"/pids.current", "3\n")
	writeTestFile(t, dir+"/pids.events", "max 4\n")
	writeTestFile(t, dir+"/cpu.stat", "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n")
	st, err := g.Stats()
	if err != nil {
		t.Fatalf("Stats() = %v", err)
	}
	wantSt := Stats{MemoryCurrent: 1234, MemoryPeak: 5678, CPU: 1500 * time.Microsecond, Pids: 3, OOMKills: 1, PidsMaxHits: 4, MemoryMaxHits: 7}
	if st != wantSt {
		t.Errorf("Stats() = %+v, want %+v", st, wantSt)
	}

	// Without swap accounting memory.swap.max is missing: memory alone.
	dir2 := t.TempDir()
	writeTestFile(t, dir2+"/memory.max", "")
	g2 := &Group{name: "g2", v2: dir2, v2Ctrls: ctrlMemory, fd: -1}
	if err := g2.setLimits(Limits{MemoryBytes: 1 << 20}, true); err != nil || !slices.Equal(g2.Enforced(), []string{"memory"}) {
		t.Errorf("setLimits() without memory.swap.max = %v, enforced %q; want nil, [memory]", err, g2.Enforced())
	}
}
