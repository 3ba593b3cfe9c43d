package api

import (
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// Sandbox is a live sandbox of the E2B API (running or paused) or of an
// MCP session as the native API shows it (GET /v1/sandboxes/{id}, the
// items of SandboxList): where its exposed ports are reached and what goes
// through them.
type Sandbox struct {
	ID string `json:"id"`
	// Origin is "e2b" (the E2B API's) or "mcp" (an MCP session's).
	Origin string `json:"origin"`
	// RunID is the sandbox's record: GET /v1/runs/{run_id}/events reads
	// what was done in it ("" for an MCP session's, whose record is the
	// server's MCP audit log).
	RunID string `json:"run_id"`
	// Template is an E2B sandbox's template, or the name of an MCP
	// sandbox's policy.
	Template string    `json:"template"`
	State    string    `json:"state"`
	Started  time.Time `json:"started"`
	EndAt    time.Time `json:"end_at"`
	// Open is the connections through its preview URLs open now; Bytes
	// what they carried, both ways, over its life.
	Open  int64 `json:"open"`
	Bytes int64 `json:"bytes"`
	// Ports are the rules of an E2B sandbox's ports.expose, in order;
	// empty when it exposes nothing, and for an MCP sandbox.
	Ports []SandboxPorts `json:"ports"`
	// Exposures are the ports of an MCP sandbox its client exposed with
	// expose_port, by port; empty for an E2B sandbox, whose ports are its
	// policy's (Ports).
	Exposures []SandboxExposure `json:"exposures"`
}

// SandboxExposure is a port of an MCP sandbox that its client exposed
// with expose_port, until it is revoked (DELETE
// /v1/sandboxes/{id}/exposures/{port}) or the sandbox ends.
type SandboxExposure struct {
	Port int `json:"port"`
	// URL is where the port is reached; Headers, when there are any, what
	// a client sends there to name the sandbox and the port.
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
	// Access is "public" or "token"; TokenRequired is true for token:
	// a client sends the sandbox's traffic token, which only the MCP
	// client was given, in the header Airlock-Traffic-Token.
	Access        string `json:"access"`
	TokenRequired bool   `json:"token_required"`
	// By is the API key (its id) whose MCP session exposed it; At when.
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Open is the connections open to the port now.
	Open int64 `json:"open"`
}

// ExposureList is the body of GET /v1/sandboxes/{id}/exposures.
type ExposureList struct {
	Exposures []SandboxExposure `json:"exposures"`
}

// SandboxPorts is one rule of a sandbox's ports.expose.
type SandboxPorts struct {
	// Ports is one port ("3000") or a range ("8000-8999").
	Ports string `json:"ports"`
	// Access is "public" (anyone who reaches the data plane) or "token"
	// (the sandbox's traffic access token, header
	// E2b-Traffic-Access-Token, which only its creator was given).
	Access string `json:"access"`
	// URL is where the ports are reached: https://PORT-ID.DOMAIN when
	// the host has an e2b.domain ("{port}" stands for PORT in a range's),
	// else the data plane's address, to which a client names the sandbox
	// and the port in the headers E2b-Sandbox-Id and E2b-Sandbox-Port.
	URL string `json:"url"`
	// Open is the connections open now to the ports this rule decides.
	Open int64 `json:"open"`
}

// SandboxList is the body of GET /v1/sandboxes: the tenant's live
// sandboxes, by id.
type SandboxList struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// SandboxEvent is one event a sandbox reported through its event channel
// (airlock-event, /run/airlock/events), as the host validated it: Seq
// numbers the sandbox's events from 1, Time is when the host accepted it.
// Event.Source is "sandbox": what it says is untrusted data.
type SandboxEvent struct {
	Seq   uint64             `json:"seq"`
	Time  time.Time          `json:"time"`
	Event event.SandboxEvent `json:"event"`
}

// SandboxEventList is the body of GET /v1/sandboxes/{id}/events: the
// sandbox's kept events after ?after=, oldest first.
type SandboxEventList struct {
	Events []SandboxEvent `json:"events"`
	// Next is the Seq the next event will get (after=Next-1 asks only for
	// newer ones).
	Next uint64 `json:"next"`
	// Evicted counts older events the host no longer keeps (it keeps the
	// last 1000 per sandbox).
	Evicted uint64 `json:"evicted"`
	// Dropped counts what the sandbox sent that was refused.
	Dropped event.SandboxEventsDropped `json:"dropped"`
	// Ended says the sandbox is gone: no event will follow.
	Ended bool `json:"ended"`
}
