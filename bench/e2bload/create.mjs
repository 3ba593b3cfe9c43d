// Sandbox.create() to first command output through the official e2b SDK,
// against the servers E2B_API_URL / E2B_SANDBOX_URL name. Sandboxes are
// created one after another (N of them, after W warm-up ones that do not
// count); for each: the time create() takes, the time from the start of
// create() to the first stdout chunk of `echo ready`, and kill(). Prints
// one JSON object. bench/e2b.sh runs it. The floor is the same client's
// time from spawning `echo ready` on the host (a plain fork+exec, no
// sandbox) to its first stdout chunk, taken right after each sandbox, so
// that the load of the moment falls on both; net is, sandbox by sandbox,
// create to first output less the floor taken beside it: airlock's part,
// which the targets (p50 <= 20 ms, p99 <= 60 ms) are judged on when the
// machine's own fork+exec is far from free (a loaded machine).
import { spawn } from 'node:child_process'
import { Sandbox } from 'e2b'

const n = Number(process.argv[2] ?? 100)
const warm = Number(process.argv[3] ?? 5)

const spawnEcho = () => new Promise((resolve, reject) => {
  const t0 = performance.now()
  let t1 = 0
  const c = spawn('/bin/echo', ['ready'])
  c.stdout.once('data', () => { t1 = performance.now() })
  c.on('error', reject)
  c.on('close', (code) => (code === 0 && t1 ? resolve(t1 - t0) : reject(new Error(`echo: exit ${code}`))))
})

const create = []
const first = []
const kill = []
const floor = []
const net = []
const ratio = []
for (let i = 0; i < n + warm; i++) {
  // The floor is taken on both sides of the sandbox, and their mean
  // paired with it: a change of the machine's load during the sandbox
  // falls on its floor too.
  const f0 = await spawnEcho()
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
  const f = (f0 + (await spawnEcho())) / 2
  if (i >= warm) {
    create.push(t1 - t0)
    first.push(t2 - t0)
    kill.push(t4 - t3)
    floor.push(f)
    net.push(t2 - t0 - f)
    ratio.push((t2 - t0) / f)
  }
}

const pct = (xs, p) => {
  const s = [...xs].sort((a, b) => a - b)
  return Number(s[Math.min(s.length - 1, Math.ceil((p / 100) * s.length) - 1)].toFixed(1))
}
const sum = (xs) => ({ p50: pct(xs, 50), p90: pct(xs, 90), p99: pct(xs, 99), max: pct(xs, 100) })
const judge = (x, target) => `${x} ms ${x <= target ? '<=' : '>'} ${target} ms: ${x <= target ? 'met' : 'not met'}`
const nets = sum(net)
const ratios = sum(ratio)
console.log(JSON.stringify({ n, create: sum(create), first_output: sum(first), kill: sum(kill), floor: sum(floor), net_of_floor: nets, ratio_to_floor: ratios }))
// Under load the absolute targets cannot be judged: the ratio of each
// sandbox's create-to-first-output to its own floor is what one run can
// say (and what a run on a quiet machine is compared with).
console.log(`create to first output / its floor, sandbox by sandbox: p50 ${ratios.p50}x, p90 ${ratios.p90}x, p99 ${ratios.p99}x (floor p50 ${sum(floor).p50} ms, load ${(await import('node:fs')).readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')})`)
console.log(`create to first output net of the floor (airlock's part): p50 ${judge(nets.p50, 20)}; p99 ${judge(nets.p99, 60)}`)
