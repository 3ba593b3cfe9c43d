#!/usr/bin/env bash
# E2B's own JS SDK suite (e2b-dev/E2B at b8029973a, packages/js-sdk
# tests/sandbox and tests/api) against a fresh airlock serve, inside a
# network namespace that has nothing but loopback: what passes is what the
# SDK's authors expect of a sandbox, minus what needs the internet. Preview
# URLs are https://<port>-<id>.e2b.test, served by a TLS stand-in for
# E2B's edge (bench/e2bsuite). Root; needs node, npm, unshare, ip and
# openssl. The suite's npm dependencies are
# installed (pnpm, from the registry) before the namespace is entered.
# Usage: bench/e2b-suite.sh CLONE [VITEST-ARGS...]   (CLONE: a checkout of
# e2b-dev/E2B at b8029973a). Prints `N passed, M failed` last; the
# per-test results are in $OUT (default /tmp/e2b-suite.json).
set -euo pipefail
cd "$(dirname "$0")/.."
src=$(realpath "${1:?usage: bench/e2b-suite.sh CLONE [VITEST-ARGS...]}")
shift
out=${OUT:-/tmp/e2b-suite.json}
sdk=$src/packages/js-sdk
[ -f "$sdk/tests/setup.ts" ] || { echo "$src: not a checkout of e2b-dev/E2B" >&2; exit 2; }
if [ ! -x "$sdk/node_modules/.bin/vitest" ]; then
  # The lock file pins everything; node-version only quiets tsdown's engine
  # check (a build tool the tests do not run).
  (cd "$src" && npx --yes pnpm@10.34.5 install --filter 'e2b...' --ignore-scripts --config.node-version=22.18.0 >/dev/null)
fi
make -s build
bin=$PWD/bin/airlock
t=$(mktemp -d)
cleanup() {
  AIRLOCK_HOME=$t/home "$bin" sandbox gc --forget >/dev/null 2>&1 || true
  rm -rf "$t"
}
trap cleanup EXIT
export AIRLOCK_HOME=$t/home
"$bin" tenants create suite >/dev/null
key=$("$bin" keys create --tenant suite --name sdk --scope sandboxes --e2b 2>/dev/null)
cat >"$t/serve.yaml" <<YAML
listen: 127.0.0.1:8080
workers: 0
e2b:
  api_addr: 127.0.0.1:3000
  sandbox_addr: 127.0.0.1:49983
  domain: e2b.test
YAML
# Preview URLs (getHost) are https://<port>-<id>.e2b.test: a certificate
# for them that the suite's node trusts, served by bench/e2bsuite/edge.cjs.
openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=e2b.test -addext "subjectAltName=DNS:*.e2b.test" \
  -keyout "$t/edge.key" -out "$t/edge.pem" >/dev/null 2>&1
cp bench/e2bsuite/edge.cjs bench/e2bsuite/dns.cjs "$t/"
cat >"$t/inner.sh" <<'SH'
set -eu
ip link set lo up
"$BIN" serve --config "$T/serve.yaml" --log-level warn >"$T/serve.log" 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null; wait $pid 2>/dev/null' EXIT
for _ in $(seq 100); do curl -fsS http://127.0.0.1:8080/readyz >/dev/null 2>&1 && break; sleep 0.1; done
node "$T/edge.cjs" "$T/edge.pem" "$T/edge.key" 49983 >"$T/edge.log" 2>&1 &
edge=$!
trap 'kill $pid $edge 2>/dev/null; wait $pid $edge 2>/dev/null || true' EXIT
export NODE_EXTRA_CA_CERTS=$T/edge.pem NODE_OPTIONS="--require $T/dns.cjs" E2B_SUITE_DOMAIN=e2b.test
cd "$SDK"
# The files that mock the API with msw expect the SDK's default URLs
# (https://api.e2b.app), so they run without E2B_API_URL and
# E2B_SANDBOX_URL; they never reach a server. The rest drive airlock.
mocked=$(grep -l "from 'msw" $(find tests/sandbox tests/api -name '*.test.ts') | sort)
real=$(find tests/sandbox tests/api -name '*.test.ts' | sort | grep -vxF "$mocked")
E2B_API_URL=http://127.0.0.1:3000 E2B_SANDBOX_URL=http://127.0.0.1:49983 E2B_API_KEY=$KEY \
  ./node_modules/.bin/vitest run --project unit $real \
  --reporter=json --outputFile="$OUT.real" --maxWorkers=2 "$@" >"$T/vitest.log" 2>&1 || true
./node_modules/.bin/vitest run --project unit $mocked \
  --reporter=json --outputFile="$OUT.mocked" --maxWorkers=2 "$@" >>"$T/vitest.log" 2>&1 || true
SH
BIN=$bin T=$t SDK=$sdk KEY=$key OUT=$out unshare --net bash "$t/inner.sh" "$@"
node -e '
const fs = require("fs");
const runs = [".real", ".mocked"].map((x) => JSON.parse(fs.readFileSync(process.argv[1] + x, "utf8")));
const all = runs.flatMap((r) => r.testResults.flatMap((f) => f.assertionResults.map((a) => ({ file: f.name, ...a }))));
fs.writeFileSync(process.argv[1], JSON.stringify(all, null, 1));
for (const a of all.filter((a) => a.status === "failed"))
  console.log("FAIL", a.file.replace(/.*js-sdk\//, ""), "›", a.fullName, "—", (a.failureMessages[0] || "").split("\n")[0].slice(0, 200));
const n = (s) => all.filter((a) => a.status === s).length;
const skipped = n("skipped") + n("pending") + n("todo");
console.log(`${n("passed")} passed, ${n("failed")} failed` + (skipped ? `, ${skipped} skipped` : ""));
' "$out"
