// Package api is the JSON vocabulary of the host's HTTP API: the request
// and response bodies that internal/server writes and internal/client and
// the command line's remote mode read, and the error shape with its closed
// set of codes. Declaring each body once keeps the three in step; the
// OpenAPI document (internal/server/openapi.json) describes the same
// shapes, and the web UI reads them.
//
// Invariants:
//   - The JSON of every type is the API's wire format: field names and
//     omitempty rules are a contract with clients and the UI, changed only
//     together with the OpenAPI document.
//   - No type here ever holds a secret value in an answer: SecretRequest,
//     the one body that carries a value, is only ever sent to the server.
//
// It does no I/O and imports only the standard library and internal/event
// (the log's vocabulary), so that the server, the client and any tool may
// import it.
package api
