// Package kube is the kubernetes sandbox backend: each sandbox is a bare pod
// that runs airlock's executor, and the host speaks the executor protocol to
// it through the API server (an exec of `airlock-exec pod-connect` in the
// pod's container), never over the pod network. docs/kubernetes.md has the
// design and what it does not do yet.
//
// Invariants:
//   - The pod has no service account token, no service links, a read-only
//     root, no capabilities, no privilege escalation, a non-root uid and a
//     seccomp profile: PodSecurity "restricted" admits it.
//   - What runs in the sandbox has no network but loopback, whatever the
//     cluster's network does: the executor makes its own network namespace
//     inside the container. A spec that asks for the egress proxy is
//     refused (the proxy path over the API server is not built yet).
//   - A pod the cluster deletes, evicts or fails is a lost sandbox: its
//     Done closes and operations fail with sandbox.ErrLost.
//
// Only host wiring and tests import it.
package kube
