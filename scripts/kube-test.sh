#!/usr/bin/env bash
# kube-test.sh [--beside CMD]: the kubernetes sandbox backend's tests
# (internal/sandbox/kube, and internal/cli's serve replicas on it) on a
# real single-node cluster, which it starts before them and stops after,
# whatever happens (scripts/kube-cluster.sh). The first run builds
# kube-apiserver and kubelet (about 16 minutes on 2 idle cores with a cold
# Go build cache) and the tests' images, kept by version in
# $AIRLOCK_KUBE_CACHE after that.
#
# With --beside CMD (make test: lint and every package's tests), CMD runs
# while kube-cluster.sh prepare (the Debian packages, the binaries, the
# images; nothing when they are kept) runs in the background at the
# lowest CPU priority; the cluster's tests start once both have ended,
# and not when CMD failed.
#
# Where the machine cannot run a cluster at all (not root; no containerd,
# etcd or CNI plugins, and apt cannot install them) the cluster's tests
# are not run, and it says so on stderr (CMD still runs and decides the
# status). GO names the go command (default go).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
cluster=scripts/kube-cluster.sh
beside=
if [ "${1:-}" = --beside ]; then
  beside=${2:?usage: $0 [--beside CMD]}
fi
log() { echo "kube-test: $*" >&2; }
skip() {
  log "SKIPPED: the kubernetes backend's tests were not run: $*"
  exit 0
}

root=true
[ "$(id -u)" -eq 0 ] || root=false

prep_pid=
prep_log=
stop_prepare() {
  if [ -n "$prep_pid" ]; then
    kill -- "-$prep_pid" 2>/dev/null || true
    wait "$prep_pid" 2>/dev/null || true
    prep_pid=
  fi
  if [ -n "$prep_log" ]; then rm -f "$prep_log"; fi
}
trap stop_prepare EXIT

# prepare: deps (exit 3 when apt cannot install them: this machine cannot
# run the cluster), then the binaries and images, at the lowest priority.
prepare() {
  $cluster deps || exit 3
  nice -n 19 $cluster prepare
}

start=$SECONDS
if $root; then
  prep_log=$(mktemp)
  # A process group of its own, so that a failure of CMD stops the whole
  # build (the go command and its compilers).
  export -f prepare
  export cluster
  setsid bash -c prepare >"$prep_log" 2>&1 &
  prep_pid=$!
fi
if [ -n "$beside" ]; then
  bash -c "$beside"
  log "$beside: passed in $((SECONDS - start)) s"
fi

if ! $root; then
  skip "not root: the test cluster (scripts/kube-cluster.sh) starts containerd, a kubelet and a bridge, which need root"
fi

status=0
wait "$prep_pid" || status=$?
prep_pid=
if [ "$status" -eq 3 ]; then
  cat "$prep_log" >&2
  skip "the node's Debian packages (etcd-server, containerd, containernetworking-plugins) are missing and apt could not install them"
fi
if [ "$status" -ne 0 ]; then
  cat "$prep_log" >&2
  log "preparing the cluster (kube-cluster.sh prepare) failed"
  exit 1
fi
log "the cluster's binaries and images ready after $((SECONDS - start)) s$([ -n "$beside" ] && echo " (beside the Go tests)")"

$cluster down # what a killed run left, if anything
trap 'stop_prepare; $cluster down' EXIT
t0=$SECONDS
$cluster up
eval "$($cluster env)"
log "cluster up in $((SECONDS - t0)) s"
status=0
t0=$SECONDS
GO=${GO:-go} scripts/gotest.sh -race -count=1 -timeout 20m ./internal/sandbox/kube/ || status=1
log "internal/sandbox/kube: $((SECONDS - t0)) s"
t0=$SECONDS
# airlock serve with the kubernetes backend: replicas on one PostgreSQL.
GO=${GO:-go} scripts/gotest.sh -count=1 -timeout 20m -run '^TestServe.*Kubernetes$' ./internal/cli/ || status=1
log "internal/cli on the cluster: $((SECONDS - t0)) s; the kubernetes tier $((SECONDS - start)) s in all"
exit $status
