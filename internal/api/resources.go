package api

import "time"

// Approval is an action of one of the tenant's runs that waits for a
// person's decision.
type Approval struct {
	// ID is RUN.CALL: the run and the call it holds.
	ID     string `json:"id"`
	RunID  string `json:"run_id"`
	Tenant string `json:"tenant"`
	Task   string `json:"task"`
	Step   int    `json:"step"`
	CallID string `json:"call_id,omitempty"`
	// Destination ("host:port") and Sandbox name a network ask.
	Destination string    `json:"destination,omitempty"`
	Sandbox     string    `json:"sandbox,omitempty"`
	Action      string    `json:"action"`
	Reason      string    `json:"reason,omitempty"`
	Requested   time.Time `json:"requested"`
	Expires     time.Time `json:"expires"`
}

// ApprovalList is the body of GET /v1/approvals.
type ApprovalList struct {
	Approvals []Approval `json:"approvals"`
}

// DecisionRequest is the body of approve (Comment, optional) and deny
// (Reason, required: the model is told).
type DecisionRequest struct {
	Comment string `json:"comment,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Decision is the answer to approve and deny.
type Decision struct {
	ID string `json:"id"`
	// Decision is "approved" or "denied".
	Decision string `json:"decision"`
	// By is the id of the key that decided, as the run's log records it.
	By string `json:"by"`
}

// PolicyVersion is a stored version of one of the tenant's policies.
type PolicyVersion struct {
	Name    string `json:"name"`
	Version int64  `json:"version"`
	// Hash is the policy hash: the canonical hash of the document
	// resolved, what policy check shows and a run under it records.
	// DocumentHash is the SHA-256 of the document's bytes, which names
	// the version in the store (a hash prefix of either finds it).
	Hash         string    `json:"hash"`
	DocumentHash string    `json:"document_hash,omitempty"`
	Created      time.Time `json:"created"`
	Source       string    `json:"source"`
	By           string    `json:"by"`
	// New says an upload stored a new version (false: it was the latest
	// already). Only in answers to uploads.
	New *bool `json:"new,omitempty"`
	// Document is the version's policy document (YAML), byte for byte.
	// Only in GET /v1/policies/{name}/versions/{ref}.
	Document string `json:"document,omitempty"`
}

// PolicyList is the body of GET /v1/policies: each policy at its latest
// version.
type PolicyList struct {
	Policies []PolicyVersion `json:"policies"`
}

// PolicyVersionList is the body of GET /v1/policies/{name}/versions,
// newest first.
type PolicyVersionList struct {
	Versions []PolicyVersion `json:"versions"`
}

// PolicyCheck is the answer to POST /v1/policies/validate: the document
// is one this server would store and run under. A document it would not
// is answered with an error (bad_request, forbidden, too_large).
type PolicyCheck struct {
	// Hash is the policy hash: the hash of Canonical, the hash a run
	// under the document, or a version of it, records.
	Hash string `json:"hash"`
	// Canonical is the document resolved: every default filled in, in
	// canonical form.
	Canonical string `json:"canonical"`
	// CanonicalHash is Hash, by its older name.
	CanonicalHash string `json:"canonical_hash"`
	// DocumentHash is the SHA-256 of the document's bytes as sent: what
	// names a stored version of it.
	DocumentHash string `json:"document_hash"`
}

// The kinds of ledger entries: the store's (store.LedgerGrant, ...).
const (
	LedgerGrant = "grant" // credits added
	LedgerDebit = "debit" // credits spent
)

// LedgerEntry is a credit ledger entry, of Kind LedgerGrant or LedgerDebit.
// Amounts are in micro-credits.
type LedgerEntry struct {
	ID      int64     `json:"id"`
	Kind    string    `json:"kind"`
	Amount  int64     `json:"amount"`
	RunID   string    `json:"run_id,omitempty"`
	Seq     int64     `json:"seq,omitempty"`
	Note    string    `json:"note,omitempty"`
	Created time.Time `json:"created"`
}

// Credits is the body of GET /v1/credits: the tenant's balance and a
// page of its ledger, oldest first.
type Credits struct {
	Tenant string `json:"tenant"`
	// Balance is grants minus debits, in micro-credits; Credits the same
	// in credits, as text ("1.5").
	Balance int64         `json:"balance"`
	Credits string        `json:"credits"`
	Entries []LedgerEntry `json:"entries"`
	// NextAfter, when not 0, fetches the next page of entries (?after=).
	NextAfter int64 `json:"next_after,omitempty"`
}

// GrantRequest is the body of POST /v1/credits/grants.
type GrantRequest struct {
	// Tenant is the tenant credited; empty means the key's own, the only
	// one a key may credit.
	Tenant string `json:"tenant,omitempty"`
	// Amount is in micro-credits: more than 0.
	Amount int64 `json:"amount"`
	// Note says why, for the ledger.
	Note string `json:"note,omitempty"`
}

// Grant is the answer to POST /v1/credits/grants: the entry recorded and
// the tenant's balance after it.
type Grant struct {
	Tenant  string      `json:"tenant"`
	Entry   LedgerEntry `json:"entry"`
	Balance int64       `json:"balance"`
	Credits string      `json:"credits"`
}

// Secret describes one of the tenant's secrets. Its value is never in
// any answer.
type Secret struct {
	Name    string    `json:"name"`
	Created time.Time `json:"created"`
	Updated time.Time `json:"updated"`
	// Hosts are the host patterns the secret may be sent to (name,
	// *.suffix or IP literal), normalized; empty leaves the binding to
	// policy alone.
	Hosts []string `json:"hosts"`
}

// SecretList is the body of GET /v1/secrets.
type SecretList struct {
	Tenant  string   `json:"tenant"`
	Secrets []Secret `json:"secrets"`
}

// SecretRequest is the body of PUT /v1/secrets/{name}. It is the one body
// that carries a secret value: a client sends it and the server stores it;
// neither ever prints, logs or echoes it.
type SecretRequest struct {
	// Value is the secret, UTF-8 text of 1 to 65536 bytes.
	Value string `json:"value"`
	// Hosts, when not empty, bind the secret to these host patterns.
	Hosts []string `json:"hosts,omitempty"`
}
