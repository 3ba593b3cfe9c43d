#!/usr/bin/env bash
# A run_command of `true` through `airlock mcp` over stdio (the official Go
# SDK's client, one session) against `airlock sandbox exec ID -- true`,
# p50 and p90 (issue 26's target: the MCP p50 at most 1.5x the exec p50).
# Root. Usage: bench/mcp.sh [N]  (default 200)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-200}
make -s build
t=$(mktemp -d)
cleanup() {
  AIRLOCK_HOME=$t/home bin/airlock sandbox gc --forget >/dev/null 2>&1 || true
  rm -rf "$t"
}
trap cleanup EXIT
export AIRLOCK_HOME=$t/home
echo "$(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
go run ./bench/mcpbench -airlock bin/airlock -n "$n"
