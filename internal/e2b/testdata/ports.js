// Drives the official E2B JS SDK (the module named by argv[2]) to a server
// in a sandbox through its preview URL, sbx.getHost(port), and through the
// refusals E2B's own tests expect. The preview URL's host is resolved to
// the data plane (E2B_SANDBOX_URL), as a wildcard DNS record would: the
// request carries the Host getHost gives. argv[3] is the test server
// (wsecho.py). Prints one JSON object on its last line.
'use strict'
const { Sandbox } = require(process.argv[2])
const fs = require('node:fs')
const http = require('node:http')
const crypto = require('node:crypto')

const server = fs.readFileSync(process.argv[3], 'utf8')
const plane = new URL(process.env.E2B_SANDBOX_URL)

// get sends GET path to host (a preview URL's host) at the data plane.
function get(host, path, headers = {}) {
  return new Promise((resolve, reject) => {
    const req = http.request({ host: plane.hostname, port: plane.port, path, headers: { ...headers, Host: host } }, (res) => {
      const chunks = []
      res.on('data', (c) => chunks.push(String(c)))
      res.on('end', () => resolve({ status: res.statusCode, body: chunks.join(''), chunks: chunks.length }))
    })
    req.on('error', reject)
    req.end()
  })
}

// echo opens a WebSocket to host's /ws, sends msg and resolves with what
// comes back.
function echo(host, msg) {
  return new Promise((resolve, reject) => {
    const req = http.request({
      host: plane.hostname, port: plane.port, path: '/ws',
      headers: { Host: host, Connection: 'Upgrade', Upgrade: 'websocket', 'Sec-WebSocket-Version': '13', 'Sec-WebSocket-Key': crypto.randomBytes(16).toString('base64') },
    })
    req.on('upgrade', (res, socket) => {
      const mask = crypto.randomBytes(4)
      const data = Buffer.from(msg)
      const frame = Buffer.concat([Buffer.from([0x81, 0x80 | data.length]), mask, data.map((b, i) => b ^ mask[i % 4])])
      socket.write(frame)
      socket.once('data', (d) => {
        socket.destroy()
        resolve({ status: res.statusCode, echo: String(d.subarray(2, 2 + (d[1] & 0x7f))) })
      })
    })
    req.on('response', (res) => { res.resume(); resolve({ status: res.statusCode }) })
    req.on('error', reject)
    req.end()
  })
}

async function main() {
  const out = {}
  const sbx = await Sandbox.create()
  out.id = sbx.sandboxId
  out.host = sbx.getHost(8000)
  await sbx.files.write('wsecho.py', server)
  await sbx.commands.run('python3 wsecho.py 8000', { background: true })
  let res
  for (let i = 0; i < 200; i++) {
    res = await get(out.host, '/')
    if (res.status === 200) break
    await new Promise((r) => setTimeout(r, 50))
  }
  out.page = res
  out.hello = await get(out.host, '/hello')
  out.stream = await get(out.host, '/stream')
  out.ws = await echo(out.host, 'ping')
  out.closedPort = await get(sbx.getHost(8001), '/')

  // allowPublicTraffic: false, as E2B's network.test.ts does it.
  const priv = await Sandbox.create({ network: { allowPublicTraffic: false } })
  out.trafficAccessToken = typeof priv.trafficAccessToken === 'string' && priv.trafficAccessToken.length > 0
  await priv.files.write('wsecho.py', server)
  await priv.commands.run('python3 wsecho.py 8080', { background: true })
  const ph = priv.getHost(8080)
  for (let i = 0; i < 200; i++) {
    res = await get(ph, '/', { 'e2b-traffic-access-token': priv.trafficAccessToken })
    if (res.status === 200) break
    await new Promise((r) => setTimeout(r, 50))
  }
  out.privateWithToken = res.status
  out.privateNoToken = await get(ph, '/')
  out.privateWrongToken = await get(ph, '/', { 'e2b-traffic-access-token': 'x' + priv.trafficAccessToken })
  out.privateWS = await echo(ph, 'ping')

  // A stored policy without a ports section exposes nothing.
  const closed = await Sandbox.create('closed')
  out.notExposed = await get(closed.getHost(8000), '/')
  await closed.kill()

  // maskRequestHost, as E2B's network.test.ts sets it: the server sees
  // the masked Host, ${PORT} its port; a bad mask is refused.
  const masked = await Sandbox.create({ network: { maskRequestHost: 'custom-host.example.com:${PORT}' } })
  await masked.files.write('wsecho.py', server)
  await masked.commands.run('python3 wsecho.py 8080', { background: true })
  for (let i = 0; i < 200; i++) {
    res = await get(masked.getHost(8080), '/hello')
    if (res.status === 200) break
    await new Promise((r) => setTimeout(r, 50))
  }
  out.masked = res
  await masked.kill()
  out.badMask = await Sandbox.create({ network: { maskRequestHost: 'a b/c' } }).then((s) => s.kill().then(() => 'created'), (e) => String(e.message))

  // E2B's host.test.ts: a killed sandbox's port.
  await sbx.kill()
  out.killed = await get(out.host, '/')
  await priv.kill()
  console.log(JSON.stringify(out))
  // The background commands' streams and the agent's idle sockets would
  // keep node up.
  process.exit(0)
}

main().catch((e) => {
  console.error(e)
  process.exit(1)
})
