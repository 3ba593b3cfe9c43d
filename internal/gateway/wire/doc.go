// Package wire reads and writes the model providers' wire formats for the
// LLM gateway: the request bodies a sandbox sends (to check the model and
// lower the output bound), and the answers upstreams send back, whole or
// streamed (to pass them on event by event and meter the usage they
// report). It does no I/O and holds no secret, so it is cheap to fuzz.
//
// Invariants: a Request encodes only what it decoded (duplicate keys
// resolved, so the upstream sees exactly what was checked); a Meter's
// counts are never negative and never above MaxCount per field; an event
// WriteEvent writes reads back as the same event.
//
// Only the gateway imports this package.
package wire

// The wire formats.
const (
	// KindOpenAI is the OpenAI API and its compatible servers.
	KindOpenAI = "openai"
	// KindAnthropic is the Anthropic Messages API.
	KindAnthropic = "anthropic"
)
