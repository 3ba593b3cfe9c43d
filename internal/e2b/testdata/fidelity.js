// Drives the official E2B JS SDK (the module named by argv[2]) through
// what E2B's own test suite expects of a sandbox, and prints one JSON
// object of what it saw; sdk_fidelity_test.go holds the expected values.
'use strict'
const { Sandbox, TimeoutError } = require(process.argv[2])

async function main() {
  const out = {}
  const first = await Sandbox.create()
  const sbx = await Sandbox.create({ envs: { FORKED: 'env kept' } })

  // E2B's user and paths.
  out.whoami = (await sbx.commands.run('whoami; echo "$HOME"; pwd')).stdout
  out.rootHome = (await sbx.commands.run('whoami; echo "$HOME"; pwd', { user: 'root' })).stdout
  out.writePath = (await sbx.files.write('rel.txt', 'hi')).path
  out.rootWrite = [(await sbx.files.write('rel.txt', 'root', { user: 'root' })).path, await sbx.files.read('/root/rel.txt', { user: 'root' })]
  out.rootOwned = (await sbx.commands.run('stat -c %U /root/rel.txt', { user: 'root' })).stdout
  out.inWorkspace = (await sbx.commands.run('cat /workspace/rel.txt')).stdout

  // A writable root: the user writes a file anywhere, its missing
  // parents made as root and given to the user (files/write › write
  // multiple files); root writes into a system directory, in the
  // sandbox's own layer.
  out.writeAnywhere = (await sbx.files.write([{ path: '/0/multi.txt', data: 'zero' }, { path: '/home/user/multi.txt', data: 'one' }])).map((i) => i.path)
  out.writtenAnywhere = (await sbx.commands.run('cat /0/multi.txt; stat -c %U /0')).stdout
  out.rootUsr = (await sbx.commands.run('echo usr > /usr/bin/airlock-e2b-probe && cat /usr/bin/airlock-e2b-probe', { user: 'root' })).stdout

  // sudo, as E2B's user has it (commands/envVars › bash command scoped
  // env vars): root of the sandbox, not of the host.
  const su = await sbx.commands.run('sudo echo "[$FOO]"; sudo id -un; sudo -u user id -un')
  out.sudo = [su.exitCode, su.stdout]

  // EntryInfo as envd gives it.
  const f = await sbx.files.getInfo('rel.txt')
  out.file = [f.mode, f.permissions, f.owner, f.group]
  await sbx.files.makeDir('d')
  const d = await sbx.files.getInfo('d')
  out.dir = [d.mode, d.permissions, d.owner, d.group]
  await sbx.commands.run('ln -s rel.txt link')
  out.symlinkTarget = (await sbx.files.getInfo('link')).symlinkTarget
  out.listedLink = (await sbx.files.list('.')).filter((e) => e.name === 'link').map((e) => e.symlinkTarget)

  // File metadata (envd 0.6.2): on write, in getInfo, list and rename,
  // replaced by the next write, and set as user.e2b.* xattrs by anyone.
  const md = { author: 'mish', purpose: 'upload' }
  out.mdWrite = (await sbx.files.write('m.txt', 'x', { metadata: md })).metadata
  out.mdInfo = (await sbx.files.getInfo('m.txt')).metadata
  out.mdOctet = (await sbx.files.write('o.txt', 'x', { metadata: md, useOctetStream: true })).metadata
  out.mdList = (await sbx.files.list('.')).filter((e) => e.name === 'm.txt').map((e) => e.metadata)
  out.mdRename = (await sbx.files.rename('m.txt', 'm2.txt')).metadata
  await sbx.files.write('m2.txt', 'y')
  out.mdCleared = (await sbx.files.getInfo('m2.txt')).metadata === undefined
  await sbx.commands.run(`python3 -c "import os; os.setxattr('/home/user/o.txt', 'user.e2b.author', b'other')"`)
  out.mdXattr = (await sbx.files.getInfo('o.txt')).metadata
  out.mdBad = await sbx.files.write('bad.txt', 'x', { metadata: { 'bad key': 'v' } }).then(() => 'written', (e) => e.name)
  // Watch events with entry info (0.6.3) and network mounts allowed (0.6.4).
  await sbx.files.makeDir('w')
  let seen
  const got = new Promise((resolve) => { seen = resolve })
  const h = await sbx.files.watchDir('w', (ev) => { if (ev.type === 'write' && ev.entry) seen([ev.name, ev.entry.path, ev.entry.type]) }, { includeEntry: true, allowNetworkMounts: true })
  await sbx.files.write('w/f.txt', 'x')
  out.watchEntry = await got
  await h.stop()

  // A failed command's error says its status, as envd's (Go's os/exec)
  // does: in the message and in .error; a command killed by a signal
  // says which.
  try {
    await sbx.commands.run('exit 3')
  } catch (e) {
    out.exitError = [e.name, e.message, e.error, e.exitCode]
  }
  try {
    await sbx.commands.run('kill -KILL $$')
  } catch (e) {
    out.killedError = [e.name, e.message, e.error, e.exitCode]
  }

  // Newest first.
  const listed = await Sandbox.list().nextItems()
  out.listOrder = listed.map((s) => s.sandboxId).filter((id) => id === first.sandboxId || id === sbx.sandboxId)
  out.created = [sbx.sandboxId, first.sandboxId]

  // Signed URLs: an expired signature, and a valid one.
  const expired = await fetch(await sbx.downloadUrl('rel.txt', { useSignatureExpiration: -10_000 }))
  out.expired = [expired.status, await expired.json()]
  const valid = await fetch(await sbx.downloadUrl('rel.txt', { useSignatureExpiration: 10_000 }))
  out.valid = [valid.status, await valid.text()]

  // A sandbox killed while a command runs.
  const cmd = await first.commands.run('sleep 60', { background: true })
  await first.kill()
  const err = await cmd.wait().catch((e) => e)
  out.killedDuringRun = [err instanceof TimeoutError, String(err && err.message)]
  out.forkKilled = await first.fork().then(() => 'forked', (e) => e.name)

  // Forks: copies of the workspace and environment, independent of it
  // and of each other; a killed sandbox has none.
  await sbx.files.write('state.txt', 'before fork')
  const forks = await sbx.fork({ count: 2 })
  out.forks = []
  for (const f of forks) {
    out.forks.push([f.sandboxId !== sbx.sandboxId, await f.files.read('state.txt'), (await f.commands.run('echo $FORKED')).stdout])
    await f.files.write('state.txt', 'changed in ' + f.sandboxId)
  }
  out.forkIDs = new Set(forks.map((f) => f.sandboxId)).size
  out.afterFork = await sbx.files.read('state.txt')
  for (const f of forks) await f.kill()

  // pause() with the SDK's default (memory kept) pauses the file system;
  // connect resumes it with the home's files.
  out.paused = await sbx.pause()
  const again = await Sandbox.connect(sbx.sandboxId)
  out.afterResume = await again.files.read('rel.txt')
  await again.kill()

  // Lifecycle: onTimeout pause pauses at the timeout (the server looks
  // every second); connect resumes, and with autoResume a request does.
  const untilPaused = async (s) => {
    for (let i = 0; i < 300; i++) {
      const st = (await s.getInfo()).state
      if (st !== 'running') return st
      await new Promise((r) => setTimeout(r, 100))
    }
    return 'running'
  }
  const ap = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: false } })
  await ap.files.write('ap.txt', 'kept')
  out.autoPaused = [(await ap.getInfo()).lifecycle, await untilPaused(ap), await ap.isRunning()]
  await ap.connect({ timeoutMs: 60_000 })
  out.autoPauseConnect = [(await ap.getInfo()).state, await ap.files.read('ap.txt')]
  await ap.kill()
  const ar = await Sandbox.create({ timeoutMs: 3_000, lifecycle: { onTimeout: 'pause', autoResume: true } })
  await ar.files.write('ar.txt', 'kept')
  out.autoResumed = [await untilPaused(ar), await ar.files.read('ar.txt'), (await ar.getInfo()).state]
  await ar.kill()
  console.log(JSON.stringify(out))
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
