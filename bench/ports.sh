#!/usr/bin/env bash
# Preview URLs (issue 24): p50 of a request through the data plane to a
# server in a sandbox beside a direct loopback request to the same server
# from inside the sandbox, in the same run and with the same client
# (bench/portsbench/client.py, a fresh connection per request), and WS
# WebSockets held at once through the data plane with airlock serve's
# memory. Root; needs node and npm (the e2b SDK is installed into
# bench/.cache). Usage: bench/ports.sh [N] [WS]   (defaults 2000, 1000)
#
# OLD=DIR (a directory holding an older build's airlock and airlock-exec,
# e.g. `git worktree add /tmp/old REV && make -C /tmp/old build` then
# OLD=/tmp/old/bin) also starts that build's serve with a sandbox of its
# own and times the preview URL through it in the same rounds, in turn
# with this build's: each round's new/old ratio of the p50 and of the CPU a
# request cost serve and the executor is printed, and the
# median of them (a loaded machine's ratio is still a ratio).
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
ws=${2:-1000}
. bench/lib.sh
ulimit -n "$(ulimit -Hn)" # 1,000 WebSockets are 2,000 descriptors in serve
e2b_serve
if [ -n "${OLD:-}" ]; then
  e2b_serve_old "$OLD/airlock"
  export OLD_API=http://127.0.0.1:$old_api OLD_SANDBOX=http://127.0.0.1:$old_sbx OLD_KEY=$old_key OLD_DATA_PLANE=127.0.0.1:$old_sbx OLD_PID=$old_pid
fi
mkdir -p "$t/files"
cp internal/e2b/testdata/wsecho.py bench/portsbench/client.py "$t/files/"
cp bench/portsbench/ports.mjs "$cache/ports.mjs"
e2b_env node "$cache/ports.mjs" "$t/files" "$n" "$ws" "$pid" "127.0.0.1:$sbx" || { tail -20 "$t/home.log"; exit 1; }
