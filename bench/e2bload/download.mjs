// files.read() of a 20 MiB file through the official e2b SDK against
// curl of the same file from the same server: for a random file and a
// text one, R rounds each (after a warm-up), the two alternating. Prints
// one JSON object: median milliseconds and the ratio SDK / curl.
// bench/e2b-download.sh runs it. With FLOOR_ADDR and FLOOR_DIR (a bare
// Go http.FileServer, bench/filefloor, serving FLOOR_DIR on FLOOR_ADDR)
// it also times node's own fetch and curl of the same bytes from that
// server, the floor: what this node's fetch costs with no airlock at all
// (the SDK's files.read is that fetch, then res.arrayBuffer()), and
// prints how each server's response is shaped (HTTP version, length,
// encoding, how many chunks node's reader gets). With OLD_API,
// OLD_SANDBOX and OLD_KEY (an older build's serve, bench/e2b-download.sh's
// OLD), the same files are made in a sandbox there and its files.read,
// node's fetch and curl timed in the same rounds, in turn with this
// build's: old_* medians and the paired new/old ratio of files.read.
// The floor is also timed as bench/filefloor's /like-airlock/ answers it:
// airlock's headers and 256 KiB writes (no sendfile), so that the rest
// between it and airlock is airlock's path out of the sandbox. Each
// read's page faults in node (minor faults of this process, /proc/self/
// stat) are counted too: a 20 MiB body in fresh memory is 5,120 pages to
// fault in for the chunks and as many for the buffer they are joined in.
// And the SDK's own client is timed against that bare server: files.read
// is the npm undici's fetch (the SDK's dependency, not node's built-in
// one) through an Agent with allowH2 (HTTP/1.1 on plain http), so the
// pair SDK / that is what airlock adds for the very client the SDK is.
import { Sandbox } from 'e2b'
import { Agent, fetch as undiciFetch } from 'undici'
import { execFileSync } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'

