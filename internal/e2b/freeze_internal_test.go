package e2b

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseMemInfo(t *testing.T) {
	tests := []struct {
		name         string
		in           string
		avail, total int64
		ok           bool
	}{
		{"kernel's", "MemTotal:       24568152 kB\nMemFree:         1000 kB\nMemAvailable:   12284076 kB\n", 12284076 << 10, 24568152 << 10, true},
		{"no MemAvailable", "MemTotal:       24568152 kB\nMemFree:         1000 kB\n", 0, 0, false},
		{"garbage value", "MemTotal: x kB\nMemAvailable: 1 kB\n", 0, 0, false},
		{"negative", "MemTotal: 10 kB\nMemAvailable: -1 kB\n", 0, 0, false},
		{"empty", "", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, tot, err := parseMemInfo([]byte(tt.in))
			if (err == nil) != tt.ok || a != tt.avail || tot != tt.total {
				t.Errorf("parseMemInfo = %d, %d, %v; want %d, %d, ok %v", a, tot, err, tt.avail, tt.total, tt.ok)
			}
		})
	}
	// This host's own.
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if a, tot, err := parseMemInfo(b); err != nil || a <= 0 || tot < a {
			t.Errorf("this host's meminfo = %d, %d, %v", a, tot, err)
		}
	}
}

// FuzzParseMemInfo: any meminfo is read without panicking, and what is
// accepted is two non-negative sizes.
func FuzzParseMemInfo(f *testing.F) {
	f.Add([]byte("MemTotal:       24568152 kB\nMemAvailable:   12284076 kB\n"))
	f.Add([]byte("MemAvailable: 1 kB\nMemTotal: 2 kB\nMemTotal: 3 kB\n"))
	f.Add([]byte("MemTotal: 99999999999999999999 kB\nMemAvailable: 1 kB\n"))
	if seeds, _ := filepath.Glob("testdata/meminfo-*"); len(seeds) > 0 {
		for _, p := range seeds {
			if b, err := os.ReadFile(p); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		a, tot, err := parseMemInfo(b)
		if err == nil && (a < 0 || tot < 0) {
			t.Fatalf("parseMemInfo accepted %d, %d", a, tot)
		}
	})
}
