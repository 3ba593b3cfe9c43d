#!/usr/bin/env bash
# Image benchmarks (issue 23), in one run:
#   - pull of a multi-layer image (default 500 MiB in 5 layers, half of the
#     bytes compressible) from a registry on loopback: `airlock image pull`
#     (fetch, verify, unpack every layer) against Debian's `skopeo copy` of
#     the same image into an OCI directory (fetch and verify only), and
#     `airlock image pull --lazy` (fetch and verify only, as skopeo: each
#     layer unpacked at its first use), each into an empty store,
#     alternating; medians and the ratios (target: airlock at most 1.2x);
#     and what the first sandbox of the image costs after each pull (after
#     --lazy it unpacks the layers);
#   - disk: N sandboxes (default 100) made of that image and alive at once:
#     what they add to $AIRLOCK_HOME beyond the image (target: at most
#     100 MB), and the memory their writable layers hold.
# Needs root (sandboxes, apt-get install skopeo when it is missing).
# Usage: bench/images.sh [MiB, default 500] [pulls, default 3] [sandboxes, default 100]
set -euo pipefail
cd "$(dirname "$0")/.."
mib=${1:-500}
runs=${2:-3}
nsb=${3:-100}
[ "$(id -u)" -eq 0 ] || { echo "bench/images.sh needs root" >&2; exit 1; }
command -v skopeo >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends skopeo >/dev/null
make -s build
AL=$PWD/bin/airlock
t=$(mktemp -d)
cleanup() {
  exec 3>&- 2>/dev/null || true
  [ -n "${rpid:-}" ] && kill "$rpid" 2>/dev/null || true
  if [ -n "${home:-}" ]; then
    for id in ${ids:-}; do AIRLOCK_HOME=$home "$AL" sandbox rm "$id" >/dev/null 2>&1 || true; done
    AIRLOCK_HOME=$home "$AL" sandbox gc --forget >/dev/null 2>&1 || true
  fi
  rm -rf "$t"
}
trap cleanup EXIT

go build -o "$t/imagereg" ./bench/imagereg
mkfifo "$t/in"
"$t/imagereg" -mib "$mib" <"$t/in" >"$t/reg.out" &
rpid=$!
exec 3>"$t/in"
for _ in $(seq 600); do [ -s "$t/reg.out" ] && break; sleep 0.1; done
read -r ref size <"$t/reg.out"
echo "image $ref: ${mib} MiB in 5 layers, $((size / 1048576)) MiB compressed; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(skopeo --version)"

now() { date +%s%N; }
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
: >"$t/al"; : >"$t/sk"; : >"$t/lz"; : >"$t/alrun"; : >"$t/lzrun"
ms() { echo $((($2 - $1) / 1000000)); }
for i in $(seq "$runs"); do
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  h=$t/home$i; mkdir -p "$h"
  s=$(now); AIRLOCK_HOME=$h "$AL" image pull "$ref" >/dev/null; e=$(now)
  ms "$s" "$e" >>"$t/al"
  s=$(now); AIRLOCK_HOME=$h "$AL" sandbox run --image "$ref" -- /bin/sh -c :; e=$(now)
  ms "$s" "$e" >>"$t/alrun"
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  s=$(now); skopeo copy -q --src-tls-verify=false "docker://$ref" "oci:$t/sk$i:bench" >/dev/null; e=$(now)
  ms "$s" "$e" >>"$t/sk"
  sync; echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
  lh=$t/lazy$i; mkdir -p "$lh"
  s=$(now); AIRLOCK_HOME=$lh "$AL" image pull --lazy "$ref" >/dev/null; e=$(now)
  ms "$s" "$e" >>"$t/lz"
  s=$(now); AIRLOCK_HOME=$lh "$AL" sandbox run --image "$ref" -- /bin/sh -c :; e=$(now)
  ms "$s" "$e" >>"$t/lzrun"
  AIRLOCK_HOME=$lh "$AL" sandbox gc --forget >/dev/null 2>&1 || true
  echo "pull $i: airlock $(tail -1 "$t/al") ms (first sandbox $(tail -1 "$t/alrun") ms), skopeo $(tail -1 "$t/sk") ms, airlock --lazy $(tail -1 "$t/lz") ms (first sandbox, unpacking, $(tail -1 "$t/lzrun") ms)"
  rm -rf "$lh"
  [ "$i" -lt "$runs" ] && rm -rf "$h" "$t/sk$i"
done
al=$(median <"$t/al"); sk=$(median <"$t/sk"); lz=$(median <"$t/lz")
printf 'pull median: airlock %s ms, skopeo copy %s ms: %.2fx (target <= 1.2)\n' "$al" "$sk" "$(echo "$al / $sk" | bc -l)"
printf 'pull --lazy median: %s ms: %.2fx skopeo copy (target <= 1.2)\n' "$lz" "$(echo "$lz / $sk" | bc -l)"
printf 'first sandbox of the image: %s ms after a pull, %s ms after a lazy pull (it unpacks)\n' "$(median <"$t/alrun")" "$(median <"$t/lzrun")"

home=$t/home$runs
before=$(du -sxb "$home" | cut -f1)
ids=""
s=$(now)
for i in $(seq "$nsb"); do
  id=$(AIRLOCK_HOME=$home "$AL" sandbox create --image "$ref" --ttl 30m)
  ids="${ids:+$ids }$id"
done
e=$(now)
after=$(du -sxb "$home" | cut -f1)
shm=$(awk '/^Shmem:/ { print $2 * 1024 }' /proc/meminfo)
AIRLOCK_HOME=$home "$AL" sandbox exec "${ids%% *}" -- /bin/test -f /usr/share/l0/d000/f00000 || { echo "the image's files are not in the sandbox" >&2; exit 1; }
for id in $ids; do AIRLOCK_HOME=$home "$AL" sandbox rm "$id" >/dev/null; done
ids=""
shm_after=$(awk '/^Shmem:/ { print $2 * 1024 }' /proc/meminfo)
printf '%d sandboxes of the image made in %.1f s: $AIRLOCK_HOME %d -> %d MiB, +%.1f MiB beyond the image (target <= 100 MB); their writable layers and /tmp held %.1f MiB of memory\n' \
  "$nsb" "$(echo "($e - $s) / 1000000000" | bc -l)" $((before / 1048576)) $((after / 1048576)) "$(echo "($after - $before) / 1048576" | bc -l)" "$(echo "($shm - $shm_after) / 1048576" | bc -l)"
