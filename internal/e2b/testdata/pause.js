// Drives the official E2B JS SDK (the module named by argv[2]) through a
// pause that keeps memory (the SDK's default) and one that does not, and
// prints one JSON object of what it saw; sdk_pause_test.go holds the
// expected values.
'use strict'
const { Sandbox } = require(process.argv[2])

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms))

async function info(id) {
  const res = await fetch(`${process.env.E2B_API_URL}/sandboxes/${id}`, { headers: { 'X-API-Key': process.env.E2B_API_KEY } })
  return res.json()
}

async function counter(sbx) {
  return parseInt((await sbx.files.read('/tmp/counter')).trim(), 10)
}

async function main() {
  const out = {}
  const sbx = await Sandbox.create()
  // A counter kept in a background process's memory.
  const bg = await sbx.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.05; done', { background: true })
  for (let i = 0; i < 600 && !(await sbx.files.exists('/tmp/counter')); i++) await sleep(50)
  const before = await counter(sbx)
  // A command in flight across the pause.
  const inflight = sbx.commands.run('sleep 1; echo after the resume')
  await sleep(200)

  await sbx.pause()
  out.running = await sbx.isRunning()
  const paused = await info(sbx.sandboxId)
  out.paused = [paused.state, paused.pauseKind]
  await sleep(500)
  await sbx.connect()
  out.resumed = [await sbx.isRunning(), (await info(sbx.sandboxId)).resumeKind]
  out.samePid = (await sbx.commands.list()).some((p) => p.pid === bg.pid)
  const after = await counter(sbx)
  out.counterKept = after >= before
  await sleep(300)
  out.counting = (await counter(sbx)) > after
  const r = await inflight
  out.inflight = [r.exitCode, r.stdout]
  const again = await sbx.commands.connect(bg.pid)
  out.connected = again.pid === bg.pid
  await again.disconnect()
  await bg.disconnect()

  // keepMemory false: files only (the user's home), a fresh boot.
  await sbx.files.write('kept.txt', 'kept')
  await sbx.pause({ keepMemory: false })
  out.fsPaused = (await info(sbx.sandboxId)).pauseKind
  await sbx.connect()
  out.fsResumed = (await info(sbx.sandboxId)).resumeKind
  out.fsPidGone = !(await sbx.commands.list()).some((p) => p.pid === bg.pid)
  out.fsFileKept = [await sbx.files.read('kept.txt'), await sbx.files.exists('/tmp/counter')]

  // onTimeout pause with autoResume: the timeout freezes it, a request
  // thaws it, the same process still counting.
  const ar = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  const arBg = await ar.commands.run('i=0; while :; do i=$((i+1)); echo $i > /tmp/counter.new; mv /tmp/counter.new /tmp/counter; sleep 0.05; done', { background: true })
  await sleep(5_000)
  const arInfo = await info(ar.sandboxId)
  out.autoPaused = [arInfo.state, arInfo.pauseKind]
  out.autoResumed = (await ar.commands.list()).some((p) => p.pid === arBg.pid)
  out.autoState = (await info(ar.sandboxId)).state

  await arBg.disconnect()
  await ar.kill()
  await sbx.kill()
  console.log(JSON.stringify(out))
}

main().catch((err) => {
  console.error(err)
  process.exit(1)
})
