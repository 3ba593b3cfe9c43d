#!/usr/bin/env bash
# Preview URLs (issue 24): p50 of a request through the data plane to a
# server in a sandbox beside a direct loopback request to the same server
# from inside the sandbox, in the same run and with the same client
# (bench/portsbench/client.py, a fresh connection per request), and WS
# WebSockets held at once through the data plane with airlock serve's
# memory. Root; needs node and npm (the e2b SDK is installed into
# bench/.cache). Usage: bench/ports.sh [N] [WS]   (defaults 2000, 1000)
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-2000}
ws=${2:-1000}
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
  [ -d "$t/home" ] && AIRLOCK_HOME=$t/home "$bin" sandbox gc --forget >/dev/null 2>&1 || true
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
ulimit -n "$(ulimit -Hn)" # 1,000 WebSockets are 2,000 descriptors in serve
"$bin" serve --config "$t/serve.yaml" --log-level warn >"$t/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
mkdir -p "$t/files"
cp internal/e2b/testdata/wsecho.py bench/portsbench/client.py "$t/files/"
cp bench/portsbench/ports.mjs "$cache/ports.mjs"
E2B_API_URL=http://127.0.0.1:$api E2B_SANDBOX_URL=http://127.0.0.1:$sbx E2B_API_KEY=$key \
  node "$cache/ports.mjs" "$t/files" "$n" "$ws" "$pid" "127.0.0.1:$sbx" || { tail -20 "$t/serve.log"; exit 1; }
