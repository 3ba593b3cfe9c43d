// Sandbox.create() to first command output through the official e2b SDK,
// against the servers E2B_API_URL / E2B_SANDBOX_URL name. Sandboxes are
// created one after another (N of them, after W warm-up ones that do not
// count); for each: the time create() takes, the time from the start of
// create() to the first stdout chunk of `echo ready`, and kill(). Prints
// one JSON object. bench/e2b.sh runs it. The floor is the same client's
// time from spawning `echo ready` on the host (a plain fork+exec, no
// sandbox) to its first stdout chunk, N times after the sandboxes.
import { spawn } from 'node:child_process'
import { Sandbox } from 'e2b'

const n = Number(process.argv[2] ?? 100)
const warm = Number(process.argv[3] ?? 5)

const create = []
const first = []
const kill = []
for (let i = 0; i < n + warm; i++) {
  const t0 = performance.now()
  const sbx = await Sandbox.create({ timeoutMs: 60_000 })
  const t1 = performance.now()
  let t2 = 0
  const res = await sbx.commands.run('echo ready', {
    onStdout: () => { if (!t2) t2 = performance.now() },
  })
  if (res.exitCode !== 0 || res.stdout !== 'ready\n' || !t2) {
    throw new Error(`sandbox ${sbx.sandboxId}: exit ${res.exitCode}, stdout ${JSON.stringify(res.stdout)}`)
  }
  const t3 = performance.now()
  if (!(await sbx.kill())) throw new Error(`kill ${sbx.sandboxId} returned false`)
  const t4 = performance.now()
  if (i >= warm) {
    create.push(t1 - t0)
    first.push(t2 - t0)
    kill.push(t4 - t3)
  }
}

const floor = []
for (let i = 0; i < n + warm; i++) {
  const t0 = performance.now()
  const t = await new Promise((resolve, reject) => {
    let t1 = 0
    const c = spawn('/bin/echo', ['ready'])
    c.stdout.once('data', () => { t1 = performance.now() })
    c.on('error', reject)
    c.on('close', (code) => (code === 0 && t1 ? resolve(t1 - t0) : reject(new Error(`echo: exit ${code}`))))
  })
  if (i >= warm) floor.push(t)
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return Number(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)].toFixed(1))
}
const sum = (xs) => ({ p50: pct(xs, 50), p90: pct(xs, 90), p99: pct(xs, 99), max: pct(xs, 100) })
console.log(JSON.stringify({ n, create: sum(create), first_output: sum(first), kill: sum(kill), floor: sum(floor) }))
