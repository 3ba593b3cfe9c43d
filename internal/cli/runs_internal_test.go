package cli

import "testing"

func TestByteCount(t *testing.T) {
	for _, c := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{5 << 20, "5.0 MiB"},
		{3 << 30, "3.0 GiB"},
		{1<<40 + 1<<39, "1.5 TiB"},
	} {
		if got := byteCount(c.n); got != c.want {
			t.Errorf("byteCount(%d) = %q, want %q", c.n, got, c.want)
		}
	}
}
