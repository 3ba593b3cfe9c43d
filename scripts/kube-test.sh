#!/usr/bin/env bash
# kube-test.sh: the kubernetes sandbox backend's tests (internal/sandbox/kube)
# on a real single-node cluster, which it starts before them and stops after
# (scripts/kube-cluster.sh; the first run builds kube-apiserver and kubelet,
# about 16 minutes on 2 idle cores, cached by version after that). Root
# only: without root the tests are not run, and it says so. GO names the go
# command (default go).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if [ "$(id -u)" -ne 0 ]; then
  echo "kube-test: not root: the kubernetes backend's tests need a cluster this script can start only as root; not run" >&2
  exit 0
fi
cluster=scripts/kube-cluster.sh
$cluster down # what a killed run left, if anything
trap '$cluster down' EXIT
$cluster up
eval "$($cluster env)"
GO=${GO:-go} scripts/gotest.sh -race -count=1 -timeout 20m ./internal/sandbox/kube/
