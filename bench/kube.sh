#!/usr/bin/env bash
# The kubernetes backend against its references, ratios in one run (root;
# a cluster: scripts/kube-cluster.sh up, or this script starts one and
# stops it after):
#   warm:  create to the first output of `echo hi`, from a warm pool of pods
#          against the native backend's warm pool (target <= 2x)
#   cold:  create to first output with no pool (a cold pod from the cached
#          sandbox image) beside a bare `kubectl run` of the same image
#          running `echo hi`, timed to the pod's end (`kubectl wait`; its log
#          is checked after): `run --rm -i` loses the output of a command
#          that ends before kubectl attaches. The machine's kubectl (v1.32,
#          a client of the same API server; the Debian one is 1.20).
# Usage: bench/kube.sh [N]   (N iterations of each, default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
cluster=scripts/kube-cluster.sh
if [ -z "${AIRLOCK_KUBECONFIG:-}" ]; then
  $cluster down
  trap '$cluster down' EXIT
  $cluster up
  eval "$($cluster env)"
fi
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
out=$(go test -run=NONE -bench='^BenchmarkFirstOutput' -benchtime="${n}x" -timeout 30m ./internal/sandbox/kube/ 2>&1) || {
  echo "$out"
  exit 1
}
echo "$out" | grep -E '^Benchmark'
ns() { echo "$out" | awk -v b="$1" '$1 ~ b {print $3; exit}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
ms() { awk -v a="$1" 'BEGIN {printf "%.1f", a / 1e6}'; }

# kubectl run: a pod of the same image in a namespace of its own (no
# PodSecurity label: kubectl's pod is a plain one), bound to the node as
# the backend's are (the test cluster has no scheduler), its default
# ServiceAccount made here (no controller manager makes it).
export KUBECONFIG=$AIRLOCK_KUBECONFIG
ns=airlock-bench-$$
kubectl create namespace "$ns" >/dev/null
kubectl -n "$ns" create serviceaccount default >/dev/null 2>&1 || true
overrides='{"apiVersion":"v1","spec":{"nodeName":"localhost","automountServiceAccountToken":false,"enableServiceLinks":false}}'
total=0
for i in $(seq "$n"); do
  start=$(date +%s%N)
  kubectl -n "$ns" run "bench-$i" --image=airlock.local/sandbox:test --image-pull-policy=Never \
    --restart=Never --overrides="$overrides" --command -- echo hi >/dev/null
  kubectl -n "$ns" wait --for=jsonpath='{.status.phase}'=Succeeded "pod/bench-$i" --timeout=120s >/dev/null
  end=$(date +%s%N)
  got=$(kubectl -n "$ns" logs "bench-$i")
  [ "$got" = hi ] || { echo "kubectl run's pod printed '$got'"; exit 1; }
  kubectl -n "$ns" delete pod "bench-$i" --grace-period=0 --force >/dev/null 2>&1
  total=$((total + end - start))
done
kubectl delete namespace "$ns" --wait=false >/dev/null 2>&1 || true
kubectl_ns=$((total / n))
echo "BenchmarkKubectlRun $n $kubectl_ns ns/op"
echo
echo "warm  kubernetes pool / native pool:  $(ms "$(ns 'kubernetes/pool')") / $(ms "$(ns 'native/pool')") ms = $(ratio "$(ns 'kubernetes/pool')" "$(ns 'native/pool')")x (target 2x)"
echo "cold  kubernetes create / kubectl run: $(ms "$(ns 'kubernetes/cold')") / $(ms "$kubectl_ns") ms = $(ratio "$(ns 'kubernetes/cold')" "$kubectl_ns")x (reported)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
