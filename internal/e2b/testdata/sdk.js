// Drives the official E2B JS SDK (the module named by argv[2]) against
// airlock's E2B API: E2B_API_URL, E2B_SANDBOX_URL and E2B_API_KEY are set
// by the Go test, which asserts the JSON this prints on its last line.
'use strict'
const { Sandbox } = require(process.argv[2])
const port = process.argv[3]
const tag = process.argv[4]

async function main() {
  const out = {}
  const sbx = await Sandbox.create({ metadata: { run: tag }, envs: { GREETING: 'hi' } })
  out.id = sbx.sandboxId

  let streamed = ''
  const r = await sbx.commands.run('echo "$GREETING from $(pwd)"; echo err >&2; echo $((6*7))', {
    onStdout: (d) => { streamed += d },
  })
  out.stdout = r.stdout
  out.stderr = r.stderr
  out.exitCode = r.exitCode
  out.streamed = streamed

  try {
    await sbx.commands.run('echo partial; exit 3')
    out.failed = 'no error'
  } catch (e) {
    out.failed = { name: e.name, exitCode: e.exitCode, stdout: e.stdout }
  }

  const text = 'round trip ✓\n' + 'x'.repeat(100000)
  await sbx.files.write('notes/a.txt', text)
  out.textRoundTrip = (await sbx.files.read('notes/a.txt')) === text
  const bytes = new Uint8Array([0, 1, 2, 253, 254, 255])
  await sbx.files.write('/tmp/b.bin', bytes.buffer)
  const back = await sbx.files.read('/tmp/b.bin', { format: 'bytes' })
  out.bytesRoundTrip = Buffer.from(back).equals(Buffer.from(bytes))
  out.catFromCommand = (await sbx.commands.run('cat notes/a.txt | head -1')).stdout
  out.list = (await sbx.files.list('notes')).map((e) => `${e.name}:${e.type}`)
  out.exists = [await sbx.files.exists('notes/a.txt'), await sbx.files.exists('nope')]
  try {
    await sbx.files.read('nope.txt')
    out.missing = 'no error'
  } catch (e) {
    out.missing = e.name
  }

  // The default template is the strict default policy: no network.
  try {
    await sbx.commands.run('curl -sS --max-time 10 http://example.com')
    out.network = 'reached'
  } catch (e) {
    out.network = { exitCode: e.exitCode }
  }

  // A recursive watch sees what a command writes.
  await sbx.files.makeDir('watched')
  out.watched = []
  let sawWrite
  const wrote = new Promise((resolve) => { sawWrite = resolve })
  const handle = await sbx.files.watchDir('watched', (e) => {
    out.watched.push(`${e.name}:${e.type}`)
    if (e.name === 'sub/f.txt' && e.type === 'write') sawWrite()
  }, { recursive: true })
  await sbx.commands.run('mkdir -p watched/sub && echo hi > watched/sub/f.txt')
  await within(30000, wrote, 'no write event from the watch')
  await handle.stop()

  out.metrics = (await sbx.getMetrics()).map((m) => ({
    timestamp: m.timestamp.toISOString(), cpuCount: m.cpuCount, cpuUsedPct: m.cpuUsedPct,
    memUsed: m.memUsed, memTotal: m.memTotal, diskUsed: m.diskUsed, diskTotal: m.diskTotal,
  }))

  const listed = await Sandbox.list({ query: { metadata: { run: tag } } }).nextItems()
  out.listed = listed.map((s) => s.sandboxId)
  out.info = (await sbx.getInfo()).metadata

  // A template that is a stored policy: one host allowed, a credential
  // injected there by the host's proxy.
  const egress = await Sandbox.create('egress')
  const er = await egress.commands.run(
    `curl -sS http://allowed.test:${port}/; curl -sS -o /dev/null -w 'denied:%{http_code}' http://denied.test:${port}/; ` +
      'echo; env | grep -c Zq7CANARY || true')
  out.egress = er.stdout
  await egress.kill()

  const connected = await Sandbox.connect(sbx.sandboxId)
  out.connected = (await connected.commands.run('cat notes/a.txt | wc -c')).stdout.trim()

  // Snapshots (SDKs from 2.50 on): one of the running sandbox boots new
  // ones, by its id or its name, with its workspace.
  if (typeof sbx.createSnapshot === 'function') {
    const snap = await sbx.createSnapshot({ name: `${tag}-snap` })
    const byID = await Sandbox.create(snap.snapshotId)
    const byName = await Sandbox.create(`${tag}-snap`)
    out.snapshot = {
      names: snap.names,
      byID: (await byID.commands.run('head -1 notes/a.txt')).stdout,
      byName: (await byName.commands.run('head -1 notes/a.txt')).stdout,
      listed: (await sbx.listSnapshots().nextItems()).map((s) => s.snapshotId === snap.snapshotId),
      deleted: await Sandbox.deleteSnapshot(snap.snapshotId),
      deletedAgain: await Sandbox.deleteSnapshot(snap.snapshotId),
    }
    await byID.kill()
    await byName.kill()
  }

  out.killed = await sbx.kill()
  out.killedAgain = await Sandbox.kill(sbx.sandboxId)
  out.running = await sbx.isRunning()
  console.log(JSON.stringify(out))
}

// within resolves as p does, or rejects with msg after ms.
async function within(ms, p, msg) {
  let timer
  const late = new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(msg)), ms) })
  try {
    return await Promise.race([p, late])
  } finally {
    clearTimeout(timer)
  }
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
