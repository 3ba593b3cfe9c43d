#!/usr/bin/env bash
# Usage: bench/procfaults.sh N CMD [ARG...]   (root: perf)
# Runs CMD N times under `perf record -e page-faults -c 1 -d` and prints the
# minor page faults per run of each command in its process tree (airlock,
# airlock-exec, true...), split by where the faulting address is: the
# binary's own pages (text, data, bss), the Go heap arena (spans and
# goroutine and thread stacks: the runtime maps it at a random hint, never
# at 0x7f...), other anonymous memory (0x7f...: the runtime's off-heap
# metadata, mheap and page-allocator structures, span sets; and what
# perf could not place), and the rest (the main thread's stack, vdso); then each command's top faulting functions. The split is
# meant for Go processes (a C program's libraries land in "heap"). Run it with
# AIRLOCK_NO_HANDOFF=1 AIRLOCK_NO_DETACH=1 for the cold path with the
# executor's exit counted. A page's first touch costs what `bench/compare.sh`
# prints first (1.25 µs on the quiet VM of 2026-12-07).
set -euo pipefail
N=$1; shift
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
printf '%q ' "$@" >"$d/cmd"
perf record -q -d -o "$d/perf.data" -e page-faults -c 1 -- \
  sh -c "for i in \$(seq $N); do $(cat "$d/cmd") >/dev/null 2>&1; done" >/dev/null 2>&1
perf script -i "$d/perf.data" -F comm,addr,ip,sym 2>/dev/null >"$d/s"
perf report -i "$d/perf.data" --mem-mode --sort comm,dso_daddr -n --stdio 2>/dev/null |
  awk '!/^#/ && NF >= 4 {print $3, $4, $2}' >"$d/dso"
echo "page faults per run of $(cat "$d/cmd")(N=$N)"
awk -v n="$N" '
  NR == FNR { if ($2 == $1) bin[$1] += $3; else if ($2 ~ /^\[(stack|vdso|vvar)/) oth[$1] += $3; next }
  {
    c = $1; a = $2; tot[c]++
    if (length(a) > 7 && a !~ /^7f/ && a !~ /^f/) heap[c]++
  }
  END {
    printf "%-14s %7s %7s %7s %7s %7s\n", "command", "all", "binary", "heap", "0x7f..", "other"
    for (c in tot) {
      if (tot[c] / n < 2) continue
      h = heap[c]; o = oth[c]; b = bin[c]
      printf "%-14s %7.1f %7.1f %7.1f %7.1f %7.1f\n", c, tot[c] / n, b / n, h / n, (tot[c] - b - h - o) / n, o / n
    }
  }' "$d/dso" "$d/s"
for c in $(awk '{print $1}' "$d/s" | sort | uniq -c | awk -v n="$N" '$1 / n >= 20 {print $2}'); do
  echo "-- $c: top functions (faults per run)"
  awk -v c="$c" '$1 == c {print ($5 != "" ? $5 : $4)}' "$d/s" | sort | uniq -c | sort -rn |
    head -12 | awk -v n="$N" '{printf "  %6.1f %s\n", $1 / n, $2}'
done
