package executor

import (
	"strconv"
	"testing"
)

func TestParseIDMap(t *testing.T) {
	tests := []struct {
		name   string
		data   string
		has    []int
		hasnt  []int
		String string
	}{
		{"rootless", "         0       1000          1\n", []int{0}, []int{1, 1000, 65534, -1}, "0"},
		{"root mode range", "         0 1073741824      65536\n", []int{0, 1000, 65534, 65535}, []int{65536, -1}, "0-65535"},
		{"two ranges", "0 1000 1\n1000 100000 10\n", []int{0, 1000, 1009}, []int{1, 999, 1010}, "0,1000-1009"},
		{"garbage skipped", "x y z\n0 1 2 3\n-5 0 10\n5 0 0\n7 0 1\n", []int{7}, []int{0, 5, -5}, "7"},
		{"empty", "", nil, []int{0}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := parseIDMap(tt.data)
			for _, id := range tt.has {
				if !m.has(id) {
					t.Errorf("parseIDMap(%q).has(%d) = false, want true", tt.data, id)
				}
			}
			for _, id := range tt.hasnt {
				if m.has(id) {
					t.Errorf("parseIDMap(%q).has(%d) = true, want false", tt.data, id)
				}
			}
			if got := m.String(); got != tt.String {
				t.Errorf("parseIDMap(%q).String() = %q, want %q", tt.data, got, tt.String)
			}
		})
	}
	var unknown idMap
	if !unknown.has(12345) {
		t.Errorf("a nil idMap (map unreadable) must leave the decision to setuid")
	}
}

// FuzzParseIDMap: any uid_map content parses without panicking, and a parsed
// range never claims a negative id.
func FuzzParseIDMap(f *testing.F) {
	for _, s := range []string{"0 1000 1\n", "0 1073741824 65536\n", "0 0 4294967295\n", "-1 0 5\n", "\x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data string) {
		m := parseIDMap(data)
		if m.has(-1) {
			t.Fatalf("parseIDMap(%q) maps -1", data)
		}
		_ = m.String()
	})
}

// TestLookupUserExecutorUID: under gVisor no command may run as the
// executor's own uid (it could signal PID 1); elsewhere it is a uid as any.
func TestLookupUserExecutorUID(t *testing.T) {
	for _, gvisor := range []bool{false, true} {
		e := &executor{}
		e.setup.GVisor = gvisor
		_, err := e.lookupUser(strconv.Itoa(executorUID))
		if (err != nil) != gvisor {
			t.Errorf("lookupUser(%d) with gvisor %v = %v, want an error only under gvisor", executorUID, gvisor, err)
		}
		if _, err := e.lookupUser("1000"); err != nil {
			t.Errorf("lookupUser(1000) with gvisor %v = %v", gvisor, err)
		}
	}
}
