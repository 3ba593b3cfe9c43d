// Package client is a Go client of the JSON API that airlock serve
// answers: runs, their events (paged, and as a server-sent-events stream
// that resumes from Last-Event-ID), approvals, artifacts, workspace
// uploads, policies, credits and secrets. Its bodies are internal/api's
// types, the ones the server writes.
//
// Invariants:
//   - The API key is sent only as "Authorization: Bearer KEY", never in a
//     URL, an error string or a log line; redirects are not followed, so
//     it cannot be carried to another origin.
//   - Plain http:// is refused beyond loopback unless Options.Insecure:
//     the key would cross the network in clear text.
//   - Every read is bounded: JSON answers by Options.MaxResponse (event
//     pages by their page size), error bodies, SSE lines and events, and
//     downloads by their Content-Length, checked against their digest.
//   - Errors the API answers are *Error, whose text is the server's
//     message with control characters removed, so a hostile server cannot
//     drive the caller's terminal.
//
// It imports only the standard library, internal/api (the API's bodies)
// and internal/event (the vocabulary of the log), so any tool may use it;
// the command line's remote mode (internal/cli) does.
package client
