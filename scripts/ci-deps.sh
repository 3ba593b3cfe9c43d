#!/usr/bin/env bash
# Installs the Debian packages that the tests and benchmarks use, when they
# are missing. Idempotent and quiet: it prints nothing when all are present.
# Without root (or without apt-get) it only notes what is missing; tests that
# need a missing tool skip themselves with a reason.
set -euo pipefail

# package:command-that-proves-it-is-there, package:py:MODULE for a Python
# module that Debian's python3 must import, or package:file:PATH for a file
# the package installs. A package spelled a|b is the first
# of the names that the archive knows (gVisor is "runsc" on Debian 12).
want=(
  bash:bash
  python3:python3         # examples/invoice (the demo), bench/compare.sh
  python-is-python3:python # E2B's suite (bench/e2b-suite.sh) runs `python -m http.server` in a sandbox
  iproute2:ip             # ip netns in the network tests
  util-linux:unshare      # unshare, nsenter, mount
  bubblewrap:bwrap        # bench/compare.sh baseline
  runc:runc               # OCI backend and bench baseline
  runsc\|gvisor:runsc     # gVisor: the gvisor sandbox runtime (sandbox.runtime: gvisor)
  hyperfine:hyperfine     # bench/compare.sh only
  gcc:cc                  # scripts/build-thin.sh (make build): the front end's thin entry, freestanding C
  binutils:objcopy        # scripts/build-thin.sh: ld, objcopy, readelf, nm
  tinyproxy:tinyproxy     # bench/egress.sh baseline only
  curl:curl               # e2e and conformance: a real client in the sandbox
  busybox-static:busybox  # image tests: the root of a test image
  git:git                 # e2e: git clone through the egress proxy
  nodejs:node             # e2e: node in the sandbox (npm, fetch, the LLM gateway's SDK test)
  npm:npm                 # e2e: npm; the gateway's SDK test installs the openai and Anthropic SDKs with it
  postgresql:pg_ctlcluster  # store/postgres tests run a throwaway server (/usr/lib/postgresql/N/bin)
  chromium:chromium       # server: the web UI's end-to-end test drives headless Chromium (chromedp)
  # The code interpreter (internal/interp, code-interpreter-v1, run_code):
  # its server runs Jupyter kernels of the host root's Python.
  python3-ipykernel:py:ipykernel
  python3-jupyter-client:py:jupyter_client
  python3-matplotlib:py:matplotlib
  python3-pandas:py:pandas
  python3-numpy:py:numpy
  # Its TypeScript contexts transpile with node's typescript module.
  node-typescript:file:/usr/share/nodejs/typescript/package.json
)

missing=()
for w in "${want[@]}"; do
  check=${w#*:}
  if [[ $check == py:* ]]; then
    /usr/bin/python3 -c "import ${check#py:}" >/dev/null 2>&1 || missing+=("${w%%:*}")
  elif [[ $check == file:* ]]; then
    [ -e "${check#file:}" ] || missing+=("${w%%:*}")
  else
    command -v "$check" >/dev/null 2>&1 || missing+=("${w%%:*}")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "ci-deps: not root on Debian; not installing: ${missing[*]//|/ or } (tests that need them skip)" >&2
  exit 0
fi

export DEBIAN_FRONTEND=noninteractive
updated=0
apt_update() {
  [ "$updated" -eq 1 ] && return 0
  apt-get update -qq >/dev/null
  updated=1
}

# known NAME: whether the package archive has NAME (after one update if not).
known() {
  apt-cache show "$1" >/dev/null 2>&1 && return 0
  apt_update
  apt-cache show "$1" >/dev/null 2>&1
}

pkgs=()
for alts in "${missing[@]}"; do
  found=""
  IFS='|' read -r -a names <<<"$alts"
  for n in "${names[@]}"; do
    if known "$n"; then found=$n; break; fi
  done
  if [ -z "$found" ]; then
    echo "ci-deps: no Debian package named ${alts//|/ or }" >&2
    exit 1
  fi
  pkgs+=("$found")
done

install() { apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null 2>&1; }
if ! install; then
  # A stale package list names versions the mirror no longer has.
  updated=0
  apt_update
  apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
