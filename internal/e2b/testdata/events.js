// Drives the official E2B JS SDK (the module named by argv[2]) through
// commands that report events with airlock-event, across a pause that
// keeps memory and one that does not, and prints the sandbox's id and the
// commands' exit codes; sdk_events_test.go reads the sandbox's event log.
'use strict'
const { Sandbox } = require(process.argv[2])

async function main() {
  const out = { exits: [] }
  const sbx = await Sandbox.create()
  out.id = sbx.sandboxId
  const run = async (cmd) => out.exits.push((await sbx.commands.run(cmd)).exitCode)
  await run("airlock-event progress --pct 40 x && airlock-event emit bogus '{}'")
  await sbx.pause()
  await sbx.connect()
  await run('airlock-event progress --pct 60 y')
  await sbx.pause({ keepMemory: false })
  await sbx.connect()
  await run('airlock-event progress --pct 80 z')
  console.log(JSON.stringify(out))
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
