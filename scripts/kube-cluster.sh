#!/usr/bin/env bash
# kube-cluster.sh build|built|deps|prepare|up|down|env: a real single-node Kubernetes cluster on
# this machine for the kubernetes sandbox backend's tests (docs/kubernetes.md;
# the recipe and its measurements are in the project's KUBERNETES.md notes).
#
#   build  builds kube-apiserver and kubelet (test/kube's module, the release
#          its go.mod pins) into $AIRLOCK_KUBE_CACHE/<version>/bin, unless
#          they are there: a second build costs nothing. The node's images
#          (pause, busybox, the tests' Debian sandbox image) are kept in
#          $AIRLOCK_KUBE_CACHE/images, keyed by what they are made of.
#   built  succeeds when both binaries are there.
#   deps   installs the Debian packages the node needs (apt), when missing.
#   prepare  deps, build and the images' files: everything up keeps, none
#          of it running (make test runs it beside the Go tests).
#   up     installs what it needs from Debian (etcd, containerd, the CNI
#          plugins), builds when needed, starts etcd, the API server,
#          containerd and the kubelet under $AIRLOCK_KUBE_STATE, waits for
#          the node to be Ready and writes a kubeconfig there.
#   down   stops exactly the processes up started (by the PIDs it wrote),
#          then removes their containers, mounts, cgroups, bridge and state.
#   env    prints the variables the tests read (eval "$(... env)").
#   forward IP PORT TARGET...  makes IP:PORT (an address of the Service
#          range, 10.96.0.0/24) lead to the TARGETs (HOST:PORT: a server on
#          127.0.0.1, or pods), as kube-proxy would a Service's clusterIP:
#          tagged DNAT rules, for connections from the pods and, when no
#          TARGET is on loopback, from this machine; several TARGETs share
#          the connections at random (the statistic match). down removes
#          them with the cluster's own rules.
#   unforward IP PORT  removes what forward IP PORT made.
#
# Everything listens on loopback; the one exception is the pod bridge
# (airlock-kube0, 10.244.0.0/24), which stays inside the machine: its pods'
# one route off it is to the Service range (10.96.0.0/24), whose addresses
# this machine rewrites: 10.96.0.1, the kubernetes Service, to the API
# server on loopback, and those a test forwards (no kube-proxy). Root only.
set -euo pipefail

VERSION=v1.37.2
CACHE=${AIRLOCK_KUBE_CACHE:-/var/cache/airlock-kube}
BIN=$CACHE/$VERSION/bin
STATE=${AIRLOCK_KUBE_STATE:-/tmp/airlock-kube}
PORT=${AIRLOCK_KUBE_PORT:-6443}
ETCD_PORT=23790
BRIDGE=airlock-kube0
POD_CIDR=10.244.0.0/24
GATEWAY=10.244.0.1
# The kubernetes Service's address (the first of --service-cluster-ip-range):
# what a pod's in-cluster configuration dials, on 443.
SERVICE_IP=10.96.0.1
# The Service range (--service-cluster-ip-range): the pods' one route off
# the bridge, and this machine's route to it, the bridge.
SERVICE_CIDR=10.96.0.0/24
# What tags every rule of this cluster (down removes them all).
TAG=airlock-kube
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}

log() { echo "kube-cluster: $*" >&2; }
die() { log "$*"; exit 1; }

built() {
  [ -x "$BIN/kube-apiserver" ] && [ -x "$BIN/kubelet" ]
}

