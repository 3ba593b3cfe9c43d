// Package landlock confines the in-sandbox executor, and every process it
// starts, to an allowlist of filesystem paths using the Linux Landlock LSM.
//
// # Why a second layer
//
// The mount namespace is the first filesystem boundary: what is not mounted
// into the sandbox cannot be named at all. Landlock is the second layer. It
// narrows what may be done with what *is* mounted (system directories stay
// read-only even where the mount is writable, only the workspace is
// writable), and it still holds if the mount setup has a mistake or the
// sandbox's root regains mount powers in its user namespace. A Landlock
// domain cannot be removed by the restricted process, survives execve, and
// is inherited by every child, so it binds the untrusted payload as well as
// the executor.
//
// # What it does not cover
//
//   - Network: TCP rights are deliberately not handled. The network
//     namespace is the network boundary (and on the reference kernel MPTCP
//     sockets bypass Landlock's TCP rules anyway).
//   - Pathname unix sockets: connect(2) to a socket file is not controllable
//     by Landlock below ABI 9. This package stops at ABI 8 even on newer
//     kernels, because handling ABI 9's RESOLVE_UNIX right would deny every
//     socket not named by a rule, and Rules cannot name sockets yet. Any
//     socket file visible in the mount namespace can be connected to, so the
//     sandbox must only see the sockets it is meant to use.
//   - Abstract unix sockets and signals are scoped to the domain from ABI 6
//     on: a restricted process cannot connect to an abstract socket, or send
//     a signal to a process, outside its domain.
//
// # Threads
//
// landlock_restrict_self applies to the calling thread only, unless the
// kernel supports LANDLOCK_RESTRICT_SELF_TSYNC (ABI 8). A Go program has
// many threads and forks children from whichever one runs the goroutine, so
// Restrict covers all of them: with TSYNC where the kernel has it, otherwise
// with syscall.AllThreadsSyscall, which runs the call on every thread of the
// Go runtime. See Restrict for the consequences.
//
// Importers: the in-sandbox executor (internal/executor), which restricts
// itself with it, and the native backend (internal/sandbox/linux), which
// reports what it would enforce (ABI, Errata, Features) to `airlock
// doctor`. Like the rest of the sandbox side it imports nothing but the
// standard library and golang.org/x/sys/unix. It is Linux only.
package landlock
