//go:build tools

// Package kube builds the Kubernetes components of the test cluster
// (kube-apiserver and kubelet) at the release pinned in go.mod. It is a
// module of its own so that airlock's go.mod does not carry Kubernetes.
// scripts/kube-cluster.sh builds and runs them; nothing imports this package.
package kube

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
