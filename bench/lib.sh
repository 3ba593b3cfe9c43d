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
  pid= old_pid= old_bin=
  trap e2b_cleanup EXIT
  export AIRLOCK_HOME=$t/home
  e2b_start "$bin" "$AIRLOCK_HOME"
  pid=$started_pid api=$started_api sbx=$started_sbx port=$started_port key=$started_key
  echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
}

# e2b_serve_old starts a second serve, from the airlock binary BIN (with
# its airlock-exec beside it: an older build, for a comparison in one run)
# on its own home $t/old: $old_pid, $old_api, $old_sbx, $old_key.
e2b_serve_old() {
  old_bin=$1
  e2b_start "$old_bin" "$t/old"
  old_pid=$started_pid old_api=$started_api old_sbx=$started_sbx old_key=$started_key
}

# e2b_start starts BIN serve on HOME as e2b_serve describes and returns
# once it is ready: $started_pid, _api, _sbx, _port, _key.
e2b_start() {
  local b=$1 home=$2
  AIRLOCK_HOME=$home "$b" tenants create bench >/dev/null
  started_key=$(AIRLOCK_HOME=$home "$b" keys create --tenant bench --name sdk --scope sandboxes --e2b 2>/dev/null)
  started_api=$(free_port) started_sbx=$(free_port) started_port=$(free_port)
  cat >"$home.yaml" <<YAML
listen: 127.0.0.1:$started_port
workers: 0
e2b:
  api_addr: 127.0.0.1:$started_api
  sandbox_addr: 127.0.0.1:$started_sbx
YAML
  AIRLOCK_HOME=$home "$b" serve --config "$home.yaml" --log-level warn >"$home.log" 2>&1 &
  started_pid=$!
  for _ in $(seq 100); do curl -fsS "http://127.0.0.1:$started_port/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
}

# e2b_cleanup stops the serves and removes what the benchmark made: $t,
# with serve's AIRLOCK_HOME ($t/home), the older build's ($t/old) and the
# CLI's of bench/e2b.sh ($t/cli), and their sandboxes' cgroup parents.
e2b_cleanup() {
  for p in "$pid" "$old_pid"; do
    if [ -n "$p" ]; then kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; fi
  done
  for h in "$t/home" "$t/cli"; do
    [ -d "$h" ] && AIRLOCK_HOME=$h "$bin" sandbox gc --forget >/dev/null 2>&1 || true
  done
  [ -d "$t/old" ] && AIRLOCK_HOME=$t/old "$old_bin" sandbox gc --forget >/dev/null 2>&1 || true
  rm -rf "$t"
}

# free_port prints a TCP port free on loopback now.
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# e2b_env runs its arguments with the SDK pointed at serve.
e2b_env() { E2B_API_URL=http://127.0.0.1:$api E2B_SANDBOX_URL=http://127.0.0.1:$sbx E2B_API_KEY=$key "$@"; }
