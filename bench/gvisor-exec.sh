#!/usr/bin/env bash
# A command in a running sandbox and create to first output from a warm
# pool, gvisor against native, round by round (root, runsc). bench/gvisor.sh
# runs each benchmark's runtimes one after the other, and on this shared
# machine the load drifts between them by more than the difference
# measured; here every round runs each rung once, in an order rotated each
# round, and each ratio is taken within its round:
#   exec-native   BenchmarkGVisorExec/runtime=native: N commands (/bin/true)
#                 in one running sandbox, timed after it settled
#   exec-gvisor   the same on gvisor (target <= 2x exec-native)
#   pool-native   BenchmarkPoolFirstOutput/runtime=native: N creates from a
#                 warm pool, each to its first output (`echo hi`)
#   pool-gvisor   the same on gvisor (target <= 2x pool-native)
#   pool-*-cold   a pool rung with the pool's warm-ups off
#                 (AIRLOCK_BENCH_POOL_WARMUP=off: the pool before them)
#   pool-*-warm   a pool rung with a warm-up on every runtime, natively
#                 too (AIRLOCK_BENCH_POOL_WARMUP=all)
# With AIRLOCK_EXECUTOR_ALT (another airlock-exec, e.g. main's), every
# gvisor rung also runs with it, as exec-gvisor-alt and pool-gvisor-alt,
# and so does every native rung when AIRLOCK_EXECUTOR_ALT_NATIVE=1
# (exec-native-alt, pool-native-alt): the A/B of an executor change, each
# ratio to the same round's rung with the executor built here.
#   AIRLOCK_RUNSC=$(scripts/runsc.sh path) bench/gvisor-exec.sh [ROUNDS] [N] [RUNG...]
#   (default 8 rounds of 20, exec-native exec-gvisor pool-native pool-gvisor)
# Output: one line per rung and round (round, rung, wall ms per op, CPU ms
# per op where the benchmark reports it, load), then per rung the median
# wall and CPU and the geometric mean of its per-round ratio to its
# reference (exec-* to exec-native, pool-* to pool-native, *-alt to the
# rung without -alt).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-8}
n=${2:-20}
shift $(($# < 2 ? $# : 2))
rungs=("$@")
[ ${#rungs[@]} -gt 0 ] || rungs=(exec-native exec-gvisor pool-native pool-gvisor)
if [ -n "${AIRLOCK_EXECUTOR_ALT:-}" ]; then
  for r in "${rungs[@]}"; do
    case $r in
      *-gvisor) rungs+=("$r-alt") ;;
      *-native) [ "${AIRLOCK_EXECUTOR_ALT_NATIVE:-}" != 1 ] || rungs+=("$r-alt") ;;
    esac
  done
fi
runsc=${AIRLOCK_RUNSC:-$(command -v runsc || true)}
[ -n "$runsc" ] || { echo "no runsc: set AIRLOCK_RUNSC or put runsc on PATH" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/linux.test" ./internal/sandbox/linux/
go test -c -o "$tmp/pool.test" ./internal/sandbox/pool/
CGO_ENABLED=0 go build -trimpath -o "$tmp/airlock-exec" ./cmd/airlock-exec
chmod 755 "$tmp" "$tmp/airlock-exec"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
out=$tmp/rounds
for ((r = 0; r < rounds; r++)); do
  k=${#rungs[@]}
  for ((j = 0; j < k; j++)); do
    rung=${rungs[$(((j + r) % k))]}
    ex=$tmp/airlock-exec base=${rung%-alt} warmup=
    [ "$base" = "$rung" ] || ex=$AIRLOCK_EXECUTOR_ALT
    case $base in
      pool-*-cold) warmup=off base=${base%-cold} ;;
      pool-*-warm) warmup=all base=${base%-warm} ;;
    esac
    case $base in
      exec-native | exec-gvisor) bin=$tmp/linux.test b="^BenchmarkGVisorExec\$/^runtime=${base#exec-}\$" ;;
      pool-native | pool-gvisor) bin=$tmp/pool.test b="^BenchmarkPoolFirstOutput\$/^runtime=${base#pool-}\$" ;;
      *) echo "unknown rung $rung" >&2; exit 2 ;;
    esac
    line=$(AIRLOCK_RUNSC=$runsc AIRLOCK_BENCH_RUNSC_REF= AIRLOCK_TEST_EXECUTOR=$ex AIRLOCK_BENCH_POOL_WARMUP=$warmup "$bin" -test.run '^$' \
      -test.bench "$b" -test.benchtime "${n}x" 2>&1 | grep '^Benchmark') ||
      { echo "round $r, $rung: no result" >&2; exit 1; }
    echo "$line" | awk -v r="$r" -v rung="$rung" -v load="$(cut -d' ' -f1 /proc/loadavg)" '
      {c = "-"; for (i = 3; i <= NF; i++) {if ($(i+1) == "ns/op") w = $i / 1e6; if ($(i+1) == "cpu-ms/op") c = $i}}
      END {printf "%d %s %.2f %s %s\n", r, rung, w, c, load}' | tee -a "$out"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo
echo "rung              rounds  wall ms median  CPU ms median  reference         wall / ref (gmean)  CPU / ref (gmean)"
awk '
  {w[$2, $1] = $3; c[$2, $1] = $4; seen[$2] = 1; if ($1 + 1 > nr) nr = $1 + 1}
  function median(a, m,    i, j, t) {
    if (m == 0) return 0
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) {t = a[i]; a[i] = a[j]; a[j] = t}
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END {
    for (g in seen) {
      if (g ~ /-alt$/) ref = substr(g, 1, length(g) - 4)
      else if (g ~ /^exec-/) ref = "exec-native"
      else ref = "pool-native"
      m = 0; mc = 0; lw = 0; lc = 0; kw = 0; kc = 0; delete ws; delete cs
      for (r = 0; r < nr; r++) {
        if (!((g, r) in w)) continue
        m++; ws[m] = w[g, r]
        if (c[g, r] != "-") {mc++; cs[mc] = c[g, r]}
        if (g != ref && (ref, r) in w) {
          kw++; lw += log(w[g, r] / w[ref, r])
          if (c[g, r] != "-" && c[ref, r] != "-") {kc++; lc += log(c[g, r] / c[ref, r])}
        }
      }
      printf "%-17s %6d  %14.2f  %13s  %-16s  %18s  %17s\n", g, m, median(ws, m), mc ? sprintf("%.2f", median(cs, mc)) : "-", g == ref ? "-" : ref,
        kw ? sprintf("%.3f", exp(lw / kw)) : "-", kc ? sprintf("%.3f", exp(lc / kc)) : "-"
    }
  }' "$out" | sort
