#!/usr/bin/env bash
# Side-by-side sandbox benchmarks in one run: airlock against bubblewrap, runc
# and runsc (gVisor) from Debian's packages, and a plain fork+exec floor.
# Prints medians and ratios. Needs root. Usage: [IDLE=500] [ROWS="cold warm
# exec idle rate"] bench/compare.sh [RUNS]; ROWS picks the sections (all by
# default: ROWS=warm runs only the warm rows). The cold rows run without a
# sandbox daemon; the warm rows start one (airlock sandbox daemon) in the
# throwaway $AIRLOCK_HOME.
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${1:-40}
IDLE=${IDLE:-500}
ROWS=" ${ROWS:-cold warm exec idle rate} "
want() { [[ $ROWS == *" $1 "* ]]; }
GO=${GO:-go}
[ "$(id -u)" -eq 0 ] || { echo "bench/compare.sh needs root" >&2; exit 1; }
for p in hyperfine bwrap runc runsc; do
  command -v "$p" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hyperfine bubblewrap runc runsc >/dev/null
done
make -s build
AL=$PWD/bin/airlock
export AIRLOCK_HOME=$(mktemp -d)
t=$(mktemp -d)
cleanup() {
  [ -n "${bpid:-}" ] && kill "$bpid" 2>/dev/null || true
  [ -n "${dpid:-}" ] && kill "$dpid" 2>/dev/null && wait "$dpid" 2>/dev/null || true
  [ -n "${sid:-}" ] && "$AL" sandbox rm "$sid" >/dev/null 2>&1 || true
  "$AL" sandbox gc --forget >/dev/null 2>&1 || true # the throwaway home's cgroup parents
  rm -rf "$t" "$AIRLOCK_HOME"
}
trap cleanup EXIT

BW="bwrap --unshare-all --unshare-user --new-session --die-with-parent --ro-bind /usr /usr --symlink usr/bin /bin --symlink usr/lib /lib --symlink usr/lib64 /lib64 --symlink usr/sbin /sbin --tmpfs /tmp --proc /proc --dev /dev"

# An OCI bundle whose root is the host's /usr, read-only, like the others.
mkdir -p "$t/bundle/rootfs"
(cd "$t/bundle" && runc spec)
for l in bin lib lib64 sbin; do ln -s "usr/$l" "$t/bundle/rootfs/$l"; done
mkdir -p "$t/bundle/rootfs/usr" "$t/bundle/rootfs/proc" "$t/bundle/rootfs/dev" "$t/bundle/rootfs/tmp"
python3 - "$t/bundle/config.json" <<'PY'
import json, sys
p = sys.argv[1]
c = json.load(open(p))
c["process"]["args"] = ["/bin/true"]
c["process"]["terminal"] = False
c["root"]["readonly"] = True
c["mounts"].append({"destination": "/usr", "type": "bind", "source": "/usr", "options": ["rbind", "ro"]})
c["mounts"].append({"destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev"]})
json.dump(c, open(p, "w"))
PY

median() { python3 -c "import json,sys; r=json.load(open(sys.argv[1]))['results']; print(' '.join('%.2f'%(x['median']*1000) for x in r))" "$1"; }
ratio() { python3 -c "print('%.2f' % ($1/$2))"; }

echo "== this machine: what a process's start pays for every page it uses"
$GO build -o "$t/pagetouch" ./bench/pagetouch
"$t/pagetouch"

if want cold; then
echo
echo "== cold start: create, run /bin/true, destroy (median ms of $RUNS)"
hyperfine -N -w 3 -r "$RUNS" --export-json "$t/cold.json" \
  "/bin/true" \
  "$t/pagetouch -exit" \
  "$AL sandbox run -- /bin/true" \
  "$BW /bin/true" \
  "runc run -b $t/bundle bench-runc" \
  "runsc --network=none --ignore-cgroups run -bundle $t/bundle bench-runsc" >/dev/null
