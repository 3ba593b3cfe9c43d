#!/usr/bin/env bash
# Sandbox.create() to first command output through the official e2b npm SDK
# against airlock serve on loopback (real sandboxes), beside the CLI's own
# `airlock sandbox run -- echo ready`. Root; needs node and npm (the SDK is
# installed into bench/.cache). Usage: bench/e2b.sh [N]  (default 100);
# E2B_BENCH_CLI=0 leaves the CLI's run out (alternating runs of the SDK's).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
sdk=e2b@2.51.0
make -s build
bin=$PWD/bin/airlock
cache=$PWD/bench/.cache/e2b-sdk
if [ "$(cat "$cache/installed" 2>/dev/null)" != "$sdk" ]; then
  mkdir -p "$cache"
  npm install --prefix "$cache" --no-audit --no-fund --no-save --no-package-lock --no-update-notifier "$sdk" >/dev/null
  echo "$sdk" >"$cache/installed"
fi
t=$(mktemp -d)
pid=
cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  for h in "$t/home" "$t/cli"; do [ -d "$h" ] && AIRLOCK_HOME=$h "$bin" sandbox gc --forget >/dev/null 2>&1 || true; done # their cgroup parents
  rm -rf "$t"
}
trap cleanup EXIT
export AIRLOCK_HOME=$t/home
"$bin" tenants create bench >/dev/null
key=$("$bin" keys create --tenant bench --name sdk --scope sandboxes --e2b 2>/dev/null)
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
api=$(free_port) sbx=$(free_port) port=$(free_port)
cat >"$t/serve.yaml" <<YAML
listen: 127.0.0.1:$port
workers: 0
e2b:
  api_addr: 127.0.0.1:$api
  sandbox_addr: 127.0.0.1:$sbx
YAML
"$bin" serve --config "$t/serve.yaml" --log-level warn >"$t/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "SDK $sdk, $n sandboxes one after another (5 warm-up ones not counted):"
cp bench/e2bload/create.mjs "$cache/create.mjs"
E2B_API_URL=http://127.0.0.1:$api E2B_SANDBOX_URL=http://127.0.0.1:$sbx E2B_API_KEY=$key \
  node "$cache/create.mjs" "$n" 5
[ "${E2B_BENCH_CLI:-1}" = 0 ] && exit 0
echo "CLI: airlock sandbox run -- echo ready ($n runs):"
if command -v hyperfine >/dev/null; then
  AIRLOCK_HOME=$t/cli hyperfine -N -w 3 -r "$n" --export-json "$t/cli.json" "$bin sandbox run -- echo ready" >"$t/hyperfine.log" 2>&1 || { tail -20 "$t/hyperfine.log"; exit 1; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; ts=sorted(r["times"]); print(json.dumps({"p50": round(r["median"]*1000,1), "p99": round(ts[min(len(ts)-1, int(0.99*len(ts)))]*1000,1)}))' "$t/cli.json"
else
  echo "(hyperfine not installed; bench/compare.sh installs it)"
fi
