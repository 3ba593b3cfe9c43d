#!/usr/bin/env bash
# Sandbox.create() to first command output through the official e2b npm SDK
# against airlock serve on loopback (real sandboxes), beside the CLI's own
# `airlock sandbox run -- echo ready`. Root; needs node and npm (the SDK is
# installed into bench/.cache). Usage: bench/e2b.sh [N]  (default 100);
# E2B_BENCH_CLI=0 leaves the CLI's run out (alternating runs of the SDK's).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-100}
. bench/lib.sh
e2b_serve
echo "SDK $sdk, $n sandboxes one after another (5 warm-up ones not counted):"
cp bench/e2bload/create.mjs "$cache/create.mjs"
e2b_env node "$cache/create.mjs" "$n" 5
[ "${E2B_BENCH_CLI:-1}" = 0 ] && exit 0
echo "CLI: airlock sandbox run -- echo ready ($n runs):"
if command -v hyperfine >/dev/null; then
  AIRLOCK_HOME=$t/cli hyperfine -N -w 3 -r "$n" --export-json "$t/cli.json" "$bin sandbox run -- echo ready" >"$t/hyperfine.log" 2>&1 || { tail -20 "$t/hyperfine.log"; exit 1; }
  python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["results"][0]; ts=sorted(r["times"]); print(json.dumps({"p50": round(r["median"]*1000,1), "p99": round(ts[min(len(ts)-1, int(0.99*len(ts)))]*1000,1)}))' "$t/cli.json"
else
  echo "(hyperfine not installed; bench/compare.sh installs it)"
fi
