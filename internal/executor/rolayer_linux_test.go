package executor

import (
	"bytes"
	"strconv"
	"testing"
)

func TestHasChildMount(t *testing.T) {
	const info = `22 1 0:21 / /proc rw - proc proc rw
25 22 0:22 / /proc/sys/fs/binfmt_misc rw - autofs systemd-1 rw
30 1 254:0 /tmp/x /ws ro - ext4 /dev/vda rw
31 31 0:5 / /self rw - tmpfs none rw
garbage
4x 30 0:5 / /bad rw - tmpfs none rw`
	for _, c := range []struct {
		id   uint64
		want bool
	}{
		{1, true},   // the root: /proc and /ws below it
		{22, true},  // /proc: binfmt_misc below it
		{25, false}, // a leaf
		{30, false}, // only a line whose ID is unreadable names it
		{31, false}, // its own parent (a namespace's root) is not a child
		{99, false},
	} {
		if got := hasChildMount([]byte(info), c.id); got != c.want {
			t.Errorf("hasChildMount(%d) = %v, want %v", c.id, got, c.want)
		}
	}
}

// FuzzHasChildMount: any input is read without a panic, and a child is
// reported only where a line names the id as its parent.
func FuzzHasChildMount(f *testing.F) {
	f.Add([]byte("22 1 0:21 / /proc rw - proc proc rw\n25 22 0:22 / /x rw - autofs a rw\n"), uint64(22))
	f.Add([]byte("1 1\n\n  7   9 \n"), uint64(9))
	f.Fuzz(func(t *testing.T, info []byte, id uint64) {
		got := hasChildMount(info, id)
		if !got {
			return
		}
		for _, l := range bytes.Split(info, []byte("\n")) {
			if f := bytes.Fields(l); len(f) >= 2 && string(f[1]) != string(f[0]) {
				if p, err := strconv.ParseUint(string(f[1]), 10, 64); err == nil && p == id {
					return
				}
			}
		}
		t.Fatalf("hasChildMount(%q, %d) = true, but no line names %d as its parent", info, id, id)
	})
}
