package executor

import (
	"bytes"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
)

// environChild, set in a child's environment, makes this test binary clear
// its environment block as the executor does under gVisor and print what
// /proc/self/environ then holds (see TestEmptyEnvironInPlace).
const environChild = "AIRLOCK_TEST_ENVIRON_CHILD"

func environChildMain() {
	block := envBlock()
	if block == nil {
		os.Stdout.WriteString("no block\n")
		os.Exit(1)
	}
	os.Clearenv()
	clear(block)
	data, err := os.ReadFile("/proc/self/environ")
	if err != nil {
		os.Stdout.WriteString(err.Error())
		os.Exit(1)
	}
	os.Stdout.Write(data)
	os.Exit(0)
}

// TestEmptyEnvironInPlace: the environment block exec wrote is found where
// the ABI puts it and overwritten, so /proc/self/environ (what gVisor's
// /proc shows root inside of the executor) holds no variable afterwards;
// duplicates, which the Go runtime drops from its own copy, included. The
// kernel reads the file from the process's memory, as gVisor does.
func TestEmptyEnvironInPlace(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
	}{
		{"one", []string{environChild + "=1"}},
		{"several", []string{"GOMAXPROCS=1", "HOME=/root", environChild + "=1", "SECRET=s3cr3t"}},
		{"duplicates", []string{environChild + "=1", "A=1", "B=2", "A=dup-value"}},
		{"no equals sign", []string{environChild + "=1", "JUSTANAME", "LONG=" + strings.Repeat("x", 70000)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// syscall.ForkExec, not os/exec: os/exec drops duplicates.
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			pid, err := syscall.ForkExec(os.Args[0], []string{os.Args[0], "-test.run=^$", "last-argument"}, &syscall.ProcAttr{Env: tc.env, Files: []uintptr{0, w.Fd(), 2}})
			w.Close()
			if err != nil {
				t.Fatal(err)
			}
			out, err := io.ReadAll(r)
			r.Close()
			var ws syscall.WaitStatus
			if _, werr := syscall.Wait4(pid, &ws, 0, nil); werr != nil || err != nil || ws.ExitStatus() != 0 {
				t.Fatalf("child: %v %v %v: %q", ws, werr, err, out)
			}
			want := 0
			for _, kv := range tc.env {
				want += len(kv) + 1
			}
			if len(out) != want {
				t.Errorf("environ after clearing: %d bytes, want the block's %d", len(out), want)
			}
			if i := bytes.IndexFunc(out, func(r rune) bool { return r != 0 }); i >= 0 {
				t.Errorf("environ after clearing still holds %q", bytes.Trim(out, "\x00"))
			}
		})
	}
}
