package linux_test

import (
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/sandboxtest"
)

// TestNoInheritedFDs: a descriptor the host process holds without
// close-on-exec (as one inherited from a shell or supervisor is) reaches
// neither the executor nor any command: a command's descriptors are its
// stdio and what it opens. Direct and through the spawner, whose process
// starts after the descriptor exists.
func TestNoInheritedFDs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	var p [2]int
	if err := unix.Pipe2(p[:], 0); err != nil {
		t.Fatal(err)
	}
	const leak = 200
	if err := unix.Dup3(p[1], leak, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(p[0])
		unix.Close(p[1])
		unix.Close(leak)
	})
	for _, spawner := range []bool{false, true} {
		name := "direct"
		if spawner {
			name = "spawner"
		}
		t.Run(name, func(t *testing.T) {
			b := newLateBackend(t, spawner)
			sb := sandboxtest.Create(t, b, sandbox.Spec{})
			// ls's own descriptor of the directory is 3.
			out := attackMust(t, sb, "", "ls /proc/self/fd")
			for _, fd := range strings.Fields(out) {
				if fd != "0" && fd != "1" && fd != "2" && fd != "3" {
					t.Errorf("a command holds descriptor %s (the host's non-close-on-exec pipe is %d, %d and %d): %q", fd, p[0], p[1], leak, out)
				}
			}
		})
	}
}
