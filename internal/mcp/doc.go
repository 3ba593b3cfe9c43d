// Package mcp serves airlock's sandboxes to any agent that speaks the Model
// Context Protocol, on the official Go SDK: over stdio (`airlock mcp`, for
// a local agent) and over Streamable HTTP (`/mcp` on `airlock serve`). Its
// tools are create_sandbox, destroy_sandbox, list_sandboxes and
// expose_port (a port the sandbox's policy exposes, on a listener of the
// host, proxied into the sandbox), and the
// engine's own sandbox tools of package tools (run_command, read_file,
// write_file, edit_file, list_dir, search) with their schemas and strict
// argument decoding, each taking an optional `sandbox` argument; with
// Options.Runs, the run-level tools too (start_run, run_status,
// run_timeline, list_approvals, decide_approval).
//
// Invariants it keeps:
//   - Every sandbox tool call is decided by the policy document of the
//     sandbox it acts in (policy.Document.DecideTool, as for an agent
//     run's calls): a deny is a tool result with isError and the rule and
//     reason; an ask holds the call as an approval (Options.Approver) while
//     the client gets progress notifications, then runs it or reports the
//     denial; with no approver an ask is a denial that says so. A client
//     that declared elicitation is asked itself (a yes/no form) when the
//     policy names no approvers; its answer counts only for the approval
//     of that sandbox about that same call (the Approver checks).
//   - Malformed arguments are a JSON-RPC invalid-params error whose
//     message says what is wrong; nothing runs.
//   - A caller without the scope a tool needs (sandboxes for the sandbox
//     tools, runs:write, runs:read or approvals for the run-level ones) is
//     refused per call with a JSON-RPC error naming the scope. A caller
//     sees only its tenant's runs and approvals (Runs keeps that). Sandboxes
//     belong to the session and the tenant that created them; another
//     tenant's key on the same session does not see them.
//   - Every call, allowed or not, is one JSON line of the session's audit
//     log (Options.Audit): the tool, the sandbox, the decision and its
//     rule, the outcome; never file contents or command output.
//   - Results are capped (tools.Limits.MaxContent, head and tail kept, with
//     a truncation note) and passed through Options.Redact before they
//     leave the host.
//   - expose_port serves only ports the sandbox's policy names
//     (ports.expose), a token port only to requests with the sandbox's
//     traffic token, which is returned to the session that holds the
//     sandbox and written to no audit record.
//   - A session's sandboxes are destroyed when the session ends, and every
//     remaining one when the Server is closed.
//   - The events a session's sandboxes report are pushed to its client as
//     logging notifications (if it set a level), marked untrusted, at most
//     20 a second and 64 queued (the rest dropped and counted, never
//     waited for), an event over PushMaxEvent as its kind and size only.
//
// Importers: host wiring (internal/host) only.
package mcp
