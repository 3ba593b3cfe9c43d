#!/usr/bin/env bash
# Egress proxy benchmarks in one run, loopback only: airlock's proxy against a
# direct connection and tinyproxy (Debian's package) to the same upstreams.
# Measures keep-alive GET latency (p50/p90, added p50), CONNECT tunnel
# throughput both ways, and 1,000 concurrent tunnels through airlock, and
# prints medians, ratios and the targets. The load generator is
# bench/egressbench (it runs airlock's proxy in-process on a unix socket).
# Without tinyproxy (and without root to install it) its rows are skipped.
# Usage: bench/egress.sh [egressbench flags, e.g. -trials 11 -tunnels 1000]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v tinyproxy >/dev/null && [ "$(id -u)" -eq 0 ]; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends tinyproxy >/dev/null 2>&1 || true
fi

t=$(mktemp -d)
tpid=""
cleanup() {
  if [ -n "$tpid" ]; then
    kill "$tpid" 2>/dev/null || true
    wait "$tpid" 2>/dev/null || true
  fi
  rm -rf "$t"
}
trap cleanup EXIT

# Loopback ports for the upstreams (egressbench binds them) and tinyproxy,
# chosen here so tinyproxy's ConnectPort can name the TLS upstream's.
read -r http_port tls_port tp_port < <(python3 - <<'PY'
import socket
ss = [socket.socket() for _ in range(3)]
for s in ss:
    s.bind(("127.0.0.1", 0))
print(*(s.getsockname()[1] for s in ss))
PY
)

go build -o "$t/egressbench" ./bench/egressbench
args=(-http-port "$http_port" -tls-port "$tls_port")

if command -v tinyproxy >/dev/null; then
  cat >"$t/tinyproxy.conf" <<EOF
Listen 127.0.0.1
Port $tp_port
Timeout 600
MaxClients 200
Allow 127.0.0.1
ConnectPort $tls_port
DisableViaHeader Yes
XTinyproxy No
LogLevel Critical
LogFile "$t/tinyproxy.log"
EOF
  # As root tinyproxy needs a user to drop to; nobody can read the config.
  if [ "$(id -u)" -eq 0 ]; then
    printf 'User nobody\nGroup nogroup\n' >>"$t/tinyproxy.conf"
    chmod 755 "$t"
    touch "$t/tinyproxy.log"
    chown nobody "$t/tinyproxy.log"
  fi
  tinyproxy -d -c "$t/tinyproxy.conf" &
  tpid=$!
  for _ in $(seq 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$tp_port") 2>/dev/null && break
    sleep 0.05
  done
  echo "tinyproxy $(tinyproxy -v | awk '{print $2}') on 127.0.0.1:$tp_port (pid $tpid)"
  args+=(-tinyproxy "127.0.0.1:$tp_port" -tinyproxy-pid "$tpid")
else
  echo "tinyproxy: not installed (apt-get install tinyproxy, as root); comparing with direct only"
fi
echo "machine: $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), kernel $(uname -r)"
"$t/egressbench" "${args[@]}" "$@"
