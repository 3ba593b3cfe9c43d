package cgroup

import (
	"strings"
	"testing"
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
