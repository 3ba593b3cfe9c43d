package kube

import (
	"bytes"
	_ "embed" // the seccomp profile
)

// SeccompProfile returns a Localhost seccomp profile for the sandboxes' pods
// (Config.SeccompProfile names where the nodes keep it): the container
// runtimes' default profiles refuse unshare and clone of a user namespace
// to a process without CAP_SYS_ADMIN, and the executor needs one to give
// the sandbox a network namespace of its own. This profile allows every
// system call but those the defaults refuse for other reasons (kernel
// modules, kexec, keyrings, bpf, perf, io_uring, userfaultfd, the clock,
// the new mount API, handles): the executor's own filter, installed before
// any command runs, is the sandbox's seccomp; this one guards the
// executor and its relay. PodSecurity "restricted" admits Localhost
// profiles. docs/kubernetes.md says why.
func SeccompProfile() []byte { return bytes.Clone(seccompProfile) }

//go:embed seccomp.json
var seccompProfile []byte
