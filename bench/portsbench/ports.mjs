// bench/ports.sh's driver, through the official e2b SDK against the
// servers E2B_API_URL / E2B_SANDBOX_URL name: creates a sandbox, starts
// the test server (wsecho.py) on port 8000 in it, then runs client.py
// inside the sandbox (the direct loopback request) and on the host
// (through the data plane, E2b-Sandbox-Id/-Port: the preview URL's
// route) in the same run, and holds WS WebSockets through the data plane
// while it reads the serve process's memory. With OLD_API, OLD_SANDBOX,
// OLD_KEY and OLD_DATA_PLANE (an older build's serve, bench/ports.sh's
// OLD), the same is set up there and its preview URL timed in the same
// rounds, in turn with this one's. Prints JSON lines.
// Usage: node ports.mjs DIR N WS SERVE_PID SANDBOX_ADDR
import { Sandbox } from 'e2b'
import { execFileSync, spawn } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'

const [dir, n, ws, servePid, dataPlane] = process.argv.slice(2)
const rss = () => Number(readFileSync(`/proc/${servePid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024
// cpu is the CPU time (ns, every thread's) of serve pid and of the
// executors below it (the sandboxes' PID 1s: airlock-exec with no
// argument, or late-ids when started by vfork; a warm pool's idle ones
// add next to nothing): what a request
// costs them is a measure a loaded machine moves far less than a p50.
const threadsNs = (pid) => {
  let ns = 0
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      ns += Number(readFileSync(`/proc/${pid}/task/${t}/schedstat`, 'utf8').split(' ')[0])
    } catch {}
  }
  return ns
}
const children = (pid) => {
  const out = []
  for (const t of readdirSync(`/proc/${pid}/task`)) {
    try {
      out.push(...readFileSync(`/proc/${pid}/task/${t}/children`, 'utf8').split(' ').filter(Boolean).map(Number))
    } catch {}
  }
  return out
}
const cpu = (pid) => {
  let exec = 0
  for (const stack = children(pid); stack.length; ) {
    const c = stack.pop()
    try {
      const args = readFileSync(`/proc/${c}/cmdline`, 'utf8').split('\0').filter(Boolean)
      if (args[0]?.endsWith('airlock-exec') && (args.length === 1 || (args.length === 2 && args[1] === 'late-ids'))) exec += threadsNs(c)
      stack.push(...children(c))
    } catch {}
  }
  return { serve: threadsNs(pid), exec }
}
const load = () => readFileSync('/proc/loadavg', 'utf8').split(' ').slice(0, 3).join(' ')

// start creates a sandbox (opts: another serve's, or none: the
// environment's), starts the test server in it and returns it once a
// request through the data plane at addr reaches the server.
async function start(opts, addr) {
  const sbx = await Sandbox.create({ timeoutMs: 600_000, ...opts })
  for (const f of ['wsecho.py', 'client.py']) {
    await sbx.files.write(`/home/user/${f}`, readFileSync(`${dir}/${f}`, 'utf8'))
  }
  // timeoutMs: 0, or the server is killed at the SDK's default 60 s (as E2B does), and a
  // run that lasts longer (a loaded machine) gets 502s from then on.
  await sbx.commands.run('python3 /home/user/wsecho.py 8000', { background: true, timeoutMs: 0 })
  const route = [`E2b-Sandbox-Id=${sbx.sandboxId}`, 'E2b-Sandbox-Port=8000']
  for (let i = 0; ; i++) {
    try {
      execFileSync('python3', [`${dir}/client.py`, 'http', addr, '1', ...route], { stdio: 'ignore' })
      break
    } catch (e) {
      if (i > 100) throw e
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  return { sbx, addr, route }
}

const sides = [{ name: 'new', pid: Number(servePid), ...(await start({}, dataPlane)) }]
const old = process.env.OLD_API
  ? { name: 'old', pid: Number(process.env.OLD_PID), ...(await start({ apiUrl: process.env.OLD_API, sandboxUrl: process.env.OLD_SANDBOX, apiKey: process.env.OLD_KEY }, process.env.OLD_DATA_PLANE)) }
  : null
if (old) sides.push(old)
const [main] = sides
try {
  // Alternate the direct request and the preview URL (this build's, and
  // the older one's when there is one, in turn: which goes first swaps
  // each round), ROUNDS rounds, so that a change of the machine's load
  // falls on all; each round's preview p50 is judged against the direct
  // p50 of the rounds on either side of it (its own floor, interleaved),
  // as a difference (the target: at most +1 ms) and as a ratio (what a
  // loaded run can compare with a quiet one).
  const rounds = Number(process.env.ROUNDS ?? 6)
  const directRun = async () => JSON.parse((await main.sbx.commands.run(`python3 /home/user/client.py http 127.0.0.1:8000 ${n}`)).stdout)
  const direct = [], preview = Object.fromEntries(sides.map((s) => [s.name, []]))
  for (let round = 0; round < rounds; round++) {
    const d = await directRun()
    direct.push(d)
    console.log(JSON.stringify({ round, path: 'direct (inside the sandbox, loopback)', ...d }))
    const order = round % 2 ? [...sides].reverse() : sides
    for (const s of order) {
      const c0 = cpu(s.pid)
      const p = JSON.parse(execFileSync('python3', [`${dir}/client.py`, 'http', s.addr, n, ...s.route], { encoding: 'utf8' }))
      const c1 = cpu(s.pid)
      // The CPU a request cost serve and the sandbox's executor (the
      // 20 warm-up requests included).
      p.serve_cpu_us = Math.round((c1.serve - c0.serve) / (Number(n) + 20) / 1000)
      p.executor_cpu_us = Math.round((c1.exec - c0.exec) / (Number(n) + 20) / 1000)
      preview[s.name].push(p)
      console.log(JSON.stringify({ round, path: `preview URL (host -> data plane -> executor -> port)${old ? `, ${s.name} build` : ''}`, ...p }))
    }
  }
  direct.push(await directRun())
  const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]
  const fixed = (xs, k) => xs.map((x) => Number(x.toFixed(k)))
  const summary = {}
  for (const s of sides) {
    const diffs = [], ratios = []
    for (let i = 0; i < rounds; i++) {
      const floor = (direct[i].p50_ms + direct[i + 1].p50_ms) / 2
      diffs.push(preview[s.name][i].p50_ms - floor)
      ratios.push(preview[s.name][i].p50_ms / floor)
    }
    summary[s.name] = { diffs, ratios, d50: median(diffs), r50: median(ratios) }
    console.log(JSON.stringify({ build: s.name, rounds, preview_minus_direct_p50_ms: fixed(diffs, 3), preview_over_direct_p50: fixed(ratios, 2), median_difference_ms: Number(median(diffs).toFixed(3)), median_ratio: Number(median(ratios).toFixed(2)), load: load() }))
  }
  const { d50, r50 } = summary.new
  console.log(`preview URL p50 over direct, median of ${rounds} interleaved rounds: ${d50 >= 0 ? '+' : ''}${d50.toFixed(3)} ms (${r50.toFixed(2)}x direct): target +1 ms ${d50 <= 1 ? 'met' : 'not met'} in this run`)
  if (old) {
    const newOverOld = preview.new.map((p, i) => p.p50_ms / preview.old[i].p50_ms)
    const saved = summary.old.diffs.map((d, i) => d - summary.new.diffs[i])
    const cpuRatio = (k) => preview.new.map((p, i) => (p[k] + 0.5) / (preview.old[i][k] + 0.5))
    const serveCPU = cpuRatio('serve_cpu_us'), execCPU = cpuRatio('executor_cpu_us')
    console.log(JSON.stringify({ new_over_old_p50: fixed(newOverOld, 3), saved_ms: fixed(saved, 3), median_new_over_old: Number(median(newOverOld).toFixed(3)), median_saved_ms: Number(median(saved).toFixed(3)), serve_cpu_new_over_old: fixed(serveCPU, 3), executor_cpu_new_over_old: fixed(execCPU, 3), load: load() }))
    console.log(`preview URL p50, this build over the older one, median of ${rounds} rounds: ${median(newOverOld).toFixed(3)}x (${median(saved).toFixed(3)} ms a request saved); CPU a request, serve ${median(serveCPU).toFixed(3)}x, executor ${median(execCPU).toFixed(3)}x`)
  }
  const before = rss()
  const holder = spawn('python3', [`${dir}/client.py`, 'ws', dataPlane, ws, ...main.route], { stdio: ['pipe', 'pipe', 'inherit'] })
  const t0 = performance.now()
  const held = await new Promise((resolve, reject) => {
    holder.stdout.once('data', (d) => resolve(JSON.parse(String(d)).held))
    holder.once('exit', (code) => reject(new Error(`ws client exited ${code}`)))
  })
  const after = rss()
  console.log(JSON.stringify({ websockets_held: held, open_s: Number(((performance.now() - t0) / 1000).toFixed(2)), serve_rss_mib_before: Math.round(before), serve_rss_mib_held: Math.round(after), per_connection_kib: Number((((after - before) * 1024) / held).toFixed(1)) }))
  holder.stdin.end()
  await new Promise((r) => holder.once('exit', r))
} finally {
  for (const s of sides) await s.sbx.kill()
}
