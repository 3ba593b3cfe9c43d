package sandboxtest

import "testing"

func TestSkipped(t *testing.T) {
	skip := map[string]string{"Exec/TTY": "no tty", "Network": "no proxy"}
	for _, tc := range []struct {
		name   string
		reason string
	}{
		{"TestConformance/Exec/TTY", "no tty"},
		{"TestConformance/Exec/TTY/Resize", "no tty"},
		{"TestConformance/Exec/TTYX", ""},
		{"TestConformance/Exec", ""},
		{"TestConformance/Network/ProxyEnv", "no proxy"},
		{"TestConformance/Network", "no proxy"},
		{"TestConformance", ""},
		{"TestConformance/Files/Network", ""},
	} {
		reason, ok := skipped(tc.name, skip)
		if reason != tc.reason || ok != (tc.reason != "") {
			t.Errorf("skipped(%q) = %q, %v, want %q", tc.name, reason, ok, tc.reason)
		}
	}
}
