# What the E2B API's benchmarks share (bench/e2b.sh, bench/e2b-download.sh,
# bench/ports.sh): source it from the repository's root.

# e2b_serve builds airlock, installs the official e2b npm SDK ($sdk) into
# bench/.cache/e2b-sdk ($cache) once, and starts airlock serve ($pid) with
# the E2B API on free loopback ports (control plane $api, data plane $sbx,
# native API $port) on a fresh $AIRLOCK_HOME under a temporary directory
# ($t), which holds a tenant "bench" with an E2B key ($key); it returns
# once serve is ready, after printing the load average. Everything is
# removed when the script exits (e2b_cleanup), sandboxes' cgroups too.
e2b_serve() {
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
  trap e2b_cleanup EXIT
  export AIRLOCK_HOME=$t/home
  "$bin" tenants create bench >/dev/null
  key=$("$bin" keys create --tenant bench --name sdk --scope sandboxes --e2b 2>/dev/null)
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
}

# e2b_cleanup stops serve and removes what the benchmark made: $t, with
# serve's AIRLOCK_HOME ($t/home) and the CLI's of bench/e2b.sh ($t/cli),
# and their sandboxes' cgroup parents.
e2b_cleanup() {
  if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  for h in "$t/home" "$t/cli"; do
    [ -d "$h" ] && AIRLOCK_HOME=$h "$bin" sandbox gc --forget >/dev/null 2>&1 || true
  done
  rm -rf "$t"
}

# free_port prints a TCP port free on loopback now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# e2b_env runs its arguments with the SDK pointed at serve.
e2b_env() { E2B_API_URL=http://127.0.0.1:$api E2B_SANDBOX_URL=http://127.0.0.1:$sbx E2B_API_KEY=$key "$@"; }
