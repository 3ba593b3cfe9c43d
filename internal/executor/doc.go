// Package executor is the in-sandbox side of airlock: the program that runs as
// PID 1 of every sandbox and carries out the host's requests.
//
// It builds the sandbox (mounts, pivot_root, /proc and /dev, loopback-only
// network), then locks itself down before any untrusted code exists: the
// bounding capability set is emptied so no command it starts holds a
// capability, Landlock confines the file system as a second layer under the
// mount namespace, the process is made non-dumpable so /proc/1 is out of
// reach, and a seccomp filter with no_new_privs is installed on every thread
// and inherited by every child. Then it serves execproto requests: commands
// with streamed, flow-controlled output, file operations as the sandbox user,
// and tar export. As PID 1 it reaps every orphan.
//
// The executor holds no secret and decides nothing. It imports only the
// standard library, golang.org/x/sys and execproto (and its own
// subpackages); a test in cmd/airlock-exec enforces that, so that no host
// code — store, secrets, policy, proxy, model clients — is ever linked next
// to untrusted code.
package executor
