// files.read() of a 20 MiB file through the official e2b SDK against
// curl of the same file from the same server: for a random file and a
// text one, R rounds each (after a warm-up), the two alternating. Prints
// one JSON object: median milliseconds and the ratio SDK / curl.
// bench/e2b-download.sh runs it.
import { Sandbox } from 'e2b'
import { execFileSync } from 'node:child_process'

const rounds = Number(process.argv[2] ?? 10)
const size = 20 << 20
const sbx = await Sandbox.create({ timeoutMs: 600_000 })
const gen = {
  random: `head -c ${size} /dev/urandom > random.bin`,
  text: `seq 1 100000000 | head -c ${size} > text.txt`,
}
const files = { random: '/home/user/random.bin', text: '/home/user/text.txt' }
for (const k of Object.keys(gen)) {
  const r = await sbx.commands.run(gen[k])
  if (r.exitCode !== 0) throw new Error(`${k}: ${r.stderr}`)
}
const url = (p) => `${process.env.E2B_SANDBOX_URL}/files?path=${encodeURIComponent(p)}&username=user`
const curl = (p) => {
  const out = execFileSync('curl', ['-sS', '-f', '-o', '/dev/null', '-w', '%{time_total} %{size_download}',
    '-H', `E2b-Sandbox-Id: ${sbx.sandboxId}`, '-H', `X-Access-Token: ${sbx.envdAccessToken ?? ''}`, url(p)]).toString()
  const [t, n] = out.split(' ').map(Number)
  if (n !== size) throw new Error(`curl ${p}: ${n} bytes`)
  return t * 1000
}
const sdk = async (p) => {
  const t0 = performance.now()
  const b = await sbx.files.read(p, { format: 'bytes' })
  const t = performance.now() - t0
  if (b.length !== size) throw new Error(`sdk ${p}: ${b.length} bytes`)
  return t
}
const plain = async (p) => {
  const t0 = performance.now()
  const res = await fetch(url(p), { headers: { 'E2b-Sandbox-Id': sbx.sandboxId, 'X-Access-Token': sbx.envdAccessToken ?? '' } })
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
  await sdk(files[k])
  curl(files[k])
  const a = [], b = [], c = []
  let enc = ''
  for (let i = 0; i < rounds; i++) {
    a.push(await sdk(files[k]))
    b.push(curl(files[k]))
    const f = await plain(files[k])
    c.push(f.t)
    enc = f.enc
  }
  out[k] = { sdk_ms: median(a), curl_ms: median(b), node_fetch_ms: median(c), encoding: enc, ratio: Number((median(a) / median(b)).toFixed(2)) }
}
await sbx.kill()
console.log(JSON.stringify(out))