read -r floor gofloor al bw rc rs <<<"$(median "$t/cold.json")"
printf '%-28s %8s ms\n' "fork+exec floor" "$floor" "a Go process (exits at once)" "$gofloor" "airlock sandbox run" "$al" "bwrap" "$bw" "runc run" "$rc" "runsc run" "$rs"
echo "ratios: airlock/bwrap $(ratio "$al" "$bw")   airlock/runc $(ratio "$al" "$rc")   airlock/runsc $(ratio "$al" "$rs")   airlock/floor $(ratio "$al" "$floor")"
# Page faults of one start, summed over its processes (the median of 5):
# with the first touch's cost above, most of the gap to bwrap.
faults() { python3 - "$@" <<'PY'
import resource, statistics, subprocess, sys
n = []
for _ in range(5):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, check=True)
    n.append(resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before)
print(int(statistics.median(n)))
PY
}
# shellcheck disable=SC2086 # $BW is a command line split on spaces
echo "page faults per start: /bin/true $(faults /bin/true)   Go process $(faults "$t/pagetouch" -exit)   airlock $(faults "$AL" sandbox run -- /bin/true)   bwrap $(faults $BW /bin/true)"

echo
echo "== cold start with an image root: the same, the root a one-layer image of /bin/true and its libraries (median ms of $RUNS)"
# bench/trueimage.py writes the image; airlock imports it (no registry) and
# bwrap runs on the very tree airlock unpacked it to, read-only.
read -r img diff <<<"$(python3 bench/trueimage.py "$t/true.tar")"
"$AL" image import "$t/true.tar" >/dev/null
layer=$AIRLOCK_HOME/images/layers/${diff#sha256:}
[ -d "$layer" ] || { echo "no unpacked layer at $layer" >&2; exit 1; }
BWI="bwrap --unshare-all --unshare-user --new-session --die-with-parent --ro-bind $layer / --tmpfs /tmp --proc /proc --dev /dev"
hyperfine -N -w 3 -r "$RUNS" --export-json "$t/coldimg.json" \
  "$AL sandbox run --image $img -- /bin/true" \
  "$BWI /bin/true" \
  "$t/pagetouch -exit" >/dev/null
read -r ali bwi goi <<<"$(median "$t/coldimg.json")"
printf '%-28s %8s ms\n' "airlock run --image" "$ali" "bwrap on its layer" "$bwi" "a Go process (exits at once)" "$goi"
echo "ratio: airlock image/bwrap $(ratio "$ali" "$bwi")   cold target with an image: $ali against $(python3 -c "print('%.2f' % ($bwi + 2*$goi))") ms (bwrap + two Go starts)"
# shellcheck disable=SC2086 # $BWI is a command line split on spaces
echo "page faults per start: airlock --image $(faults "$AL" sandbox run --image "$img" -- /bin/true)   bwrap $(faults $BWI /bin/true)"

fi

if want warm; then
echo
echo "== warm start: sandbox run handed to a running airlock sandbox daemon (median ms of $RUNS)"
# The daemon keeps sandboxes of the default spec ready; each run takes one,
# and the daemon makes the next after it. --prepare gives both commands the
# same pause before each timed run (not timed), in which the daemon refills:
# what a caller sees when its runs are not back to back. Back to back, the
# refill bounds the rate (the throughput rows below).
"$AL" sandbox daemon 2>"$t/daemon.log" & dpid=$!
for _ in $(seq 100); do [ -S "$AIRLOCK_HOME/sandbox.sock" ] && break; sleep 0.05; done
sleep 1 # the pool's first sandboxes
# The daemon's CPU (its own, its spawner's and what they reaped: the
# sandboxes' executors and commands) across the runs, refills and
# destroys included: the work a warm run moves off its critical path.
treecpu() { python3 - "$@" <<'PY'
import os, sys
t = 0
for p in sys.argv[1:]:
    f = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
    t += sum(int(x) for x in f[11:15])  # utime stime cutime cstime
print(t * 1000 // os.sysconf("SC_CLK_TCK"))
PY
}
# The same hand-off from the Go front end, as a front end built without the
# thin entry (go build, go install) or a run with any flag makes it: the
# thin entry's gain is the difference.
mkdir -p "$t/plain"
CGO_ENABLED=0 $GO build -trimpath -o "$t/plain/airlock" ./cmd/airlock
ln -s "$PWD/bin/airlock-exec" "$PWD/bin/airlock-host" "$t/plain/"
thin="the thin entry"
$GO tool nm "$AL" | grep airlock_thin_entry >/dev/null || thin="NO thin entry: make build could not link it"
dtree="$dpid $(pgrep -P "$dpid" | tr '\n' ' ')"
# shellcheck disable=SC2086 # a list of pids
c0=$(treecpu $dtree)
hyperfine -N -w 3 -r "$RUNS" --prepare "sleep 0.15" --export-json "$t/warm.json" \
  "$AL sandbox run -- /bin/true" \
  "$BW /bin/true" \
  "$t/pagetouch -exit" \
  "$t/plain/airlock sandbox run -- /bin/true" >/dev/null
sleep 0.5 # the last run's destroy and refill
# shellcheck disable=SC2086
c1=$(treecpu $dtree)
read -r alw bww gow pgw <<<"$(median "$t/warm.json")"
printf '%-28s %8s ms\n' "airlock sandbox run (warm, $thin)" "$alw" "bwrap" "$bww" "a Go process (exits at once)" "$gow" "the same from the Go front end" "$pgw"
echo "ratio: airlock warm/bwrap $(ratio "$alw" "$bww")   (target <= 1.0)   the Go front end's: $(ratio "$pgw" "$bww"), $(python3 -c "print('%.2f' % ($pgw - $gow))") ms beyond a Go start"
n=$((2 * (RUNS + 3)))
echo "the daemon's CPU per warm run (refill and destroy included): $(python3 -c "print('%.1f' % (($c1 - $c0) / $n))") ms"
if want cold; then
  echo "cold target: airlock cold <= bwrap + two Go starts: $al against $(python3 -c "print('%.2f' % ($bw + 2*$gofloor))") ms"
fi
kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=
# A pool miss is a sandbox made while its caller waited: a slow warm row
# with misses is the refill falling behind, not the hand-off.
echo "the daemon: $(grep -o 'served=.*' "$t/daemon.log" | tail -n 1)"
fi

if want exec; then
echo
echo "== exec into a running sandbox (median ms of $RUNS)"
sid=$("$AL" sandbox create | tail -n 1)
$BW sleep 1000 & bpid=$!
sleep 0.5
inner=$(pgrep -P "$bpid" | head -n 1); inner=${inner:-$bpid}
hyperfine -N -w 3 -r "$RUNS" --export-json "$t/exec.json" \
  "$AL sandbox exec $sid -- /bin/true" \
  "nsenter -t $inner --all --root --wd /bin/true" >/dev/null
read -r ae ne <<<"$(median "$t/exec.json")"
printf '%-28s %8s ms\n' "airlock sandbox exec" "$ae" "nsenter into bwrap" "$ne"
echo "ratio: airlock/nsenter $(ratio "$ae" "$ne")"

fi

if want idle; then
echo
echo "== idle memory: $IDLE idle sandboxes held by one host process (as airlock serve holds them)"
$GO run ./bench/idle -n "$IDLE" -exec bin/airlock-exec
echo "(airlock sandbox create adds one supervisor process per sandbox on top of this)"

fi

if want rate; then
echo
echo "== throughput: sandboxes created, used and destroyed per second, 2 workers, 200 sandboxes"
# xargs starts each command itself (no shell in between: a shell per sandbox
# costs more than a bubblewrap sandbox here, and would flatten the ratio).
# $1 is split on spaces, which none of the arguments contain.
rate() { local start end; start=$(date +%s.%N); seq 200 | xargs -P 2 -I{} $1 >/dev/null 2>&1; end=$(date +%s.%N); python3 -c "print('%.1f' % (200/($end-$start)))"; }
ra=$(rate "$AL sandbox run -- /bin/true")
rb=$(rate "$BW /bin/true")
"$AL" sandbox daemon 2>>"$t/daemon.log" & dpid=$!
for _ in $(seq 100); do [ -S "$AIRLOCK_HOME/sandbox.sock" ] && break; sleep 0.05; done
sleep 1
rw=$(rate "$AL sandbox run -- /bin/true")
kill "$dpid"; wait "$dpid" 2>/dev/null || true; dpid=
echo "airlock: $ra/s   bwrap: $rb/s   ratio $(ratio "$ra" "$rb")   (target >= 0.6)"
echo "airlock handed to a daemon: $rw/s   ratio to bwrap $(ratio "$rw" "$rb")"
fi
