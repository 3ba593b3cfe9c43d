#!/usr/bin/env bash
# files.read() of 20 MiB through the official e2b npm SDK against curl of
# the same file from the same airlock serve (loopback, real sandbox): a
# random file and a text one. Root; needs node, npm and curl (the SDK is
# installed into bench/.cache). Usage: bench/e2b-download.sh [ROUNDS]
# (default 10)
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10}
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
"$bin" serve --config "$t/serve.yaml" --log-level warn >"$t/serve.log" 2>&1 &
pid=$!
for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "SDK $sdk files.read of 20 MiB vs curl, $rounds rounds each, medians:"
cp bench/e2bload/download.mjs "$cache/download.mjs"
E2B_API_URL=http://127.0.0.1:$api E2B_SANDBOX_URL=http://127.0.0.1:$sbx E2B_API_KEY=$key \
  node "$cache/download.mjs" "$rounds"
