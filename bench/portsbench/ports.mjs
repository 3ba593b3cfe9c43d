// bench/ports.sh's driver, through the official e2b SDK against the
// servers E2B_API_URL / E2B_SANDBOX_URL name: creates a sandbox, starts
// the test server (wsecho.py) on port 8000 in it, then runs client.py
// inside the sandbox (the direct loopback request) and on the host
// (through the data plane, E2b-Sandbox-Id/-Port: the preview URL's
// route) in the same run, and holds WS WebSockets through the data plane
// while it reads the serve process's memory. Prints JSON lines.
// Usage: node ports.mjs DIR N WS SERVE_PID SANDBOX_ADDR
import { Sandbox } from 'e2b'
import { execFileSync, spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'

const [dir, n, ws, servePid, dataPlane] = process.argv.slice(2)
const rss = () => Number(readFileSync(`/proc/${servePid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) / 1024

const sbx = await Sandbox.create({ timeoutMs: 600_000 })
try {
  for (const f of ['wsecho.py', 'client.py']) {
    await sbx.files.write(`/home/user/${f}`, readFileSync(`${dir}/${f}`, 'utf8'))
  }
  await sbx.commands.run('python3 /home/user/wsecho.py 8000', { background: true })
  const route = [`E2b-Sandbox-Id=${sbx.sandboxId}`, 'E2b-Sandbox-Port=8000']
  for (let i = 0; ; i++) {
    try {
      execFileSync('python3', [`${dir}/client.py`, 'http', dataPlane, '1', ...route], { stdio: 'ignore' })
      break
    } catch (e) {
      if (i > 100) throw e
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  // Alternate the two, three rounds each, so that a change of the
  // machine's load falls on both.
  for (let round = 0; round < 3; round++) {
    const direct = await sbx.commands.run(`python3 /home/user/client.py http 127.0.0.1:8000 ${n}`)
    console.log(JSON.stringify({ round, path: 'direct (inside the sandbox, loopback)', ...JSON.parse(direct.stdout) }))
    const preview = execFileSync('python3', [`${dir}/client.py`, 'http', dataPlane, n, ...route], { encoding: 'utf8' })
    console.log(JSON.stringify({ round, path: 'preview URL (host -> data plane -> executor -> port)', ...JSON.parse(preview) }))
  }
  const before = rss()
  const holder = spawn('python3', [`${dir}/client.py`, 'ws', dataPlane, ws, ...route], { stdio: ['pipe', 'pipe', 'inherit'] })
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
  await sbx.kill()
}
