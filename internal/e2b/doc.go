// Package e2b serves the E2B sandbox API, so the official E2B SDKs (npm
// e2b, its Python twin) drive airlock sandboxes unchanged: a control
// plane (REST, JSON: create, connect, list, info, timeout, kill, pause) and
// a data plane (envd: the Connect protocol's JSON codec for the process and
// filesystem services, and the /files upload and download endpoint). The
// wire contract is the one captured from SDK 2.51.0 in E2B-COMPAT.md.
//
// Invariants it keeps:
//   - Every sandbox is a native airlock sandbox built from a policy
//     document: the default template is the strict default policy
//     (network default deny), any other template is one of the tenant's
//     stored policies. Its network goes through the host's egress proxy
//     (Options.Network), which injects credentials the sandbox never sees.
//     Policies naming host resources are refused unless the tenants are
//     trusted with the host (Options.TrustTenantPolicies).
//   - The control plane authenticates every call with an airlock tenant
//     API key (X-API-KEY) holding the sandboxes scope. Sandboxes belong to
//     one tenant: another tenant's sandbox id is answered exactly like an
//     id that does not exist.
//   - The data plane authenticates every call with the sandbox's access
//     token (X-Access-Token, or a v1 URL signature for /files). An unknown
//     sandbox, a dead one, and a wrong or missing token all answer the
//     same 502, so the data plane tells nothing about other tenants'
//     sandboxes.
//   - Every sandbox is a record in the store (a run of kind sandbox, which
//     no worker drives) with its own hash-chained log: every operation on
//     either plane is a sandbox.op event there (appended in batches a few
//     milliseconds apart, in order), its life is told by sandbox.created,
//     sandbox.provisioned, run.paused, run.resumed and sandbox.destroyed
//     or sandbox.lost, and its status is running, paused, then final. No
//     event holds a token, an environment value, typed input or file
//     contents. Each operation is also a JSON line of Options.Audit.
//   - Usage is metered: every meter interval and at each boot's end a
//     sandbox.usage event records what a running sandbox used (its host's
//     measure) and its cost by the host's prices, and a metered tenant's
//     ledger is debited once per such event. A tenant whose balance is
//     spent creates no sandbox, and its running ones are killed.
//   - Each API key (control plane) and each sandbox (data plane) has a
//     token bucket; past it a request gets 429 with Retry-After.
//   - Input is bounded: request bodies, Connect messages (an oversized one
//     is a resource_exhausted error, never a partial read), uploads,
//     downloads, listings, workspace snapshots, sandboxes per tenant.
//     Streams are flushed message by message and send keepalives.
//   - Running sandboxes live in this process: they end with it (Run's
//     return), and a sandbox past its timeout is killed. Several servers
//     on one store are one service (replicas.go): a request for another
//     server's sandbox is relayed to it, and when it dies its sandboxes
//     are taken over where the backend can reach them (Options.Attach). Paused sandboxes
//     outlive it (their workspaces are checkpoints, what their resume
//     needs is in StateDir) and are resumable by
//     the next Server; the records of sandboxes that were running when a
//     server died are closed as lost when it starts again (or, for
//     another server's, when its lease on them runs out).
//
// Importers: host wiring (internal/host) only.
package e2b
