#!/usr/bin/env bash
# Load on airlock serve over loopback: RUNS scripted runs created through the
# API at once and driven to completion (real sandboxes), then SUBS SSE
# subscribers on one run; prints run-creation and event-delivery latencies.
# Root (real sandboxes). Usage: bench/serve.sh [RUNS] [SUBS]  (default 100 1000)
# While the RUNS runs execute, 100 more are created one at a time, each timed
# (the API's latency under the load of the runs in flight; -probes N).
# WORKERS=0 SERVELOAD_FLAGS=-create-only measures the API's own creation cost:
# the runs are only created, with no worker starting sandboxes beside it.
# With subscribers, the script then measures the delivery's floor on this
# machine: bench/ssefloor, a bare net/http server, replays the streamed run's
# log (its timing and commits) to as many subscribers of the same load
# generator.
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-100}
subs=${2:-1000}
make -s build
bin=$PWD/bin/airlock
t=$(mktemp -d)
pid=
fpid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  if [ -n "$fpid" ]; then kill "$fpid" 2>/dev/null || true; wait "$fpid" 2>/dev/null || true; fi
  [ -d "$t/home" ] && AIRLOCK_HOME=$t/home "$bin" sandbox gc --forget >/dev/null 2>&1 || true # its cgroup parents
  rm -rf "$t"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
export AIRLOCK_HOME=$t/home
go build -o "$t/serveload" ./bench/serveload
"$bin" tenants create load >/dev/null
key=$("$bin" keys create --tenant load --name load 2>/dev/null)
admin=$("$bin" keys create --tenant load --name metrics --scope admin 2>/dev/null)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$t/serve.yaml" <<YAML
listen: 127.0.0.1:$port
workers: ${WORKERS:-8}
api:
  rate: 100000
  burst: 100000
  max_streams: $((subs + 100))
YAML
"$bin" serve --config "$t/serve.yaml" >"$t/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
"$t/serveload" -url "http://127.0.0.1:$port" -key "$key" -runs "$runs" -subs "$subs" -metrics-key "$admin" \
  -events-out "$t/streamed.jsonl" ${SERVELOAD_FLAGS:-}
# The server's share of the two cores: its CPU time, user and system, over its whole life,
# and its spawner's (the child that starts its sandboxes; the sandboxes' own time is not counted).
hz=$(getconf CLK_TCK)
awk -v hz="$hz" '{printf "server CPU time:        %.2fs", ($14+$15)/hz}' "/proc/$pid/stat"
for c in $(cat /proc/"$pid"/task/*/children 2>/dev/null); do
  if tr '\0' ' ' < /proc/"$c"/cmdline 2>/dev/null | grep -q '^airlock-exec spawn'; then
    awk -v hz="$hz" '{printf " (spawner %.2fs)", ($14+$15)/hz}' "/proc/$c/stat"
  fi
done
echo
[ "$subs" -gt 0 ] && [ -s "$t/streamed.jsonl" ] || exit 0
kill "$pid"; wait "$pid" 2>/dev/null || true; pid=
go build -o "$t/ssefloor" ./bench/ssefloor
fport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
"$t/ssefloor" -listen "127.0.0.1:$fport" -events "$t/streamed.jsonl" &
fpid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$fport/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
echo "floor: the same subscribers on bench/ssefloor (a bare net/http server replaying the streamed run's log):"
"$t/serveload" -url "http://127.0.0.1:$fport" -key floor -runs 0 -subs "$subs" -metrics-key floor | sed -n 's/^/  /; /SSE subscribers/,$p'
