#!/usr/bin/env bash
# kube-test.sh [--beside CMD]: the kubernetes sandbox backend's tests
# (internal/sandbox/kube, and internal/cli's serve replicas on it) on a
# real single-node cluster, which it starts
# before them and stops after, whatever happens (scripts/kube-cluster.sh).
# The first run builds kube-apiserver and kubelet (about 16 minutes on 2
# idle cores with a cold Go build cache), cached by version in
# $AIRLOCK_KUBE_CACHE after that.
#
# With --beside CMD (make test: lint and every package's tests), CMD runs
# while the binaries build in the background, when they must be built; the
# cluster's tests start once both have ended, and not when CMD failed.
#
# Root only: without root the cluster's tests are not run, and it says so
# (CMD still runs). GO names the go command (default go).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cluster=scripts/kube-cluster.sh
beside=
if [ "${1:-}" = --beside ]; then
  beside=${2:?usage: $0 [--beside CMD]}
fi
log() { echo "kube-test: $*" >&2; }

root=true
[ "$(id -u)" -eq 0 ] || root=false

build_pid=
build_log=
stop_build() {
  if [ -n "$build_pid" ]; then
    kill -- "-$build_pid" 2>/dev/null || true
    wait "$build_pid" 2>/dev/null || true
    build_pid=
  fi
  if [ -n "$build_log" ]; then rm -f "$build_log"; fi
}
trap stop_build EXIT

if [ -n "$beside" ]; then
  if $root && ! $cluster built; then
    build_log=$(mktemp)
    log "building the cluster's binaries beside: $beside (output in $build_log)"
    build_start=$SECONDS
    # A process group of its own, so that a failure of CMD stops the
    # whole build (the go command and its compilers).
    setsid $cluster build >"$build_log" 2>&1 &
    build_pid=$!
  fi
  bash -c "$beside"
fi

if ! $root; then
  log "not root: the kubernetes backend's tests need a cluster this script can start only as root; not run"
  exit 0
fi

if [ -n "$build_pid" ]; then
  if ! wait "$build_pid"; then
    build_pid=
    cat "$build_log" >&2
    log "the cluster's build failed"
    exit 1
  fi
  build_pid=
  log "the cluster's binaries built in $((SECONDS - build_start)) s (beside the Go tests)"
fi

$cluster down # what a killed run left, if anything
trap 'stop_build; $cluster down' EXIT
$cluster up
eval "$($cluster env)"
status=0
GO=${GO:-go} scripts/gotest.sh -race -count=1 -timeout 20m ./internal/sandbox/kube/ || status=1
# airlock serve with the kubernetes backend: replicas on one PostgreSQL.
GO=${GO:-go} scripts/gotest.sh -count=1 -timeout 20m -run '^TestServe.*Kubernetes$' ./internal/cli/ || status=1
exit $status
