#!/usr/bin/env bash
# A gvisor sandbox's cold start against `runsc run` of the same bundle with
# /bin/true, round by round (root, runsc). bench/gvisor.sh runs each rung of
# BenchmarkGVisorStart once after the other, and on this shared machine the
# load drifts between them by more than the difference measured; here every
# round runs each rung N times, in an order rotated each round, and the
# ratio to `runsc run` true is taken within the round:
#   true      `runsc run` of the bundle with /bin/true (the reference)
#   go        the executor printing its version: a Go program's start
#   executor  the executor's setup and handshake to Ready, then its exit,
#             under plain `runsc run`
#   create    Create to the executor's Ready (the target: <= 1.1x true)
#   capped    create with the sandbox's CPU limit (1 CPU) on gVisor's boot
#             too, as before it waited for Ready (docs/gvisor.md)
# With AIRLOCK_RUNSC_ALT (another runsc: a patched or older build), the
# rungs run on it too, as alt-true, alt-create...; with AIRLOCK_EXECUTOR_ALT
# (another airlock-exec), create runs with it too, as create-alt.
#   bench/gvisor-start.sh [ROUNDS] [N] [RUNG...]   (default 8 rounds of 4, true go create)
# Output: one line per rung and round (round, rung, CPU ms per start by
# cgroup, wall ms per start, load), then per rung the median CPU and wall
# and the geometric mean of its per-round ratio to true (alt-* to alt-true).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-8}
n=${2:-4}
shift $(($# < 2 ? $# : 2))
rungs=("$@")
[ ${#rungs[@]} -gt 0 ] || rungs=(true go create)
if [ -n "${AIRLOCK_RUNSC_ALT:-}" ]; then
  for r in "${rungs[@]}"; do rungs+=("alt-$r"); done
fi
if [ -n "${AIRLOCK_EXECUTOR_ALT:-}" ]; then
  rungs+=(create-alt)
fi
runsc=${AIRLOCK_RUNSC:-$(command -v runsc || true)}
[ -n "$runsc" ] || { echo "no runsc: set AIRLOCK_RUNSC or put runsc on PATH" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
go test -c -o "$tmp/linux.test" ./internal/sandbox/linux/
CGO_ENABLED=0 go build -trimpath -o "$tmp/airlock-exec" ./cmd/airlock-exec
chmod 755 "$tmp" "$tmp/airlock-exec"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
out=$tmp/rounds
for ((r = 0; r < rounds; r++)); do
  k=${#rungs[@]}
  for ((j = 0; j < k; j++)); do
    rung=${rungs[$(((j + r) % k))]}
    rs=$runsc ex=$tmp/airlock-exec base=${rung#alt-}
    [ "$base" = "$rung" ] || rs=$AIRLOCK_RUNSC_ALT
    case $base in
      create-alt) ex=$AIRLOCK_EXECUTOR_ALT; b='runtime=gvisor' ;;
      create) b='runtime=gvisor' ;;
      capped) b='runtime=gvisor,boot=capped' ;;
      true | go | executor) b="runsc=$base" ;;
      *) echo "unknown rung $rung" >&2; exit 2 ;;
    esac
    line=$(AIRLOCK_RUNSC=$rs AIRLOCK_TEST_EXECUTOR=$ex "$tmp/linux.test" -test.run '^$' \
      -test.bench "^BenchmarkGVisorStart/$b\$" -test.benchtime "${n}x" 2>&1 | grep '^Benchmark') ||
      { echo "round $r, $rung: no result" >&2; exit 1; }
    echo "$line" | awk -v r="$r" -v rung="$rung" -v load="$(cut -d' ' -f1 /proc/loadavg)" '
      {for (i = 3; i <= NF; i++) {if ($(i+1) == "ns/op") w = $i / 1e6; if ($(i+1) == "cpu-ms/op") c = $i}}
      END {printf "%d %s %.1f %.1f %s\n", r, rung, c, w, load}' | tee -a "$out"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo
echo "rung         rounds  CPU ms median  wall ms median  CPU / true (gmean of rounds)  wall / true"
awk '
  {c[$2, $1] = $3; w[$2, $1] = $4; seen[$2] = 1; if ($1 + 1 > nr) nr = $1 + 1}
  function median(a, m,    i, j, t) {
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) {t = a[i]; a[i] = a[j]; a[j] = t}
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END {
    for (g in seen) {
      ref = g ~ /^alt-/ ? "alt-true" : "true"
      m = 0; lc = 0; lw = 0; k = 0; delete cs; delete ws
      for (r = 0; r < nr; r++) {
        if (!((g, r) in c)) continue
        m++; cs[m] = c[g, r]; ws[m] = w[g, r]
        if ((ref, r) in c) {k++; lc += log(c[g, r] / c[ref, r]); lw += log(w[g, r] / w[ref, r])}
      }
      printf "%-12s %6d  %13.1f  %14.1f  %28.3f  %11.3f\n", g, m, median(cs, m), median(ws, m), k ? exp(lc / k) : 0, k ? exp(lw / k) : 0
    }
  }' "$out" | sort