const rounds = Number(process.argv[2] ?? 10)
const size = 20 << 20
const sbx = await Sandbox.create({ timeoutMs: 600_000 })
const gen = {
  random: `head -c ${size} /dev/urandom > random.bin`,
  text: `seq 1 100000000 | head -c ${size} > text.txt`,
}
const files = { random: '/home/user/random.bin', text: '/home/user/text.txt' }
const oldOpts = process.env.OLD_API ? { apiUrl: process.env.OLD_API, sandboxUrl: process.env.OLD_SANDBOX, apiKey: process.env.OLD_KEY } : null
const sbxOld = oldOpts ? await Sandbox.create({ timeoutMs: 600_000, ...oldOpts }) : null
for (const box of [sbx, sbxOld]) {
  if (!box) continue
  for (const k of Object.keys(gen)) {
    const r = await box.commands.run(gen[k])
    if (r.exitCode !== 0) throw new Error(`${k}: ${r.stderr}`)
  }
}
const url = (p) => `${process.env.E2B_SANDBOX_URL}/files?path=${encodeURIComponent(p)}&username=user`
const headers = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken ?? '' }
const floorAddr = process.env.FLOOR_ADDR
const floorURL = (p) => `http://${floorAddr}/${p.split('/').pop()}`
const likeURL = (p) => `http://${floorAddr}/like-airlock/${p.split('/').pop()}`
// faults is this process's minor page faults so far; lastFaults, those of
// the last timed read.
const faults = () => Number(readFileSync('/proc/self/stat', 'utf8').split(') ')[1].split(' ')[7])
let lastFaults = 0
const curlURL = (u, hs = headers) => {
  const out = execFileSync('curl', ['-sS', '-f', '-o', '/dev/null', '-w', '%{time_total} %{size_download}',
    ...Object.entries(hs).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), u]).toString()
  const [t, n] = out.split(' ').map(Number)
  if (n !== size) throw new Error(`curl ${u}: ${n} bytes`)
  return t * 1000
}
const curl = (p) => curlURL(url(p))
const oldURL = (p) => `${process.env.OLD_SANDBOX}/files?path=${encodeURIComponent(p)}&username=user`
const oldHeaders = sbxOld ? { 'E2b-Sandbox-Id': sbxOld.sandboxId, 'X-Access-Token': sbxOld.envdAccessToken ?? '' } : {}
const sdkOld = async (p) => {
  const f0 = faults(), t0 = performance.now()
  const b = await sbxOld.files.read(p, { format: 'bytes' })
  const t = performance.now() - t0
  lastFaults = faults() - f0
  if (b.length !== size) throw new Error(`old sdk ${p}: ${b.length} bytes`)
  return t
}
const sdkAgent = new Agent({ allowH2: true, connections: 10 })
const fetchTime = async (u, hs, sdkClient = false) => {
  const f0 = faults(), t0 = performance.now()
  const res = sdkClient ? await undiciFetch(u, { headers: hs, dispatcher: sdkAgent }) : await fetch(u, { headers: hs })
  const b = new Uint8Array(await res.arrayBuffer())
  const t = performance.now() - t0
  lastFaults = faults() - f0
  if (b.length !== size) throw new Error(`fetch ${u}: ${b.length} bytes`)
  return t
}
// shape says how a server's response to u comes: curl's view of the
// protocol and headers, and the chunks node's fetch reader is handed.
const shape = async (u, hs) => {
  const h = execFileSync('curl', ['-sS', '-f', '-o', '/dev/null', '-D', '-', '-w', 'http_version=%{http_version}',
    ...Object.entries(hs).flatMap(([k, v]) => ['-H', `${k}: ${v}`]), u]).toString()
  const pick = (name) => (h.match(new RegExp(`^${name}: *(.*?)\\r?$`, 'im')) ?? [])[1] ?? ''
  const res = await fetch(u, { headers: hs })
  const rd = res.body.getReader()
  let chunks = 0, n = 0
  for (;;) {
    const { done, value } = await rd.read()
    if (done) break
    chunks++
    n += value.length
  }
  return {
    http: (h.match(/http_version=(\S+)/) ?? [])[1], content_length: pick('content-length'), transfer_encoding: pick('transfer-encoding'),
    content_type: pick('content-type'), content_disposition: pick('content-disposition'), vary: pick('vary'),
    last_modified: pick('last-modified'), accept_ranges: pick('accept-ranges'),
    content_encoding_curl: pick('content-encoding'), content_encoding_node: res.headers.get('content-encoding') ?? '',
    node_chunks: chunks, node_chunk_avg: Math.round(n / chunks),
  }
}
const sdk = async (p) => {
  const f0 = faults(), t0 = performance.now()
  const b = await sbx.files.read(p, { format: 'bytes' })
  const t = performance.now() - t0
  lastFaults = faults() - f0
  if (b.length !== size) throw new Error(`sdk ${p}: ${b.length} bytes`)
  return t
}
// plain is node's own fetch of airlock's URL (what files.read is, without
// the SDK); forwarded says, as a proxy on this machine would, that the
// request was forwarded, so that airlock gzips what compresses as for a
// remote client (it does not for a client on loopback): gzip's effect on
// node, weighed within the run.
const plain = async (p, forwarded = false) => {
  const t0 = performance.now()
  const hs = { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken ?? '' }
  if (forwarded) hs['X-Forwarded-For'] = '192.0.2.1'
  const res = await fetch(url(p), { headers: hs })
  const b = new Uint8Array(await res.arrayBuffer())
  const t = performance.now() - t0
  if (b.length !== size) throw new Error(`fetch ${p}: ${b.length} bytes`)
  return { t, enc: res.headers.get('content-encoding') ?? '' }
}
const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b)
  return Number(s[Math.floor(s.length / 2)].toFixed(1))
}
const out = { rounds, size }
for (const k of Object.keys(files)) {
  await sdk(files[k]) // warm-up
  if (floorAddr) writeFileSync(`${process.env.FLOOR_DIR}/${files[k].split('/').pop()}`, await sbx.files.read(files[k], { format: 'bytes' }))
  curl(files[k])
  if (sbxOld) await sdkOld(files[k]) // warm-up
  const a = [], b = [], c = [], cf = [], fl = [], fc = [], paired = [], pairedFwd = []
  const oa = [], ob = [], oc = [], pairedOld = []
  const la = [], lc = [], pairedLike = [], fa = [], ffl = [], ua = [], pairedSDKClient = [], fua = []
  let enc = '', encFwd = ''
  // The old build's turn comes first in odd rounds: the first read of a
  // round pays node's collection of the round before's 20 MiB buffers (an
  // A/A run, the same build on both sides, read 1.7-3.7x "slower" on the
  // side that always went first).
  const oldTurn = async () => {
    oa.push(await sdkOld(files[k]))
    ob.push(curlURL(oldURL(files[k]), oldHeaders))
    oc.push(await fetchTime(oldURL(files[k]), oldHeaders))
  }
  // The SDK's client of the bare server goes right before files.read in
  // odd rounds and last in even ones, for the same reason.
  const sdkClientTurn = async () => {
    ua.push(await fetchTime(likeURL(files[k]), {}, true))
    fua.push(lastFaults)
  }
  for (let i = 0; i < rounds; i++) {
    if (sbxOld && i % 2 === 1) await oldTurn()
    if (floorAddr && i % 2 === 1) await sdkClientTurn()
    a.push(await sdk(files[k]))
    fa.push(lastFaults)
    b.push(curl(files[k]))
    const f = await plain(files[k])
    c.push(f.t)
    enc = f.enc
    const g = await plain(files[k], true)
    cf.push(g.t)
    encFwd = g.enc
    pairedFwd.push(g.t / f.t)
    if (sbxOld) {
      if (i % 2 === 0) await oldTurn()
      pairedOld.push(a[i] / oa[i])
    }
    if (floorAddr) {
      fl.push(await fetchTime(floorURL(files[k]), {}))
      ffl.push(lastFaults)
      fc.push(curlURL(floorURL(files[k]), {}))
      paired.push(a[i] / fl[i])
      la.push(await fetchTime(likeURL(files[k]), {}))
      lc.push(curlURL(likeURL(files[k]), {}))
      pairedLike.push(a[i] / la[i])
      if (i % 2 === 0) await sdkClientTurn()
      pairedSDKClient.push(a[i] / ua[i])
    }
  }
  out[k] = {
    sdk_ms: median(a), curl_ms: median(b), node_fetch_ms: median(c), encoding: enc,
    node_fetch_forwarded_ms: median(cf), encoding_forwarded: encFwd, forwarded_over_loopback: median(pairedFwd),
    ratio: Number((median(a) / median(b)).toFixed(2)),
  }
  if (sbxOld) {
    Object.assign(out[k], {
      old_sdk_ms: median(oa), old_curl_ms: median(ob), old_node_fetch_ms: median(oc),
      old_ratio: Number((median(oa) / median(ob)).toFixed(2)),
      // Round by round: this build's files.read over the old build's, as
      // the geometric mean of the rounds' ratios (the side that goes first
      // in a round pays more; the order alternates, so this cancels it).
      paired_new_over_old: Number(Math.exp(pairedOld.reduce((s, r) => s + Math.log(r), 0) / pairedOld.length).toFixed(2)),
    })
  }
  if (floorAddr) {
    Object.assign(out[k], {
      floor_node_fetch_ms: median(fl), floor_curl_ms: median(fc),
      ratio_to_floor: Number((median(a) / median(fl)).toFixed(2)),
      // Round by round: the SDK's time over node's fetch of the bare
      // server right after it, the pair under the same load.
      paired_ratio_to_floor: median(paired),
      floor_ratio_to_curl: Number((median(fl) / median(b)).toFixed(2)),
      // The floor answered with airlock's headers and writes.
      like_node_fetch_ms: median(la), like_curl_ms: median(lc), paired_ratio_to_like: median(pairedLike),
      like_ratio_to_its_curl: Number((median(la) / median(lc)).toFixed(2)),
      sdk_faults: median(fa), floor_faults: median(ffl),
      // The SDK's client (npm undici) of the bare server with airlock's
      // headers: the floor of files.read itself.
      sdk_client_like_ms: median(ua), sdk_client_like_faults: median(fua), paired_sdk_over_sdk_client_like: median(pairedSDKClient),
      sdk_client_like_ratio_to_curl: Number((median(ua) / median(lc)).toFixed(2)),
      shape_like: await shape(likeURL(files[k]), {}),
      shape_airlock: await shape(url(files[k]), headers), shape_floor: await shape(floorURL(files[k]), {}),
    })
  }
}
await sbx.kill()
if (sbxOld) await sbxOld.kill()
console.log(JSON.stringify(out))
// The target (files.read ≤ 1.5x curl) restated against node's own floor,
// which one loaded run can judge: the SDK's time over node's fetch of the
// same bytes from a bare Go server, paired round by round.
for (const k of Object.keys(files)) {
  const o = out[k]
  if (o.paired_ratio_to_floor !== undefined) {
    if (o.old_sdk_ms !== undefined) console.log(`${k}: files.read ${o.sdk_ms} ms (${o.ratio}x curl ${o.curl_ms}), old build ${o.old_sdk_ms} ms (${o.old_ratio}x curl ${o.old_curl_ms}); new/old paired ${o.paired_new_over_old}x; node's fetch of a bare server ${o.floor_node_fetch_ms} ms, curl of it ${o.floor_curl_ms} ms`)
    console.log(`${k}: node's fetch of the bare server with airlock's headers and writes ${o.like_node_fetch_ms} ms = ${o.like_ratio_to_its_curl}x curl of it (${o.like_curl_ms} ms); files.read / it (paired) ${o.paired_ratio_to_like}x; node's page faults a read: files.read ${o.sdk_faults}, bare fetch ${o.floor_faults}`)
    console.log(`${k}: the SDK's client (undici) of the bare server with airlock's headers ${o.sdk_client_like_ms} ms = ${o.sdk_client_like_ratio_to_curl}x curl of it, ${o.sdk_client_like_faults} faults; files.read through airlock / it (paired) ${o.paired_sdk_over_sdk_client_like}x`)
    console.log(`${k}: files.read / node's floor (paired) ${o.paired_ratio_to_floor}x (node's floor / curl ${o.floor_ratio_to_curl}x); airlock's encoding ${o.encoding || 'none'}; node's fetch as a forwarded client (encoding ${o.encoding_forwarded || 'none'}) / as a loopback one (paired) ${o.forwarded_over_loopback}x`)
  }
}
