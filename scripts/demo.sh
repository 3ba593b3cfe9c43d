#!/usr/bin/env bash
# make demo: a real agent run, end to end, on the embedded defaults. The
# agent loop runs here on the host; every command it chooses runs in a
# disposable sandbox with no network; every step is recorded in a
# hash-chained log before it counts; airlock verifies the result itself.
#
# The model is scripted (examples/invoice/demo.yaml) unless MODEL is set:
#   make demo MODEL=anthropic:claude-sonnet-4-5     (needs ANTHROPIC_API_KEY)
#   make demo MODEL=openai:gpt-4.1                  (needs OPENAI_API_KEY)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# build: make build, showing its progress. go build -v names each package as
# it compiles it: several hundred on the first build (minutes on 2 cores),
# none once they are cached. On a terminal the count updates in place. The
# build's failure (pipefail) stops the demo.
build() {
  say "make build: bin/airlock, bin/airlock-host, bin/airlock-exec"
  local total
  total=$(CGO_ENABLED=0 "${GO:-go}" list -deps ./cmd/... | wc -l)
  make -s build BUILDFLAGS=-v 2>&1 | {
    n=0
    while IFS= read -r line; do
      case $line in
        "" | *" "*) printf '%s\n' "$line" ;; # not a package name: the compiler's messages
        *)
          n=$((n + 1))
          if [ -t 1 ]; then printf '\r\033[K  [%d/%d] %s' "$n" "$total" "$line"
          else printf '  [%d/%d] %s\n' "$n" "$total" "$line"; fi ;;
      esac
    done
    if [ -t 1 ] && [ "$n" -gt 0 ]; then printf '\r\033[K'; fi
    echo "  compiled $n packages (of $total the commands use; the rest were cached)"
  }
}
build
AIRLOCK=./bin/airlock
own_home=
[ -n "${AIRLOCK_HOME:-}" ] || own_home=1
export AIRLOCK_HOME=${AIRLOCK_HOME:-$(mktemp -d)}
OUT=${OUT:-$AIRLOCK_HOME/demo-out}

say "airlock doctor: the isolation layers this machine enforces"
$AIRLOCK doctor

if [ -n "${MODEL:-}" ]; then
  model=(--model "$MODEL")
  say "an agent fixes examples/invoice with $MODEL"
else
  model=(--script examples/invoice/demo.yaml)
  say "an agent fixes examples/invoice (scripted model: examples/invoice/demo.yaml)"
fi
status=0
$AIRLOCK run "${model[@]}" --workspace examples/invoice \
  --verify 'python3 -m unittest -q' \
  --verify-changed invoice.py --verify-only-changed invoice.py \
  --max-steps 20 --timeout 10m --out "$OUT" \
  "The tests of this project fail. Find the bug, fix it, and make sure every test passes." || status=$?
id=$($AIRLOCK runs ls --json --limit 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["id"])')

say "the exported patch ($OUT/patch.diff)"
cat "$OUT/patch.diff" 2>/dev/null || echo "(no patch)"

say "the run's durable log: $($AIRLOCK runs events "$id" --json | wc -l) events, hash-chained"
$AIRLOCK runs verify "$id"
$AIRLOCK runs show "$id"

say "the host copy is untouched: the sandbox's changes live only in the patch"
if grep -q 'amount \* percent / 100' examples/invoice/invoice.py; then
  echo "examples/invoice unchanged"
else
  echo "UNEXPECTED: host copy changed"; exit 1
fi

say "the model's commands cannot reach the network: no route, no DNS"
if $AIRLOCK sandbox run -- python3 -c 'import urllib.request; urllib.request.urlopen("http://example.com", timeout=3)' 2>/dev/null; then
  echo "UNEXPECTED: network reachable"; exit 1
else
  echo "refused, as it should be"
fi

printf '\nstate: %s (log, blobs, artifacts)   events: %s runs events %s\n' "$AIRLOCK_HOME" "$AIRLOCK" "$id"
[ -n "$own_home" ] && printf 'remove it: AIRLOCK_HOME=%s %s sandbox gc --forget && rm -rf %s\n' "$AIRLOCK_HOME" "$AIRLOCK" "$AIRLOCK_HOME"
exit $status
