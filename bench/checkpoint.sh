#!/usr/bin/env bash
# Checkpoint benchmarks (internal/checkpoint) on one generated workspace
# shaped like a repository (many small files and a few large ones, half of
# the bytes compressible), in one run, with the ratios issue 22 sets:
#   - the first checkpoint against tar | zstd -1 of the same tree, and
#     tar | zstd (zstd's default level, 3: the issue's plain `tar | zstd`),
#     in the same iteration (target: at most 1.0; wall time, and CPU time
#     beside: on a busy machine CPU time is the measure that holds);
#   - a second checkpoint of the unchanged tree: what it stores new (at most
#     1% of the tree);
#   - a step that changes one file, in this workspace and in a one-file
#     workspace (the library's part of "at most 1.2x"), and what it stores;
#     with counts (read/write syscalls, heap bytes) that load does not swell;
#   - restoring after a full checkpoint and 20 steps, unpacked by tar -x,
#     against tar -xf of one full plain tar (the headline: at most 1.2x, wall;
#     CPU beside), the same tar fed to tar -x through a pipe as a restore
#     feeds it and zstd -d | tar -x of it compressed; each side's input read once
#     before it is timed, the order rotating; and the restore's stream alone.
# Installs zstd (Debian's package) when it is missing and this is root.
# Usage: bench/checkpoint.sh [MiB, default 1024] [iterations, default 3]
set -euo pipefail
cd "$(dirname "$0")/.."
size=${1:-1024}
n=${2:-3}

if ! command -v zstd >/dev/null; then
  if [ "$(id -u)" -eq 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends zstd >/dev/null
  else
    echo "zstd is not installed (apt-get install zstd, as root)" >&2
    exit 1
  fi
fi

echo "workspace ${size} MiB, ${n} iterations; $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg); $(zstd --version | head -1)"
out=$(go test -run '^$' -bench 'BenchmarkWrite$|BenchmarkWriteAgain|BenchmarkWriteDelta|BenchmarkRestore|BenchmarkRestoreStream' \
  -benchtime "${n}x" -timeout 60m ./internal/checkpoint/ -args -checkpoint.size="$size")
echo "$out" | grep -E '^Benchmark'
metric() { echo "$out" | awk -v b="$1" -v m="$2" '$1 ~ b { for (i = 2; i < NF; i++) if ($(i+1) == m) print $i }'; }
echo
cpuratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
rcpu=$(metric '^BenchmarkRestore-' restore-cpu-s)
printf 'RESTORE after 20 steps / tar -xf of one plain tar: %s wall (%ss / %ss), %s CPU (%ss / %ss); median of the rounds %s wall, %s CPU (target: wall <= 1.2)\n' \
  "$(metric '^BenchmarkRestore-' ratio)" "$(metric '^BenchmarkRestore-' restore-s)" "$(metric '^BenchmarkRestore-' untar-s)" \
  "$(metric '^BenchmarkRestore-' cpu-ratio)" "$rcpu" "$(metric '^BenchmarkRestore-' untar-cpu-s)" \
  "$(metric '^BenchmarkRestore-' ratio-median)" "$(metric '^BenchmarkRestore-' cpu-ratio-median)"
printf '  / the same tar fed to tar -x through the pipe a restore uses: %s wall (%ss), %s CPU (%ss)\n' \
  "$(metric '^BenchmarkRestore-' ratio-pipe)" "$(metric '^BenchmarkRestore-' untar-pipe-s)" \
  "$(cpuratio "$rcpu" "$(metric '^BenchmarkRestore-' untar-pipe-cpu-s)")" "$(metric '^BenchmarkRestore-' untar-pipe-cpu-s)"
printf '  / zstd -d | tar -x of it compressed (zstd -1): %s wall (%ss), %s CPU (%ss)\n' \
  "$(metric '^BenchmarkRestore-' ratio-zstd)" "$(metric '^BenchmarkRestore-' unzstd-s)" \
  "$(cpuratio "$rcpu" "$(metric '^BenchmarkRestore-' unzstd-cpu-s)")" "$(metric '^BenchmarkRestore-' unzstd-cpu-s)"
printf '  the restore stream alone (into nothing): %ss CPU\n' "$(metric '^BenchmarkRestoreStream' stream-cpu-s)"
printf 'first checkpoint / tar | zstd -1: %s wall (%ss / %ss), %s CPU (%ss / %ss); stored %s of the tree (target: wall <= 1.0)\n' \
  "$(metric '^BenchmarkWrite-' ratio)" "$(metric '^BenchmarkWrite-' write-s)" "$(metric '^BenchmarkWrite-' tarzstd-s)" \
  "$(awk -v a="$(metric '^BenchmarkWrite-' write-cpu-s)" -v b="$(metric '^BenchmarkWrite-' tarzstd-cpu-s)" 'BEGIN { printf "%.2f", a / b }')" \
  "$(metric '^BenchmarkWrite-' write-cpu-s)" "$(metric '^BenchmarkWrite-' tarzstd-cpu-s)" "$(metric '^BenchmarkWrite-' stored/tree)"
printf 'first checkpoint / tar | zstd (level 3): %s wall (%ss / %ss), %s CPU (%ss / %ss)\n' \
  "$(metric '^BenchmarkWrite-' ratio-zstd3)" "$(metric '^BenchmarkWrite-' write-s)" "$(metric '^BenchmarkWrite-' tarzstd3-s)" \
  "$(awk -v a="$(metric '^BenchmarkWrite-' write-cpu-s)" -v b="$(metric '^BenchmarkWrite-' tarzstd3-cpu-s)" 'BEGIN { printf "%.2f", a / b }')" \
  "$(metric '^BenchmarkWrite-' write-cpu-s)" "$(metric '^BenchmarkWrite-' tarzstd3-cpu-s)"
printf 'second checkpoint of the same tree: %s%% of it stored new (target: <= 1%%)\n' "$(metric '^BenchmarkWriteAgain' new-%)"
one=$(metric 'tree=one' ns/step)
big=$(metric 'tree=big' ns/step)
onec=$(metric 'tree=one' cpu-ns/step)
bigc=$(metric 'tree=big' cpu-ns/step)
printf 'a step of one file (cycles of a chain and the compaction after it: 17 steps in a one-file workspace, up to 64 in a large one): %s ns in this workspace, %s ns in a one-file one: %s (CPU %s / %s ns: %s); stored %s B a step\n' \
  "$big" "$one" "$(awk -v a="$big" -v b="$one" 'BEGIN { printf "%.2f", a / b }')" \
  "$bigc" "$onec" "$(awk -v a="$bigc" -v b="$onec" 'BEGIN { printf "%.2f", a / b }')" "$(metric 'tree=big' stored-B/step)"
printf '  counted a step (one-file / 1 GiB): %s / %s read+write syscalls, %s / %s B of heap; a compaction %s syscalls, %s B of heap, %s B read and written\n' \
  "$(metric 'tree=one' rwcalls/step)" "$(metric 'tree=big' rwcalls/step)" "$(metric 'tree=one' allocB/step)" "$(metric 'tree=big' allocB/step)" \
  "$(metric 'tree=big' rwcalls/compact)" "$(metric 'tree=big' allocB/compact)" "$(metric 'tree=big' ioB/compact)"
echo "load at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
