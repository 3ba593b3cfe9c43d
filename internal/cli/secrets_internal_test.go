package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandboxcli"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

func TestCheckSecretValue(t *testing.T) {
	tests := []struct {
		in, want string
		usage    bool
	}{
		{"tok", "tok", false},
		{"tok\n", "tok", false},
		{"tok\r\n", "tok", false},
		{"tok\n\n", "tok\n", false},
		{"two\nlines\n", "two\nlines", false},
		{" spaced \n", " spaced ", false},
		{"", "", true},
		{"\n", "", true},
		{"\r\n", "", true},
		{strings.Repeat("a", secret.MaxValueSize) + "\n", strings.Repeat("a", secret.MaxValueSize), false},
		{strings.Repeat("a", secret.MaxValueSize+1), "", true},
	}
	for _, tt := range tests {
		name := tt.in
		if len(name) > 16 {
			name = fmt.Sprintf("%d bytes", len(name))
		}
		t.Run(name, func(t *testing.T) {
			got, err := checkSecretValue([]byte(tt.in))
			var u usageError
			if tt.usage != errors.As(err, &u) {
				t.Fatalf("checkSecretValue(%q) error = %v, want usage error %v", name, err, tt.usage)
			}
			if err == nil && string(got) != tt.want {
				t.Errorf("checkSecretValue(%q) = %q, want %q", name, got, tt.want)
			}
		})
	}
}

// openPTY returns the two ends of a new pseudo-terminal.
func openPTY(t *testing.T) (master, tty *os.File) {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Skipf("ptsname: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open pts: %v", err)
	}
	t.Cleanup(func() { s.Close(); m.Close() })
	return m, s
}

// TestSetFromTerminal types a value on a real pseudo-terminal: it is read
// without echo, stored, and the terminal's echo is restored afterwards.
func TestSetFromTerminal(t *testing.T) {
	master, tty := openPTY(t)
	const val = "typed-secret-value"
	home := t.TempDir()
	var stdout, stderr bytes.Buffer
	env := &Env{Env: sandboxcli.Env{Ctx: context.Background(), Stdin: tty, Stdout: &stdout, Stderr: &stderr, Home: home}}

	echoed := make(chan []byte, 1)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		// Type the value once airlock has turned echo off, then collect
		// whatever the terminal echoes back.
		for {
			tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
			if err == nil && tio.Lflag&unix.ECHO == 0 {
				break
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
		_, _ = master.Write([]byte(val + "\n"))
		buf := make([]byte, 256)
		_ = master.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, _ := master.Read(buf)
		echoed <- buf[:n]
	}()
	if code := Main(env, []string{"secrets", "set", "TYPED"}); code != 0 {
		t.Fatalf("secrets set from a terminal: exit %d, stderr %q", code, stderr.String())
	}
	if got := <-echoed; bytes.Contains(got, []byte(val)) {
		t.Errorf("terminal echoed the value: %q", got)
	}
	tio, err := unix.IoctlGetTermios(int(tty.Fd()), unix.TCGETS)
	if err != nil || tio.Lflag&unix.ECHO == 0 {
		t.Errorf("echo not restored after reading (err %v)", err)
	}
	if !strings.Contains(stderr.String(), "not echoed") {
		t.Errorf("no prompt on stderr: %q", stderr.String())
	}

	// The value is a row of the home's store, sealed under the home's key.
	db, err := sqlite.Open(context.Background(), home+"/airlock.db", sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := secret.OpenShared(db, secret.KeyFile(home+"/secrets/key"))
	if err != nil {
		t.Fatal(err)
	}
	v, _, err := s.Get(context.Background(), event.LocalTenant, "TYPED")
	if err != nil || string(v.Reveal()) != val {
		t.Errorf("stored value differs (err %v)", err)
	}
}
