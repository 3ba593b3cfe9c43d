package portproxy

// ProxyOnly makes rl relay every request through httputil.ReverseProxy,
// as it does those with a body or an upgrade: the tests run the same
// cases on both paths.
func ProxyOnly(rl *Relay) { rl.proxyOnly = true }
