#!/usr/bin/env bash
# runsc flags against airlock's, round by round (root, runsc): each variant
# runs a gvisor benchmark of internal/sandbox/linux with a wrapper as its
# runsc that adds the variant's flags after airlock's own global flags (the
# later one wins), in an order rotated each round, and each ratio is taken
# within its round against the variant "base" (airlock's flags alone).
#   AIRLOCK_RUNSC=$(scripts/runsc.sh path) bench/gvisor-flags.sh ROUNDS N BENCH VARIANT...
# BENCH is the benchmark's -test.bench pattern (e.g.
# '^BenchmarkGVisorExec$/^runtime=gvisor$', or
# '^BenchmarkGVisorExecSplit$/^runtime=gvisor$/^probe=(cmd-true|spawn-true)$':
# each level anchored, as '^BenchmarkGVisorExec/' also matches
# BenchmarkGVisorExecSplit);
# N its -test.benchtime in iterations; a VARIANT is NAME=FLAGS, FLAGS
# space-separated runsc global flags, e.g.
#   base= 'excl=--file-access-mounts=exclusive' 'dcache=--dcache=4096'
# Output: one line per variant, benchmark and round (round, variant,
# benchmark, wall ms per op, CPU ms per op, load), then per variant and
# benchmark the median wall and CPU and the geometric mean of the
# per-round ratio to base.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:?rounds} n=${2:?iterations} bench=${3:?benchmark pattern}
shift 3
[ $# -gt 0 ] || { echo "no variants" >&2; exit 2; }
runsc=${AIRLOCK_RUNSC:-$(command -v runsc || true)}
[ -n "$runsc" ] || { echo "no runsc: set AIRLOCK_RUNSC or put runsc on PATH" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
chmod 755 "$tmp"
go test -c -o "$tmp/linux.test" ./internal/sandbox/linux/
CGO_ENABLED=0 go build -trimpath -o "$tmp/airlock-exec" ./cmd/airlock-exec
chmod 755 "$tmp/airlock-exec"
names=()
for v in "$@"; do
  name=${v%%=*} flags=${v#*=}
  names+=("$name")
  # The wrapper puts the variant's flags before runsc's subcommand (the
  # first argument that is no flag and not --root's value).
  cat >"$tmp/runsc-$name" <<EOF
#!/usr/bin/env bash
extra=($flags)
args=() done=0 skip=0
for a in "\$@"; do
  if [ \$done = 0 ] && [ \$skip = 0 ] && [ "\${a#-}" = "\$a" ]; then args+=("\${extra[@]}"); done=1; fi
  skip=0; [ "\$a" = --root ] && skip=1
  args+=("\$a")
done
exec $runsc "\${args[@]}"
EOF
  chmod 755 "$tmp/runsc-$name"
done
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
out=$tmp/rounds
for ((r = 0; r < rounds; r++)); do
  k=${#names[@]}
  for ((j = 0; j < k; j++)); do
    name=${names[$(((j + r) % k))]}
    load=$(cut -d' ' -f1 /proc/loadavg)
    # The test binary runs in its package's directory, as go test runs
    # it (BenchmarkGVisorExecSplit builds its probes from testdata).
    (cd internal/sandbox/linux && AIRLOCK_RUNSC=$tmp/runsc-$name AIRLOCK_BENCH_RUNSC_REF= AIRLOCK_TEST_EXECUTOR=$tmp/airlock-exec \
      "$tmp/linux.test" -test.run '^$' -test.bench "$bench" -test.benchtime "${n}x" 2>&1) >"$tmp/last" || true
    grep -q '^Benchmark' "$tmp/last" || { echo "round $r, $name: no result" >&2; tail -20 "$tmp/last" >&2; exit 1; }
    grep '^Benchmark' "$tmp/last" |
      awk -v r="$r" -v v="$name" -v load="$load" '
        {b = $1; sub(/-[0-9]+$/, "", b); sub(/^Benchmark/, "", b); w = "-"; c = "-"
         for (i = 3; i < NF; i++) {if ($(i+1) == "ns/op" && $i > 0) w = $i / 1e6; if ($(i+1) == "ms/op") w = $i; if ($(i+1) == "cpu-ms/op") c = $i}
         printf "%d %s %s %s %s %s\n", r, v, b, w, c, load}' | tee -a "$out"
  done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo
printf '%-10s %-52s %6s %10s %10s %12s %12s\n' variant benchmark rounds wall-ms cpu-ms wall/base cpu/base
awk '
  {w[$2, $3, $1] = $4; c[$2, $3, $1] = $5; seen[$2 SUBSEP $3] = 1; if ($1 + 1 > nr) nr = $1 + 1}
  function median(a, m,    i, j, t) {
    if (m == 0) return 0
    for (i = 1; i <= m; i++) for (j = i + 1; j <= m; j++) if (a[j] < a[i]) {t = a[i]; a[i] = a[j]; a[j] = t}
    return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2
  }
  END {
    for (key in seen) {
      split(key, kv, SUBSEP); v = kv[1]; b = kv[2]
      m = 0; mc = 0; kw = 0; kc = 0; lw = 0; lc = 0; delete ws; delete cs
      for (r = 0; r < nr; r++) {
        if (!((v, b, r) in w)) continue
        m++; ws[m] = w[v, b, r]
        if (c[v, b, r] != "-") {mc++; cs[mc] = c[v, b, r]}
        if (v != "base" && ("base", b, r) in w) {
          kw++; lw += log(w[v, b, r] / w["base", b, r])
          if (c[v, b, r] != "-" && c["base", b, r] != "-") {kc++; lc += log(c[v, b, r] / c["base", b, r])}
        }
      }
      printf "%-10s %-52s %6d %10.3f %10s %12s %12s\n", v, b, m, median(ws, m), mc ? sprintf("%.3f", median(cs, mc)) : "-",
        kw ? sprintf("%.3f", exp(lw / kw)) : "-", kc ? sprintf("%.3f", exp(lc / kc)) : "-"
    }
  }' "$out" | sort -k2,2 -k1,1
