// Package linux is the native sandbox backend: each sandbox is airlock-exec
// as PID 1 in new user, mount, pid, net, ipc, uts and cgroup namespaces,
// with a root built from read-only host directories (or a template root)
// under a throwaway writable layer, a /workspace cloned from a host
// directory, cgroup limits (v1 or v2), and seccomp and Landlock applied by
// the executor before any untrusted code runs. The host speaks the executor
// protocol (package execconn) over a socketpair it keeps.
//
// Invariants:
//   - Sandbox root maps to an unprivileged host uid range, a different one
//     per live sandbox across every process on the machine (root mode), or
//     to the invoking user only (rootless).
//   - Host directories reach the sandbox as detached mount trees cloned by
//     the host (or, rootless, opened by the executor with
//     RESOLVE_NO_SYMLINKS and checked by device and inode), never as paths
//     the sandbox could redirect.
//   - A sandbox dies with the process that owns it, and Destroy removes
//     every process, mount, cgroup and file it had; GC removes what a
//     crashed owner left.
//
// It passes the conformance suite in sandbox/sandboxtest, attacks included.
//
// Importers: internal/sandboxcli, host wiring (internal/host), bench/idle.
package linux
