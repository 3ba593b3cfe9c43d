// Package interp is airlock's code interpreter: a small server that runs
// inside a sandbox on port 49999 and speaks the wire of E2B's code
// interpreter (what @e2b/code-interpreter talks to) over Jupyter kernels
// (Debian's python3-ipykernel and python3-jupyter-client) and, for bash,
// JavaScript and TypeScript, long-lived bash and node processes of its
// own, and the host's side of it.
//
// The server is server.py, embedded in the airlock binary and written
// into the sandbox by the built-in template code-interpreter-v1
// (Template) before its start command runs: a sandbox gets it through
// the file API, with no host path bound in and nothing installed. The
// server runs as the sandbox's own code and is as untrusted as that
// code: everything it answers is bounded and checked here on the host
// (Decode), and nothing it says is a decision.
//
// Importers: internal/e2b and internal/host (the template by name, for
// the E2B API and the command line), internal/tools (run_code).
package interp
