// Preloaded into the suite's node processes (NODE_OPTIONS=--require): the
// wildcard DNS record of the preview URLs' domain, *.<E2B_SUITE_DOMAIN> ->
// 127.0.0.1, which the suite's loopback-only namespace has no server for.
'use strict'
const dns = require('node:dns')

const suffix = '.' + process.env.E2B_SUITE_DOMAIN
const lookup = dns.lookup
dns.lookup = function (host, opts, cb) {
  if (typeof opts === 'function') [opts, cb] = [{}, opts]
  if (typeof host === 'string' && host.endsWith(suffix)) {
    const all = typeof opts === 'object' && opts !== null && opts.all
    return process.nextTick(() => (all ? cb(null, [{ address: '127.0.0.1', family: 4 }]) : cb(null, '127.0.0.1', 4)))
  }
  return lookup.call(this, host, opts, cb)
}
