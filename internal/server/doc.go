// Package server is the host's HTTP API: runs, their event logs (paged and
// as server-sent-event streams), approvals, artifacts, policies, credits,
// secrets and uploaded workspaces, as JSON over HTTP for tenants' API
// keys. The JSON bodies are internal/api's types, which the client reads.
//
// Invariants it keeps:
//   - Every endpoint but /healthz and /readyz needs an API key (a bearer
//     token or X-API-Key) or a web UI session made from one (the session
//     cookie, plus the session's CSRF token and a same-origin Origin on
//     every state-changing request); the principal it stands for names
//     one tenant, and each endpoint checks the principal's scopes.
//   - The web UI (/ui/) is static files embedded in the binary, served
//     with a Content-Security-Policy that allows only them: the pages
//     build their DOM from the JSON API with text nodes, never HTML.
//   - Every read of a tenant's objects goes through store.ForTenant, the
//     store's tenant-scoped view, so another tenant's run, event, artifact,
//     policy, upload or ledger entry answers not_found, exactly like an id
//     that does not exist; approvals and actions on runs check the run's tenant
//     through the view first; secrets are the caller's tenant's in the
//     secret store, and a key grants credits to its own tenant only.
//   - A secret value goes one way, from a PUT body into the encrypted
//     store and the host's redactor: no answer, error message or log line
//     holds it, and a body that does not decode is refused without
//     quoting any of it.
//   - Errors have one JSON shape, {"code","message","request_id"}, with a
//     code from a small closed set; a message is only ever text this
//     package wrote for the client (or a validation problem of the
//     client's own input), never an internal error, path or secret:
//     those go to the log with the request id.
//   - Input is bounded: request bodies, headers, uploads, page sizes,
//     streams per key, and requests per key (a token bucket, with
//     Retry-After). Nothing a client uploads is unpacked on the host: a
//     workspace tarball is unpacked inside the run's sandbox.
//   - Policies that tenants submit may not name host resources (host
//     directories, mounts, a root filesystem, upstream CA files, pinned
//     addresses, CIDR rules that lift the address guard, credentials from
//     the host's secret store) unless Config.TrustTenantPolicies says
//     tenants are trusted.
//   - A web UI session lasts no longer than its key: sessions live in the
//     store, whose lookup, every request, checks the key and its tenant
//     (session.go). An event stream ends once its key is revoked or its
//     UI session ends: at once when this server revoked or logged out,
//     else within Config.StreamPoll (revoke.go).
//   - An event stream reads the store, the source of truth, and only
//     uses the engine's in-process notifications (Feed) and a poll as
//     wake-ups, so it neither skips nor repeats an event, also across
//     reconnections with Last-Event-ID.
//
// Importers: host wiring (internal/host), its test server
// internal/server/servertest, and bench/ssefloor (the delivery floor, for
// its histogram's buckets).
package server
