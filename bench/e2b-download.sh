#!/usr/bin/env bash
# files.read() of 20 MiB through the official e2b npm SDK against curl of
# the same file from the same airlock serve (loopback, real sandbox): a
# random file and a text one. Root; needs node, npm and curl (the SDK is
# installed into bench/.cache). Usage: bench/e2b-download.sh [ROUNDS]
# (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
. bench/lib.sh
e2b_serve
echo "SDK $sdk files.read of 20 MiB vs curl, $rounds rounds each, medians:"
cp bench/e2bload/download.mjs "$cache/download.mjs"
e2b_env node "$cache/download.mjs" "$rounds"
