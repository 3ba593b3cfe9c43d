#!/usr/bin/env bash
# The gvisor runtime against its references, ratios in one run (root, runsc):
#   start:   a gvisor sandbox's Create against `runsc run` of the same bundle
#            with /bin/true (target <= 1.1x), and the rungs between: the
#            executor printing its version (a Go program's start), the
#            executor's setup and handshake under plain `runsc run`
#   exec:    one command in a running sandbox, gvisor against native (target <= 2x)
#   pool:    create to first output from a warm pool, gvisor against native (target <= 2x)
#   syscall: one system call inside (Python's getppid loop), each runtime
#   idle memory per sandbox, both runtimes (its cgroup's charge)
# gvisor runs on the runsc the backend finds ($AIRLOCK_RUNSC, else PATH's) on
# the platform it chooses (systrap where offered). With AIRLOCK_RUNSC set and
# another runsc on PATH (Debian's), that one runs beside it as "gvisor,ref":
#   AIRLOCK_RUNSC=$(scripts/runsc.sh build) bench/gvisor.sh 5
# Usage: bench/gvisor.sh [N]   (N iterations of each, default 10)
# The start's rungs run one after the other here; bench/gvisor-start.sh runs
# them round by round, which a loaded machine needs for a ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10}
if [ -n "${AIRLOCK_RUNSC:-}" ] && [ -z "${AIRLOCK_BENCH_RUNSC_REF:-}" ]; then
  ref=$(command -v runsc || true)
  if [ -n "$ref" ] && [ "$(readlink -f "$ref")" != "$(readlink -f "$AIRLOCK_RUNSC")" ]; then
    export AIRLOCK_BENCH_RUNSC_REF=$ref
  fi
fi
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
out=$(go test -run=NONE -bench='^BenchmarkGVisor(Start|Exec|Syscall|IdleMemory)$' -benchtime="${n}x" -v ./internal/sandbox/linux/ 2>&1) || { echo "$out"; exit 1; }
pool=$(go test -run=NONE -bench='^BenchmarkPoolFirstOutput$' -benchtime="${n}x" ./internal/sandbox/pool/ 2>&1) || { echo "$pool"; exit 1; }
out="$out
$pool"
echo "$out" | grep -E 'runsc .*platform' | sort -u | sed 's/^ *[a-z_]*\.go:[0-9]*: //'
echo "$out" | grep -E '^Benchmark'
# Sub-benchmark names end in -GOMAXPROCS: "runtime=gvisor-2", "runtime=gvisor,ref-2".
col() { echo "$out" | awk -v b="$1" -v u="$2" '$1 ~ b {for (i = 3; i <= NF; i++) if ($(i+1) == u) {print $i; exit}}'; }
ns() { col "$1" ns/op; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (a == "" || b == "") print "-"; else printf "%.2f", a / b}'; }
echo
echo "start    gvisor Create / runsc run true:  $(ratio "$(ns 'GVisorStart/runtime=gvisor-')" "$(ns 'GVisorStart/runsc=true')")x (target 1.1x); CPU $(ratio "$(col 'GVisorStart/runtime=gvisor-' cpu-ms/op)" "$(col 'GVisorStart/runsc=true' cpu-ms/op)")x ($(col 'GVisorStart/runtime=gvisor-' cpu-ms/op) vs $(col 'GVisorStart/runsc=true' cpu-ms/op) ms)"
echo "start    rungs, CPU ms (wall ms): runsc run true $(col 'GVisorStart/runsc=true-' cpu-ms/op) ($(awk -v n="$(ns 'GVisorStart/runsc=true-')" 'BEGIN {printf "%.0f", n / 1e6}')), the executor printing its version (Go's start) $(col 'GVisorStart/runsc=go-' cpu-ms/op) ($(awk -v n="$(ns 'GVisorStart/runsc=go-')" 'BEGIN {printf "%.0f", n / 1e6}')), the executor's setup and handshake $(col 'GVisorStart/runsc=executor-' cpu-ms/op) ($(awk -v n="$(ns 'GVisorStart/runsc=executor-')" 'BEGIN {printf "%.0f", n / 1e6}'))"
for rt in gvisor gvisor,ref; do
  [ -n "$(ns "GVisorExec/runtime=$rt-")" ] || continue
  echo "exec     $rt / native:  $(ratio "$(ns "GVisorExec/runtime=$rt-")" "$(ns 'GVisorExec/runtime=native-')")x (target 2x)"
  echo "pool     $rt / native:  $(ratio "$(ns "PoolFirstOutput/runtime=$rt-")" "$(ns 'PoolFirstOutput/runtime=native-')")x (target 2x)"
  echo "syscall  $rt / native:  $(ratio "$(col "GVisorSyscall/runtime=$rt-" ns/syscall)" "$(col 'GVisorSyscall/runtime=native-' ns/syscall)")x ($(col "GVisorSyscall/runtime=$rt-" ns/syscall) vs $(col 'GVisorSyscall/runtime=native-' ns/syscall) ns)"
done
echo "idle     MiB per sandbox: native $(col 'GVisorIdleMemory/runtime=native-' MiB/sandbox), gvisor $(col 'GVisorIdleMemory/runtime=gvisor-' MiB/sandbox)"
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
