#!/usr/bin/env bash
# examples/wordstats, in one command: an agent fixes a failing pytest test
# in sandboxes whose root is a Python toolchain image that airlock builds.
#
#   1. A Debian base image (bookworm, minbase, python3 and python3-pytest
#      from Debian's mirror by debootstrap), made once and kept in this
#      example's airlock home.
#   2. airlock template build: the Dockerfile's steps on that base, each RUN
#      in a sandbox, each change a layer; a second build is all cache hits.
#   3. airlock template create wordstats: that image as a named environment,
#      ready when pytest answers.
#   4. airlock run --template wordstats: the agent (scripted, or MODEL=...)
#      runs the tests, fixes the bug, runs them again; airlock verifies with
#      pytest itself before it calls the run completed.
#
# Needs root, and the first time network access to deb.debian.org (Debian's
# package mirror) for debootstrap. AIRLOCK_HOME defaults to
# ~/.cache/airlock-wordstats so the base image is made once.
set -euo pipefail
cd "$(dirname "$0")/../.."
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
[ "$(id -u)" -eq 0 ] || { echo "examples/wordstats/run.sh needs root (debootstrap, sandboxes)" >&2; exit 1; }
make -s build
AL=$PWD/bin/airlock
export AIRLOCK_HOME=${AIRLOCK_HOME:-$HOME/.cache/airlock-wordstats}
mkdir -p "$AIRLOCK_HOME"
EX=examples/wordstats

if ! "$AL" image inspect airlock-example/debian:bookworm >/dev/null 2>&1; then
  say "a Debian base image: debootstrap bookworm (minbase, python3, python3-pytest)"
  command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  debootstrap --variant=minbase --include=python3,python3-pytest bookworm "$work/rootfs" http://deb.debian.org/debian >"$work/debootstrap.log" 2>&1 ||
    { tail -20 "$work/debootstrap.log" >&2; exit 1; }
  rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
  # The root file system as one layer: no device nodes (a sandbox gets its
  # own /dev), numeric owners.
  tar -C "$work/rootfs" --numeric-owner --exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf "$work/layer.tar" .
  go run github.com/google/go-containerregistry/cmd/crane@v0.22.1 append --oci-empty-base \
    -f "$work/layer.tar" -t airlock-example/debian:bookworm -o "$work/image.tar"
  "$AL" image import "$work/image.tar"
fi

say "airlock template build: $EX/Dockerfile on the base"
"$AL" template build -t airlock-example/python:1 "$EX"
say "the same build again: every step from the cache"
"$AL" template build -t airlock-example/python:1 "$EX"

say "airlock template create wordstats"
"$AL" template create wordstats -f "$EX/template.yaml"
"$AL" template show wordstats

if [ -n "${MODEL:-}" ]; then
  model=(--model "$MODEL")
else
  model=(--script "$EX/demo.yaml")
fi
say "an agent fixes $EX/project in sandboxes of the template"
status=0
"$AL" run --template wordstats "${model[@]}" --workspace "$EX/project" \
  --verify 'python3 -m pytest -q' --verify-changed wordstats.py --verify-only-changed wordstats.py \
  --max-steps 20 --timeout 10m --out "$AIRLOCK_HOME/wordstats-out" \
  "The tests of this project fail. Find the bug, fix it, and make sure every test passes." || status=$?
id=$("$AL" runs ls --json --limit 1 | python3 -c 'import json,sys; print(json.loads(sys.stdin.readline())["id"])')

say "the patch"
cat "$AIRLOCK_HOME/wordstats-out/patch.diff" 2>/dev/null || echo "(no patch)"
say "the run, with the image it had"
"$AL" runs show "$id"
"$AL" runs verify "$id"
grep -q 'key=lambda kv: kv\[1\]' "$EX/project/wordstats.py" || { echo "UNEXPECTED: the host copy changed"; exit 1; }
echo "the host copy of $EX/project is unchanged: the change is in the patch"
exit $status
