// Package template is airlock's environment templates: a named, versioned
// recipe for a sandbox (an image, a start command and readiness check,
// environment, working directory, user, default limits, the stored policy
// its runs are held to, and how many sandboxes of it to keep warm).
//
// It parses and validates the template document (YAML, read with the
// YAML library the policy package uses, unknown keys refused), writes it
// in one canonical form (Marshal), whose hash names a stored version, and
// brings a sandbox made from one to readiness (Prepare: a built-in
// template's files written, the start command in the background, then
// the readiness check until it passes).
//
// Invariants: a Template that Parse returns has passed Validate; Marshal
// of it parses back to an equal Template. The package keeps no state and
// does no I/O but through the sandbox it is given.
//
// Importers: internal/host (storing templates, making sandboxes of them),
// internal/cli (template files and flags, sandbox run and create),
// internal/server (/v1/templates), internal/e2b (Sandbox.create by
// template name), internal/engine (a run's sandboxes), internal/interp
// (the built-in code-interpreter-v1 and its server's start) and
// internal/tools (run_code's start failures).
package template
