package linux

import (
	"strings"
	"testing"

	"github.com/airlockrun/airlock/internal/executor/landlock"
	"github.com/airlockrun/airlock/internal/sandbox/linux/cgroup"
)

// TestLandlockDetail checks the doctor's landlock line for every ABI: the
// ABI found, and for each feature whether sandboxes get it, so that a
// kernel with scoping is not told it needs ABI 6.
func TestLandlockDetail(t *testing.T) {
	const (
		fixed   = ^uint64(0) // every erratum fixed
		unfixed = 0          // a kernel without the errata interface
	)
	tests := []struct {
		abi    int
		errata uint64
		want   string
	}{
		{0, fixed, "ABI 0: Landlock is not available (not built in, or not in the boot's lsm= list): no second file-system layer, no signal or abstract-socket scoping"},
		{1, fixed, "ABI 1; in use: file-system rules (1); not in use: cross-directory rename and link (2, needs ABI 2), truncate (3, needs ABI 3), device ioctls (5, needs ABI 5), abstract-socket scoping (6, needs ABI 6), signal scoping (6, needs ABI 6), one domain for all threads (8, needs ABI 8)"},
		{2, fixed, "ABI 2; in use: file-system rules (1), cross-directory rename and link (2); not in use: truncate (3, needs ABI 3), device ioctls (5, needs ABI 5), abstract-socket scoping (6, needs ABI 6), signal scoping (6, needs ABI 6), one domain for all threads (8, needs ABI 8)"},
		{3, fixed, "ABI 3; in use: file-system rules (1), cross-directory rename and link (2), truncate (3); not in use: device ioctls (5, needs ABI 5), abstract-socket scoping (6, needs ABI 6), signal scoping (6, needs ABI 6), one domain for all threads (8, needs ABI 8)"},
		{4, fixed, "ABI 4; in use: file-system rules (1), cross-directory rename and link (2), truncate (3); not in use: device ioctls (5, needs ABI 5), abstract-socket scoping (6, needs ABI 6), signal scoping (6, needs ABI 6), one domain for all threads (8, needs ABI 8)"},
		{5, fixed, "ABI 5; in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5); not in use: abstract-socket scoping (6, needs ABI 6), signal scoping (6, needs ABI 6), one domain for all threads (8, needs ABI 8)"},
		{6, fixed, "ABI 6; in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5), abstract-socket scoping (6), signal scoping (6); not in use: one domain for all threads (8, needs ABI 8)"},
		{6, unfixed, "ABI 6; in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5), abstract-socket scoping (6); not in use: signal scoping (6, the kernel lacks the fix of Landlock erratum 2), one domain for all threads (8, needs ABI 8)"},
		{7, fixed, "ABI 7; in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5), abstract-socket scoping (6), signal scoping (6); not in use: one domain for all threads (8, needs ABI 8)"},
		{7, unfixed, "ABI 7; in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5), abstract-socket scoping (6); not in use: signal scoping (6, the kernel lacks the fix of Landlock erratum 2), one domain for all threads (8, needs ABI 8)"},
		// From ABI 8 every thread shares one domain: signal scoping needs
		// no erratum fix.
		{8, unfixed, "ABI 8; in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5), abstract-socket scoping (6), signal scoping (6), one domain for all threads (8)"},
		{9, fixed, "ABI 9 (used as 8, the highest airlock knows); in use: file-system rules (1), cross-directory rename and link (2), truncate (3), device ioctls (5), abstract-socket scoping (6), signal scoping (6), one domain for all threads (8)"},
	}
	for _, tt := range tests {
		if got := landlockDetail(tt.abi, landlock.Features(tt.abi, tt.errata)); got != tt.want {
			t.Errorf("landlockDetail(ABI %d, errata %#x) =\n  %s\nwant\n  %s", tt.abi, tt.errata, got, tt.want)
		}
	}
}

// TestV1AttachDetail: the doctor's line on joining v1 hierarchies says
// what waits and the remedy, and fails only where every start waits.
func TestV1AttachDetail(t *testing.T) {
	md := cgroup.Mode{V1Controllers: []string{"memory", "pids", "cpu"}, Unified: "/sys/fs/cgroup/unified"}
	ok, d := v1AttachDetail(md, true)
	if !ok || !strings.Contains(d, "joins its v1 groups itself") || !strings.Contains(d, "runsc") || !strings.Contains(d, "mount -o remount,favordynmods /sys/fs/cgroup/unified") {
		t.Errorf("vfork start, no favordynmods: %t %q", ok, d)
	}
	if ok, d := v1AttachDetail(md, false); ok || !strings.Contains(d, "every sandbox start") || !strings.Contains(d, "favordynmods") {
		t.Errorf("no vfork start, no favordynmods: %t %q", ok, d)
	}
	md.FavorDynmods = true
	if ok, d := v1AttachDetail(md, false); !ok || !strings.Contains(d, "waits for no RCU grace period") {
		t.Errorf("favordynmods: %t %q", ok, d)
	}
}
