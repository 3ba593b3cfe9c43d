package api

import "time"

// Sandbox is a live sandbox of the E2B API (running or paused) as the
// native API shows it (GET /v1/sandboxes/{id}, the items of SandboxList):
// where its exposed ports are reached and what goes through them.
type Sandbox struct {
	ID string `json:"id"`
	// RunID is the sandbox's record: GET /v1/runs/{run_id}/events reads
	// what was done in it.
	RunID    string    `json:"run_id"`
	Template string    `json:"template"`
	State    string    `json:"state"`
	Started  time.Time `json:"started"`
	EndAt    time.Time `json:"end_at"`
	// Open is the connections through its preview URLs open now; Bytes
	// what they carried, both ways, over its life.
	Open  int64 `json:"open"`
	Bytes int64 `json:"bytes"`
	// Ports are the rules of its policy's ports.expose, in order; empty
	// when it exposes nothing.
	Ports []SandboxPorts `json:"ports"`
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
