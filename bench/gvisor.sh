#!/usr/bin/env bash
# The gvisor runtime against its references, ratios in one run (root, runsc):
#   start: a gvisor sandbox's Create against `runsc run` of the same bundle
#          with /bin/true (target <= 1.1x)
#   exec:  one command in a running sandbox, gvisor against native (target <= 2x)
#   idle memory per sandbox, both runtimes (its cgroup's charge)
# Usage: bench/gvisor.sh [N]   (N iterations of each, default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
out=$(go test -run=NONE -bench='^BenchmarkGVisor' -benchtime="${n}x" ./internal/sandbox/linux/ 2>&1) || { echo "$out"; exit 1; }
echo "$out" | grep -E '^Benchmark'
ns() { echo "$out" | awk -v b="$1" '$1 ~ b {print $3; exit}'; }
mib() { echo "$out" | awk -v b="$1" '$1 ~ b {print $5; exit}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
echo
echo "start  gvisor Create / runsc run true:  $(ratio "$(ns 'GVisorStart/runtime=gvisor')" "$(ns 'GVisorStart/runsc=true')")x (target 1.1x)"
echo "exec   gvisor / native:                  $(ratio "$(ns 'GVisorExec/runtime=gvisor')" "$(ns 'GVisorExec/runtime=native')")x (target 2x)"
echo "idle   MiB per sandbox: native $(mib 'GVisorIdleMemory/runtime=native'), gvisor $(mib 'GVisorIdleMemory/runtime=gvisor')"
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
