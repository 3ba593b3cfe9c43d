// Package secret keeps credentials on the host: the redacting Value type, the
// encrypted Store (its sealed records in a file, or in the run store that
// every server shares: OpenShared), and the Redactor that scrubs live secret values
// from everything the host records or prints.
//
// Invariants:
//   - A Value never prints its bytes: every formatting, marshalling and
//     logging path yields "[redacted]". Reveal is the only way to the bytes.
//   - The Store never writes a value in clear text, not even to a temporary
//     file or the shared run store (which never sees the key): each value is
//     sealed with AES-256-GCM whose additional data binds
//     the tenant, the name and the host binding, so a ciphertext moved to
//     another name or tenant, or re-bound to another host, fails to open.
//   - Errors never contain a value.
//
// Only the egress proxy, the LLM gateway, host wiring and the CLI import this
// package; the sandbox side (executor, execproto) must never link it.
package secret
