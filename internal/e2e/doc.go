// Package e2e holds airlock's end-to-end tests of the bridge: real clients
// (curl, git, pip, Python's urllib, npm, node) inside real sandboxes started
// by the airlock binary reach in-process upstreams on 127.0.0.1 only through
// the host's egress proxy, and are refused everywhere else; a credential the
// policy binds reaches the upstream and never the sandbox.
//
// The package has test files only. TestMain builds cmd/airlock and
// cmd/airlock-exec once; every test skips with a reason when the machine
// cannot run sandboxes (not root, no user namespaces), and every client check
// skips when the host lacks that client. Nothing here contacts an address
// other than loopback: every name a sandbox asks for is pinned to a local
// upstream, so even a broken proxy could not send a packet elsewhere.
//
// Importers: tests only.
package e2e
