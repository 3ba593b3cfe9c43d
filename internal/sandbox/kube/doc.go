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
//     inside the container. With the egress proxy, the executor's
//     forwarder on 127.0.0.1:3128 sends each connection to the host on an
//     egress stream of the executor's connection (through the API server),
//     and the host relays it to its egress proxy's socket for the sandbox.
//     Each sandbox also gets a deny-all NetworkPolicy, for clusters that
//     enforce them.
//   - A pod the cluster deletes, evicts or fails is a lost sandbox: its
//     Done closes and operations fail with sandbox.ErrLost.
//
// Only host wiring and tests import it.
package kube
