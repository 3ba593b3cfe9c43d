package linux_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// TestSudo: with Spec.Sudo, sudo runs a command as the sandbox's root (or
// -u's user) with the flags scripts use, inside the same confinement as
// every command: no_new_privs, seccomp, no capability, the read-only
// root, no host file; a sudo killed with its caller takes its command
// along. Without it, sudo refuses clearly.
func TestSudo(t *testing.T) {
	off := attackSandbox(t, sandbox.RuntimeNative, sandbox.Spec{})
	if res := attackRun(t, off, "", "sudo id -u"); res.r.ExitCode != 1 || !strings.Contains(res.stderr, "does not allow sudo") {
		t.Errorf("sudo in a sandbox without it: %v, want exit 1 saying so", res)
	}

	sb := attackSandbox(t, sandbox.RuntimeNative, sandbox.Spec{Sudo: true})
	for _, tt := range []struct{ script, want string }{
		{"id -u; sudo id -u; sudo -- id -un", "1000\n0\nroot\n"},
		{"sudo -u sandbox id -u; sudo -u#0 id -u", "1000\n0\n"},
		{"FOO=kept sudo -E sh -c 'echo $FOO $HOME'; FOO=kept sudo sh -c 'echo \"[$FOO]\" $HOME'", "kept /root\n[] /root\n"},
		{"cd /tmp && sudo pwd", "/tmp\n"},
		{"echo in | sudo cat", "in\n"},
		{"sudo sh -c 'exit 3'; echo $?; sudo no-such-command 2>/dev/null; echo $?", "3\n127\n"},
		// The same confinement as any command's.
		{"sudo grep -E '^(NoNewPrivs|Seccomp|CapEff):' /proc/self/status", "CapEff:\t0000000000000000\nNoNewPrivs:\t1\nSeccomp:\t2\n"},
	} {
		if got := attackMust(t, sb, "", tt.script); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.script, got, tt.want)
		}
	}
	for _, script := range []string{
		"sudo sh -c 'echo x > /usr/bin/airlock-sudo-probe'",
		"sudo sh -c 'echo x > /airlock-sudo-probe'",
		"sudo mount -t tmpfs none /mnt",
		"sudo cat /etc/shadow",
		"sudo python3 -c 'import socket; socket.create_connection((\"1.1.1.1\", 80), timeout=2)'",
	} {
		if res := attackRun(t, sb, "", script); res.ok() {
			t.Errorf("%s succeeded: %v", script, res)
		}
	}
	// A sudo killed with its caller (the command's timeout) takes its
	// command along.
	res := attackExec(t, sb, sandbox.Command{Argv: []string{"sh", "-c", "sudo sleep 300"}, Timeout: time.Second})
	if res.r.Outcome != sandbox.OutcomeTimeout {
		t.Fatalf("sudo sleep 300 with a 1 s timeout: %v", res)
	}
	if got := attackMust(t, sb, "", "sudo sleep 300 & sleep 1; for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 300'; kill $!"); got != "1\n" {
		t.Fatalf("control: sudo sleep 300 in the background is not seen running: %q", got)
	}
	if !attackPoll(time.Minute, func() bool {
		return attackMust(t, sb, "root", "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 300' || true") == "0\n"
	}) {
		t.Errorf("sudo's command outlived its killed caller")
	}
}
