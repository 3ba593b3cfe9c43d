#!/usr/bin/env bash
# compare-refs.sh BASE HEAD [PAIRS]: the hot paths' Go benchmarks at two commits,
# interleaved (base then head, PAIRS times) so load hits both alike, compared with
# benchstat (the store's benchmarks, which moved under BenchmarkStore, by
# their own names). Root (the sandbox benchmarks create real sandboxes).
set -euo pipefail
base=${1:?usage: compare-refs.sh BASE HEAD [PAIRS]} head=${2:?usage: compare-refs.sh BASE HEAD [PAIRS]} pairs=${3:-6}
command -v go >/dev/null || export PATH=/usr/local/go/bin:$PATH
repo=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'git -C "$repo" worktree remove --force "$work/base" >/dev/null 2>&1; git -C "$repo" worktree remove --force "$work/head" >/dev/null 2>&1; rm -rf "$work"' EXIT
git -C "$repo" worktree add -q --detach "$work/base" "$base"
git -C "$repo" worktree add -q --detach "$work/head" "$head"
benches=(
  "./internal/server/ CreateRun$ 300x"
  "./internal/store/sqlite/ (Append(One|Batched)|Store)$/Append(One|Batched)$ 2000x"
  "./internal/engine/ Step$ 20x"
  "./internal/policy/ Decide(Tool)?$ 20000x"
  "./internal/sandbox/linux/ Exec$ 100x"
)
for ((i = 1; i <= pairs; i++)); do
  for b in "${benches[@]}"; do
    read -r pkg re n <<<"$b"
    for side in base head; do
      (cd "$work/$side" && go test -run '^$' -bench "$re" -benchmem -benchtime "$n" -count 1 "$pkg" | grep '^Benchmark' | sed 's|^BenchmarkStore/|Benchmark|') >>"$work/$side.txt" || true
    done
  done
done
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da "$work/base.txt" "$work/head.txt"
