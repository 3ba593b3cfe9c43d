#!/usr/bin/env bash
# gotest.sh ARGS...: go test ARGS..., its output as it comes, then one line
# that sums it up: how many packages passed and failed, and the time taken
# (make test ends on it, failed or not). The exit status is go test's.
# GO names the go command (default go).
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
"${GO:-go}" test "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
# go test's package lines: "ok  <tab>PKG..." and "FAIL<tab>PKG..." (a build
# failure too); a test's own FAIL line has no tab.
passed=$(grep -c '^ok ' "$log")
failed=$(grep -c $'^FAIL\t' "$log")
took=$((SECONDS - start))
printf 'packages: %d passed, %d failed in %dm%02ds\n' "$passed" "$failed" $((took / 60)) $((took % 60))
exit "$status"
