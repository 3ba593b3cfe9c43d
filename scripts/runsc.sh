#!/usr/bin/env bash
# runsc.sh build|built|path|version: gVisor's runsc at the version test/runsc's
# go.mod pins (the gvisor.dev/gvisor "go" branch), built with the go tool into
# $AIRLOCK_RUNSC_CACHE/<version>/runsc unless it is there: a second build
# costs nothing. Debian's runsc (0.0~20221219) has only the ptrace platform
# here; this one has systrap (docs/gvisor.md, "Platforms").
#
#   build    builds when missing, then prints the binary's path
#   built    succeeds when the binary is there
#   path     prints the binary's path (built or not)
#   version  prints the pinned version
#
# Point airlock at it with AIRLOCK_RUNSC=$(scripts/runsc.sh build) or the
# runtime.runsc setting (docs/gvisor.md).
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${AIRLOCK_RUNSC_CACHE:-/var/cache/airlock-runsc}
GO=${GO:-go}
VERSION=$(awk '$1 == "gvisor.dev/gvisor" {print $2; exit} $2 == "gvisor.dev/gvisor" {print $3; exit}' "$REPO/test/runsc/go.mod")
[ -n "$VERSION" ] || { echo "runsc: no gvisor.dev/gvisor version in test/runsc/go.mod" >&2; exit 1; }
BIN=$CACHE/$VERSION/runsc

log() { echo "runsc: $*" >&2; }

built() { [ -x "$BIN" ]; }

build() {
  if built; then
    echo "$BIN"
    return 0
  fi
  log "building runsc $VERSION into $BIN (280 s of CPU with a cold build cache: about 3 min on 2 idle cores, 14 at load 15-20)"
  local dir tmp start=$SECONDS
  dir=$(dirname "$BIN")
  mkdir -p "$dir"
  tmp=$(mktemp "$dir/runsc.tmp.XXXXXX")
  (cd "$REPO/test/runsc" && CGO_ENABLED=0 "$GO" build -trimpath -ldflags "-s -w -X gvisor.dev/gvisor/runsc/version.version=$VERSION" -o "$tmp" gvisor.dev/gvisor/runsc)
  chmod 0755 "$tmp"
  mv "$tmp" "$BIN"
  log "built in $((SECONDS - start)) s"
  echo "$BIN"
}

case ${1:-build} in
  build) build ;;
  built) built ;;
  path) echo "$BIN" ;;
  version) echo "$VERSION" ;;
  *) echo "usage: $0 build|built|path|version" >&2; exit 2 ;;
esac
