// The suite's stand-in for E2B's edge in front of preview URLs: TLS for
// https://<port>-<id>.<domain> on 127.0.0.1:443, the bytes passed as they
// are to airlock's data plane, which routes by the Host inside. Usage:
// node edge.cjs CERT KEY DATA_PLANE_PORT
'use strict'
const fs = require('node:fs')
const net = require('node:net')
const tls = require('node:tls')

const [cert, key, port] = process.argv.slice(2)
tls.createServer({ cert: fs.readFileSync(cert), key: fs.readFileSync(key) }, (c) => {
  const up = net.connect(Number(port), '127.0.0.1')
  c.pipe(up).pipe(c)
  const end = () => { c.destroy(); up.destroy() }
  c.on('error', end)
  up.on('error', end)
  c.on('close', end)
  up.on('close', end)
}).listen(443, '127.0.0.1', () => console.log('edge listening'))
