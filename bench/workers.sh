#!/usr/bin/env bash
# Runs completed per minute by 1, 2 and 3 airlock workers sharing one store
# (SQLite under one AIRLOCK_HOME; the scripted model; real sandboxes; root).
# Each worker drives one run at a time (--concurrency 1), so the workers are
# the only parallelism. Every run makes two model turns:
# a command in its sandbox, then finish; airlock verifies it and destroys
# the sandbox.
# With STORE=postgres the workers share a throwaway PostgreSQL server
# (bench/pgserver; Debian's postgresql package) instead.
# Usage: [STORE=sqlite|postgres] bench/workers.sh [RUNS]   (default 30 runs per worker count)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-30}
store=${STORE:-sqlite}
make -s build
bin=$PWD/bin/airlock
t=$(mktemp -d)
pg=
cleanup() {
  if [ -n "$pg" ]; then kill "$pg" 2>/dev/null || true; wait "$pg" 2>/dev/null || true; fi
  for h in "$t"/home-*; do [ -d "$h" ] && AIRLOCK_HOME=$h "$bin" sandbox gc --forget >/dev/null 2>&1 || true; done # their cgroup parents
  rm -rf "$t"
}
trap cleanup EXIT
case $store in
sqlite) ;;
postgres)
  go build -o "$t/pgserver" ./bench/pgserver
  mkfifo "$t/pgin"
  "$t/pgserver" <"$t/pgin" >"$t/pgurl" &
  pg=$!
  exec 9>"$t/pgin" # the server runs until this descriptor closes
  for _ in $(seq 100); do [ -s "$t/pgurl" ] && break; sleep 0.1; done
  export AIRLOCK_STORE
  AIRLOCK_STORE=$(head -1 "$t/pgurl")
  ;;
*) echo "STORE must be sqlite or postgres" >&2; exit 2 ;;
esac
echo "store: $store"
cat > "$t/s.yaml" <<'YAML'
turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo hello > out.txt"}
  - tool_calls:
      - name: finish
        args: {summary: "wrote out.txt"}
YAML
printf '%-8s %8s %10s %12s %10s\n' workers runs seconds runs/min cores-busy
for w in 1 2 3; do
  export AIRLOCK_HOME=$t/home-$w
  [ "$store" = sqlite ] && done_before=0 # a fresh store for each count
  for i in $(seq "$runs"); do
    "$bin" run --detach --script "$t/s.yaml" --verify 'test -s out.txt' "run $i" >/dev/null
  done
  # The workers' CPU (user+system, their sandboxes included) over the wall
  # time says how many of the machine's cores they kept busy.
  cpu0=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  start=$(date +%s.%N)
  pids=()
  for i in $(seq "$w"); do
    "$bin" worker --once --concurrency 1 >"$t/w$w-$i.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
  end=$(date +%s.%N)
  cpu1=$(awk '{print $14+$15+$16+$17}' /proc/$$/stat)
  done_runs=$(( $("$bin" runs ls --json --status completed --limit 1000 | wc -l) - ${done_before:-0} ))
  done_before=$(( ${done_before:-0} + done_runs ))
  python3 - "$w" "$done_runs" "$start" "$end" "$cpu0" "$cpu1" "$(getconf CLK_TCK)" <<'PY'
import sys
w, n, s, e, c0, c1, hz = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]), int(sys.argv[7])
print(f"{w:<8} {n:>8} {e-s:>10.1f} {n/(e-s)*60:>12.0f} {(c1-c0)/hz/(e-s):>10.2f}")
PY
done
