// Package egress is the host-side egress proxy: the only way out of a
// sandbox. One Proxy serves one sandbox, on a listener that only that
// sandbox can reach (a per-sandbox unix socket), so the identity of every
// request comes from the listener and never from anything the sandbox says.
//
// The proxy speaks HTTP/1.1 as a forward proxy: CONNECT tunnels and
// absolute-form requests, with keep-alive. Every request is decided on its
// own by the policy (internal/policy); the default is deny. Origin-form
// requests are the host's own endpoints (the LLM gateway): they go to
// Config.Local, with the sandbox's bridge.Identity in their context, under
// the same limits, and are never dialled anywhere by the proxy. Names are
// resolved on the host, after the decision, and every address is checked by
// the guard (internal/egress/guard) before it is dialled, so loopback,
// link-local (cloud metadata), private and host addresses are unreachable
// unless policy names them.
//
// Invariants:
//   - Nothing is dialled without an allowing decision, and nothing is dialled
//     except through guard.Dialer.
//   - A tunnel that is not inspected carries TLS only, and the ClientHello's
//     SNI must name the CONNECT host; no byte reaches the upstream before
//     that check.
//   - Hosts with a bound credential or a method/path rule are inspected: the
//     proxy terminates TLS with a per-run CA (ECDSA P-256, at most 24 hours,
//     its key never leaves this process), decides every request inside, adds
//     the credential on the way out (replacing what the sandbox sent) and
//     re-originates TLS with full verification. Secret values are scrubbed
//     from the responses of requests they were injected into, and never
//     appear in an error, a log line or an audit record.
//   - Every decision produces exactly one audit Record.
//   - Refusals are HTTP 403 with ReasonHeader, upstream failures 502/504
//     with ReasonHeader "upstream:...", so a tool can tell a policy block
//     from an unreachable site.
//
// Only host wiring (internal/host) imports this package.
package egress
