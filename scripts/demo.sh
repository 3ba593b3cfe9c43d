#!/usr/bin/env bash
# make demo: build airlock, then build and test the example project inside a
# sandbox with no network, and show that the host copy is untouched.
set -euo pipefail
cd "$(dirname "$0")/.."
make -s build
AIRLOCK=./bin/airlock
export AIRLOCK_HOME=${AIRLOCK_HOME:-$(mktemp -d)}
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "airlock doctor: the isolation layers this machine enforces"
$AIRLOCK doctor

say "build and test examples/calc in a fresh sandbox (no network, cow workspace)"
$AIRLOCK sandbox run --workspace examples/calc --memory 512M --timeout 2m --json -- sh -c '
  set -e
  echo "inside: $(id -un) in $(pwd) on $(hostname)"
  python3 -m compileall -q . && echo "compiled"
  python3 -m unittest -v 2>&1
  echo "built at $(date -u +%FT%TZ)" > BUILD_INFO
  rm test_calc.py
  ls
'

say "the model cannot reach the network: no route, no DNS"
if $AIRLOCK sandbox run -- python3 -c 'import urllib.request; urllib.request.urlopen("http://example.com", timeout=3)' 2>/dev/null; then
  echo "UNEXPECTED: network reachable"; exit 1
else
  echo "refused, as it should be"
fi

say "the host copy is untouched (the sandbox's changes died with it)"
ls examples/calc
if [ -e examples/calc/BUILD_INFO ] || [ ! -e examples/calc/test_calc.py ]; then
  echo "UNEXPECTED: host copy changed"; exit 1
fi
find examples/calc -name __pycache__ -prune -exec false {} + || { echo "UNEXPECTED: __pycache__ on host"; exit 1; }
echo "unchanged"

say "a limit ends the command with a clear reason"
set +e
$AIRLOCK sandbox run --timeout 1s -- sleep 30
echo "exit status $? (124 = timeout)"