build() {
  if built; then
    return 0
  fi
  log "building kube-apiserver and kubelet $VERSION into $BIN (about 16 min on 2 idle cores with a cold cache)"
  local minor=${VERSION#v1.}
  minor=${minor%%.*}
  local ld="-s -w -X k8s.io/component-base/version.gitVersion=$VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor -X k8s.io/component-base/version.gitTreeState=clean"
  local tmp=$BIN.tmp.$$
  mkdir -p "$tmp"
  local start=$SECONDS
  (cd "$REPO/test/kube" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "$ld" -o "$tmp/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kubelet)
  mkdir -p "$(dirname "$BIN")"
  rm -rf "$BIN"
  mv "$tmp" "$BIN"
  log "built in $((SECONDS - start)) s"
}

# deps installs the Debian packages the node needs, when missing.
deps() {
  local pkgs=()
  command -v etcd >/dev/null 2>&1 || pkgs+=(etcd-server)
  command -v containerd >/dev/null 2>&1 || pkgs+=(containerd)
  [ -x /usr/lib/cni/bridge ] || pkgs+=(containernetworking-plugins)
  command -v runc >/dev/null 2>&1 || pkgs+=(runc)
  command -v busybox >/dev/null 2>&1 || pkgs+=(busybox-static)
  command -v jq >/dev/null 2>&1 || pkgs+=(jq)
  command -v openssl >/dev/null 2>&1 || pkgs+=(openssl)
  command -v curl >/dev/null 2>&1 || pkgs+=(curl)
  [ ${#pkgs[@]} -eq 0 ] && return 0
  log "installing ${pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # policy-rc.d (or no init) keeps the packages' services from starting:
  # this script runs its own etcd and containerd.
  if ! apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
  fi
}

# start NAME CMD...: runs CMD in the background, its output in NAME.log, its
# PID and executable in pids/NAME (stop checks both: a PID a dead cluster
# left may name another process by now).
start() {
  local name=$1
  shift
  local exe
  exe=$(readlink -f "$(command -v "$1")")
  setsid "$@" >"$STATE/log/$name.log" 2>&1 </dev/null &
  echo "$! $exe" >"$STATE/pids/$name"
}

# SANDBOX_PACKAGES are the Debian packages whose files (with the libraries
# their programs load) make the sandbox test image's tools: the conformance
# suite runs the same commands on every backend, and the linux backend's
# root is this machine's, so busybox alone differs (its find has no -printf,
# its sh -c leaves SIGQUIT ignored in the command it execs).
SANDBOX_PACKAGES="libc6 dash bash coreutils findutils grep sed mawk tar gzip diffutils procps curl"

# debian_files DIR: copies the files of SANDBOX_PACKAGES and the libraries
# their programs need from this machine into DIR (merged /usr: /bin, /lib,
# /lib64 and /sbin are links into usr).
debian_files() {
  local d=$1 list
  list=$(mktemp)
  # shellcheck disable=SC2086
  dpkg -L $SANDBOX_PACKAGES 2>/dev/null | grep -vE '^/usr/share/(doc|man|info|locale|lintian|bug)/|/gconv/' |
    while read -r f; do
      [ -f "$f" ] || [ -L "$f" ] || continue
      echo "$(readlink -f "$(dirname "$f")")/$(basename "$f")"
    done >"$list"
  local elf
  # ldd lists a program's libraries and theirs; the packages' own
  # libraries are among them when a program uses them.
  for elf in $(grep -E '^/usr/s?bin/' "$list"); do
    [ -f "$elf" ] && [ ! -L "$elf" ] || continue
    # Not every file there is a program (bashbug is a script): ldd and
    # grep then fail, which pipefail would make the script's end.
    { ldd "$elf" 2>/dev/null || true; } | { grep -oE '/[^ ]+' || true; } | while read -r l; do
      echo "$l"
      readlink -f "$l"
    done
  done >>"$list"
  sort -u "$list" | while read -r f; do
    [ -e "$f" ] || [ -L "$f" ] || continue
    echo "$(readlink -f "$(dirname "$f")")/$(basename "$f")"
  done | sort -u | sed 's,^/,,' >"$list.rel"
  mkdir -p "$d/usr/bin" "$d/usr/lib" "$d/usr/lib64" "$d/usr/sbin"
  tar -C / --no-recursion -cf - -T "$list.rel" | tar -C "$d" -xf -
  ln -s usr/bin "$d/bin"
  ln -s usr/lib "$d/lib"
  ln -s usr/lib64 "$d/lib64"
  ln -s usr/sbin "$d/sbin"
  ln -sf dash "$d/usr/bin/sh"
  rm -f "$list" "$list.rel"
}

# image NAME ENTRYPOINT...: a docker-archive tarball tagged NAME, on
# stdout: busybox-static with its applets as links, or with DEBIAN=1 the
# Debian tools of SANDBOX_PACKAGES with busybox's applets for the commands
# they lack; /etc/passwd and /etc/group.
image() {
  local name=$1
  shift
  local d
  d=$(mktemp -d)
  mkdir -p "$d/root/etc" "$d/root/tmp" "$d/root/workspace" "$d/root/home"
  local bin=$d/root/bin
  if [ "${DEBIAN:-}" = 1 ]; then
    debian_files "$d/root"
    bin=$d/root/usr/bin
  fi
  mkdir -p "$bin"
  cp "$(command -v busybox)" "$bin/busybox"
  local a
  for a in $("$bin/busybox" --list); do
    [ "$a" = busybox ] || [ -e "$bin/$a" ] || [ -L "$bin/$a" ] || ln -s busybox "$bin/$a"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$d/root/etc/passwd"
  printf 'root:x:0:\nsandbox:x:1000:\nnobody:x:65534:\n' >"$d/root/etc/group"
  chmod 1777 "$d/root/tmp"
  (cd "$d/root" && tar --numeric-owner --owner=0 --group=0 -cf ../layer.tar .)
  local diff
  diff=$(sha256sum "$d/layer.tar" | cut -d' ' -f1)
  local entry
  entry=$(printf '%s\n' "$@" | jq -R . | jq -sc .)
  printf '{"architecture":"amd64","os":"linux","config":{"Entrypoint":%s,"Env":["PATH=/usr/bin:/bin"]},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$entry" "$diff" >"$d/config.json"
  local cfg
  cfg=$(sha256sum "$d/config.json" | cut -d' ' -f1)
  mv "$d/config.json" "$d/$cfg.json"
  mkdir "$d/$diff" && mv "$d/layer.tar" "$d/$diff/layer.tar"
  printf '[{"Config":"%s.json","RepoTags":["%s"],"Layers":["%s/layer.tar"]}]' "$cfg" "$name" "$diff" >"$d/manifest.json"
  (cd "$d" && tar -cf - manifest.json "$cfg.json" "$diff")
  rm -rf "$d"
}

# image_key NAME ENTRYPOINT...: what image NAME ENTRYPOINT... is made of,
# hashed: the image function's own text, its arguments, busybox's
# version and, with DEBIAN=1, the installed versions of SANDBOX_PACKAGES
# and of the packages their libraries come from. Two images of one key
# have the same files.
image_key() {
  {
    declare -f image debian_files
    printf '%s\n' "$@" "DEBIAN=${DEBIAN:-}"
    sha256sum "$(command -v busybox)"
    if [ "${DEBIAN:-}" = 1 ]; then
      # shellcheck disable=SC2086
      dpkg-query -W $SANDBOX_PACKAGES
      # The libraries' packages: what ldd finds outside SANDBOX_PACKAGES.
      dpkg-query -W 2>/dev/null | grep -E '^lib' || true
    fi
  } | sha256sum | cut -c1-16
}

# image_file NAME ENTRYPOINT...: the path of image NAME ENTRYPOINT... in
# $CACHE/images, keyed by image_key; builds and keeps it there first when
# it is not (the Debian sandbox image takes minutes to build, seconds to
# import).
image_file() {
  local dir=$CACHE/images
  local f
  f=$dir/$(echo "$1" | tr '/:' '__')-$(image_key "$@").tar
  if [ ! -s "$f" ]; then
    mkdir -p "$dir"
    local t0=$SECONDS
    image "$@" >"$f.tmp.$$"
    mv "$f.tmp.$$" "$f"
    log "image $1 built in $((SECONDS - t0)) s, kept as $f"
    # Older keys of this image are stale.
    local old
    for old in "$dir/$(echo "$1" | tr '/:' '__')"-*.tar; do
      [ "$old" = "$f" ] || rm -f "$old"
    done
  fi
  echo "$f"
}

# cached_image NAME ENTRYPOINT...: imports image NAME ENTRYPOINT... into
# the node's containerd (image_file).
cached_image() {
  local f
  f=$(image_file "$@")
  ctr -a "$STATE/containerd/containerd.sock" -n k8s.io images import - <"$f" >/dev/null
}

# The node's images: pause, busybox, the tests' Debian sandbox image.
images() {
  "$1" registry.k8s.io/pause:3.10 /bin/sleep 2147483647
  "$1" docker.io/library/busybox:airlock /bin/sh
  DEBIAN=1 "$1" airlock.local/sandbox:test /bin/sh
}

# prepare: what up needs before it starts anything, all of it kept: the
# Debian packages, the binaries, the images' files. make test runs it in
# the background, beside the Go tests.
prepare() {
  [ "$(id -u)" -eq 0 ] || die "prepare needs root"
  deps
  build
  images image_file >/dev/null
}

api() {
  curl -sS --cacert "$STATE/pki/apiserver.crt" -H "Authorization: Bearer $(cat "$STATE/token")" "$@"
}

up() {
  [ "$(id -u)" -eq 0 ] || die "up needs root"
  if [ -d "$STATE/pids" ]; then
    die "$STATE holds a cluster already (run down first)"
  fi
  deps
  build
  local t0=$SECONDS
  mkdir -p "$STATE"/{pids,log,pki,etcd,containerd,kubelet,cni/net.d,cni/bin,seccomp}
  # What down must remove outside the state directory: only what was not
  # there before.
  : >"$STATE/created"
  local p
  for p in /var/log/containers /var/log/pods /run/containerd /usr/libexec/kubernetes; do
    [ -e "$p" ] || echo "$p" >>"$STATE/created"
  done

  # Credentials: one static token in system:masters, one service account key.
  head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$STATE/token"
  echo "$(cat "$STATE/token"),airlock-admin,airlock-admin,system:masters" >"$STATE/pki/tokens.csv"
  openssl genrsa -out "$STATE/pki/sa.key" 2048 2>/dev/null

  start etcd etcd --name airlock-kube --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls http://127.0.0.1:23800 --initial-advertise-peer-urls http://127.0.0.1:23800 \
    --initial-cluster airlock-kube=http://127.0.0.1:23800

  # Pods reach the API server as on a cluster: the kubernetes Service's
  # address, 10.96.0.1:443 (KUBERNETES_SERVICE_HOST/PORT, which the kubelet
  # gives every pod). There is no kube-proxy: the pods' one route off the
  # bridge is to that address alone, through the gateway, and this machine
  # rewrites (DNAT) what arrives on the bridge for 10.96.0.1:443 to the API
  # server on 127.0.0.1, which route_localnet, on the bridge alone, lets
  # through. Nothing is forwarded off the bridge (FORWARD drop, whatever
  # ip_forward is). The bridge is made here, before the CNI plugin would,
  # so that the sysctl and the rules are in place before the first pod.
  ip link add "$BRIDGE" type bridge 2>/dev/null || true
  ip addr replace "$GATEWAY/${POD_CIDR#*/}" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  sysctl -qw "net.ipv4.conf.$BRIDGE.route_localnet=1"
  # This machine's own connections to the Service range go to the bridge
  # too (forward's OUTPUT rules), never to the default route; the route
  # goes with the bridge.
  ip route replace "$SERVICE_CIDR" dev "$BRIDGE"
  nat_rules -A

  # containerd: its own root, state, socket and CNI directories; pause is a
  # local image (no registry); restrict_oom_score_adj because this machine
  # lacks CAP_SYS_RESOURCE (the pause container's -998 fails otherwise).
  ln -sf /usr/lib/cni/bridge /usr/lib/cni/host-local /usr/lib/cni/loopback "$STATE/cni/bin/"
  cat >"$STATE/cni/net.d/10-airlock.conflist" <<EOF
{"cniVersion":"0.4.0","name":"airlock-kube","plugins":[{"type":"bridge","bridge":"$BRIDGE","isGateway":true,"ipMasq":false,
 "ipam":{"type":"host-local","ranges":[[{"subnet":"$POD_CIDR","gateway":"$GATEWAY"}]],"routes":[{"dst":"$SERVICE_CIDR"}],"dataDir":"$STATE/cni/ipam"}}]}
EOF
  cat >"$STATE/containerd/config.toml" <<EOF
version = 2
root = "$STATE/containerd/root"
state = "$STATE/containerd/state"
[grpc]
  address = "$STATE/containerd/containerd.sock"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "registry.k8s.io/pause:3.10"
  restrict_oom_score_adj = true
  stream_server_address = "127.0.0.1"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "$STATE/cni/bin"
    conf_dir = "$STATE/cni/net.d"
EOF
  start containerd containerd --config "$STATE/containerd/config.toml"

  # API server: loopback, static token, no endpoint reconciler (it refuses
  # a loopback advertise address), kubelet reached by its hostname.
  start kube-apiserver "$BIN/kube-apiserver" \
    --etcd-servers="http://127.0.0.1:$ETCD_PORT" --bind-address=127.0.0.1 --secure-port="$PORT" \
    --advertise-address=127.0.0.1 --endpoint-reconciler-type=none \
    --cert-dir="$STATE/pki" --token-auth-file="$STATE/pki/tokens.csv" \
    --service-account-key-file="$STATE/pki/sa.key" --service-account-signing-key-file="$STATE/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc \
    --authorization-mode=Node,RBAC --service-cluster-ip-range=10.96.0.0/24 \
    --kubelet-preferred-address-types=Hostname

  local i
  for i in $(seq 100); do
    [ -S "$STATE/containerd/containerd.sock" ] && break
    sleep 0.1
  done
  [ -S "$STATE/containerd/containerd.sock" ] || die "containerd did not start: $(tail -5 "$STATE/log/containerd.log")"
  images cached_image

  for i in $(seq 600); do
    [ -s "$STATE/pki/apiserver.crt" ] && [ "$(api "https://127.0.0.1:$PORT/readyz" 2>/dev/null)" = ok ] && break
    sleep 0.1
  done
  [ "$(api "https://127.0.0.1:$PORT/readyz" 2>/dev/null)" = ok ] || die "API server not ready: $(tail -5 "$STATE/log/kube-apiserver.log")"

  local ca
  ca=$(base64 -w0 <"$STATE/pki/apiserver.crt")
  cat >"$STATE/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: airlock-kube
  cluster: {server: "https://127.0.0.1:$PORT", certificate-authority-data: "$ca"}
users:
- name: airlock-admin
  user: {token: "$(cat "$STATE/token")"}
contexts:
- name: airlock-kube
  context: {cluster: airlock-kube, user: airlock-admin}
current-context: airlock-kube
EOF
  chmod 600 "$STATE/kubeconfig"

  # kubelet: cgroupfs on this machine's cgroup v1, named localhost so the
  # API server reaches it on loopback for exec and logs; test-only
  # anonymous AlwaysAllow on 127.0.0.1.
  cat >"$STATE/kubelet/config.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://$STATE/containerd/containerd.sock
address: 127.0.0.1
healthzBindAddress: 127.0.0.1
healthzPort: 0
readOnlyPort: 0
podLogsDir: $STATE/pod-logs
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
evictionHard: {memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%"}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
EOF
  # Seccomp profiles the backend's pods may name (Localhost): the kubelet
  # reads them from <root-dir>/seccomp.
  mkdir -p "$STATE/kubelet/root/seccomp"
  start kubelet "$BIN/kubelet" --config="$STATE/kubelet/config.yaml" --kubeconfig="$STATE/kubeconfig" \
    --root-dir="$STATE/kubelet/root" --cert-dir="$STATE/kubelet/pki" --hostname-override=localhost

  for i in $(seq 600); do
    if [ "$(api "https://127.0.0.1:$PORT/api/v1/nodes/localhost" 2>/dev/null |
      jq -r '.status | objects | .conditions[]? | select(.type=="Ready") | .status' 2>/dev/null)" = True ]; then
      log "node Ready after $((SECONDS - t0)) s; $(print_env)"
      return 0
    fi
    sleep 0.1
  done
  die "node not Ready after 60 s: $(tail -5 "$STATE/log/kubelet.log")"
}

# nat_rules -A|-D: adds or deletes the rules that take a pod's connection
# to the kubernetes Service (10.96.0.1:443) to the API server on loopback,
# and that forward nothing else off the bridge.
nat_rules() {
  local op=$1 c=(-m comment --comment "$TAG")
  iptables -t nat "$op" PREROUTING -i "$BRIDGE" -d "$SERVICE_IP/32" -p tcp --dport 443 "${c[@]}" \
    -j DNAT --to-destination "127.0.0.1:$PORT"
  iptables "$op" FORWARD -i "$BRIDGE" ! -o "$BRIDGE" "${c[@]}" -j DROP
}

# sweep_rules: deletes every rule tagged $TAG (nat_rules', forward's),
# whatever a killed test left.
sweep_rules() {
  local t r
  for t in nat filter; do
    iptables -t "$t" -S 2>/dev/null | { grep -- "--comment $TAG" || true; } | sed 's/^-A /-D /' | while read -r r; do
      # shellcheck disable=SC2086
      iptables -t "$t" $r 2>/dev/null || true
    done
  done
}

# forward IP PORT TARGET...: see the usage above.
forward() {
  [ -d "$STATE/pids" ] || die "no cluster is up"
  local ip=${1:?usage: forward IP PORT TARGET...} port=${2:?usage: forward IP PORT TARGET...}
  shift 2
  [ $# -gt 0 ] || die "usage: forward IP PORT TARGET..."
  case "$ip" in
  10.96.0.1) die "$ip is the kubernetes Service's" ;;
  10.96.0.*) ;;
  *) die "$ip is not in the Service range $SERVICE_CIDR" ;;
  esac
  local chains=(PREROUTING) t
  for t in "$@"; do
    case "$t" in
    127.0.0.1:*) chains=(PREROUTING) && break ;;
    10.244.0.*:*) chains=(PREROUTING OUTPUT) ;;
    *) die "target $t is neither on loopback nor a pod's" ;;
    esac
  done
  unforward "$ip" "$port"
  local ch n=$# i
  for ch in "${chains[@]}"; do
    local in=()
    [ "$ch" = PREROUTING ] && in=(-i "$BRIDGE")
    i=0
    for t in "$@"; do
      # The i-th of n takes 1/(n-i) of what the ones before left: each
      # 1/n; the last takes the rest.
      local stat=()
      if [ $((n - i)) -gt 1 ]; then
        stat=(-m statistic --mode random --probability "$(awk -v k=$((n - i)) 'BEGIN{printf "%.5f", 1/k}')")
      fi
      iptables -t nat -A "$ch" "${in[@]}" -d "$ip/32" -p tcp --dport "$port" "${stat[@]}" \
        -m comment --comment "$TAG" -j DNAT --to-destination "$t"
      i=$((i + 1))
    done
  done
}

# unforward IP PORT: deletes forward IP PORT's rules.
unforward() {
  local ip=${1:?usage: unforward IP PORT} port=${2:?usage: unforward IP PORT} r
  iptables -t nat -S 2>/dev/null | { grep -- "--comment $TAG" || true; } | { grep -F -- "-d $ip/32 " || true; } |
    { grep -- "--dport $port " || true; } | sed 's/^-A /-D /' | while read -r r; do
    # shellcheck disable=SC2086
    iptables -t nat $r || true
  done
}

# stop NAME: kills the process up started as NAME and waits for it.
stop() {
  local f=$STATE/pids/$1
  [ -s "$f" ] || return 0
  local pid exe
  read -r pid exe <"$f"
  if [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" != "$exe" ]; then
    rm -f "$f" # gone, or the PID is another process's now
    return 0
  fi
  if kill "$pid" 2>/dev/null; then
    local i
    for i in $(seq 100); do
      kill -0 "$pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$f"
}

down() {
  [ -d "$STATE" ] || return 0
  stop kubelet
  stop kube-apiserver
  local sock=$STATE/containerd/containerd.sock
  if [ -S "$sock" ]; then
    local c
    for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks kill -s KILL "$c" >/dev/null 2>&1 || true
    done
    sleep 0.5
    for c in $(ctr -a "$sock" -n k8s.io tasks ls -q 2>/dev/null); do
      ctr -a "$sock" -n k8s.io tasks delete -f "$c" >/dev/null 2>&1 || true
    done
  fi
  stop containerd
  stop etcd
  # Mounts under the state directory (the kubelet binds its root onto
  # itself; pods' volumes and the shims' rootfs), deepest first.
  local m
  for m in $(awk -v s="$STATE" 'index($2, s) == 1 {print $2}' /proc/self/mounts | sort -r); do
    umount -l "$m" 2>/dev/null || true
  done
  # The pods' cgroups (cgroupfs driver: kubepods in each v1 hierarchy).
  local h
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h/kubepods" ] && find "$h/kubepods" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  nat_rules -D 2>/dev/null || true
  sweep_rules
  ip link del "$BRIDGE" 2>/dev/null || true
  if [ -f "$STATE/created" ]; then
    while read -r p; do rm -rf "$p"; done <"$STATE/created"
  fi
  rm -rf "$STATE"
}

print_env() {
  echo "export AIRLOCK_KUBECONFIG=$STATE/kubeconfig AIRLOCK_KUBE_CONTAINERD=$STATE/containerd/containerd.sock AIRLOCK_KUBE_SECCOMP=$STATE/kubelet/root/seccomp"
}

case "${1:-}" in
build) build ;;
built) built ;;
deps) deps ;;
prepare) prepare ;;
up) up ;;
down) down ;;
env) print_env ;;
forward) shift && forward "$@" ;;
unforward) shift && unforward "$@" ;;
*)
  echo "usage: $0 build|built|deps|prepare|up|down|env|forward|unforward" >&2
  exit 2
  ;;
esac
