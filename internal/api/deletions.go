package api

import "time"

// Deletion is the audit record of a deletion (DELETE /v1/runs/{id},
// DELETE /v1/tenants/{name}, the items of DeletionList): who deleted
// what, when, and how much of each kind of data, never any of the
// deleted content. It outlives what it names.
type Deletion struct {
	ID int64 `json:"id"`
	// Tenant is the tenant whose data went.
	Tenant string `json:"tenant"`
	// Kind is "run", "tenant" or "retention".
	Kind string `json:"kind"`
	// Target is the run id, the tenant's name, or the retention rule.
	Target string `json:"target"`
	// Actor is who asked: an API key ("key ID (NAME)"), "cli" or
	// "retention".
	Actor string `json:"actor"`
	// Counts holds how many of each kind of data went ("runs", "events",
	// "artifacts", ...).
	Counts  map[string]int64 `json:"counts"`
	Created time.Time        `json:"created"`
}

// DeletionList is GET /v1/deletions: the caller's tenant's deletion
// records, newest first.
type DeletionList struct {
	Deletions []Deletion `json:"deletions"`
}
