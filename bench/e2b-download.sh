#!/usr/bin/env bash
# files.read() of 20 MiB through the official e2b npm SDK against curl of
# the same file from the same airlock serve (loopback, real sandbox): a
# random file and a text one, beside the floor: node's own fetch and curl
# of the same bytes from a bare Go http.FileServer on loopback
# (bench/filefloor), which tells node's cost from airlock's. Root; needs
# node, npm and curl (the SDK is installed into bench/.cache). Usage:
# bench/e2b-download.sh [ROUNDS] (default 10)
#
# OLD=DIR (a directory holding an older build's airlock and airlock-exec,
# e.g. `git archive REV | tar -x -C /tmp/old && make -C /tmp/old build`
# then OLD=/tmp/old/bin) also starts that build's serve and times its
# files.read, node's fetch and curl in the same rounds, in turn with this
# build's.
#
# NODE_FLAGS are given to node, e.g. "--cpu-prof --cpu-prof-dir=DIR".
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
. bench/lib.sh
e2b_serve
if [ -n "${OLD:-}" ]; then
  e2b_serve_old "$OLD/airlock"
  export OLD_API=http://127.0.0.1:$old_api OLD_SANDBOX=http://127.0.0.1:$old_sbx OLD_KEY=$old_key
fi
mkdir -p "$t/floor"
go build -o "$t/filefloor" ./bench/filefloor
"$t/filefloor" -dir "$t/floor" >"$t/floor.addr" &
floor_pid=$!
trap 'kill $floor_pid 2>/dev/null || true; e2b_cleanup' EXIT
for _ in $(seq 100); do [ -s "$t/floor.addr" ] && break; sleep 0.05; done
echo "SDK $sdk files.read of 20 MiB vs curl, $rounds rounds each, medians:"
cp bench/e2bload/download.mjs "$cache/download.mjs"
FLOOR_ADDR=$(cat "$t/floor.addr") FLOOR_DIR=$t/floor e2b_env node ${NODE_FLAGS:-} "$cache/download.mjs" "$rounds"
