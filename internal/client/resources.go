package client

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Approval is an action of one of the tenant's runs that waits for a
// person's decision.
type Approval struct {
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

// Decision is the answer to Approve and Deny.
type Decision struct {
	ID string `json:"id"`
	// Decision is "approved" or "denied".
	Decision string `json:"decision"`
	// By is the id of the key that decided, as the run's log records it.
	By string `json:"by"`
}

// Approvals lists the tenant's pending approvals.
func (c *Client) Approvals(ctx context.Context) ([]Approval, error) {
	var out struct {
		Approvals []Approval `json:"approvals"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/approvals"}, &out, 0)
	return out.Approvals, err
}

// decisionBody is the body of approve (comment) and deny (reason).
type decisionBody struct {
	Comment string `json:"comment,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// Approve approves pending approval id, with an optional comment for the
// log.
func (c *Client) Approve(ctx context.Context, id, comment string) (Decision, error) {
	var out Decision
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/approvals/" + seg(id) + "/approve", in: decisionBody{Comment: comment}}, &out, 0)
	return out, err
}

// Deny denies pending approval id; the reason is required (the model is
// told).
func (c *Client) Deny(ctx context.Context, id, reason string) (Decision, error) {
	var out Decision
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/approvals/" + seg(id) + "/deny", in: decisionBody{Reason: reason}}, &out, 0)
	return out, err
}

// PolicyVersion is a stored version of one of the tenant's policies.
type PolicyVersion struct {
	Name    string    `json:"name"`
	Version int64     `json:"version"`
	Hash    string    `json:"hash"`
	Created time.Time `json:"created"`
	Source  string    `json:"source"`
	By      string    `json:"by"`
	// New says an upload stored a new version (false: the document was
	// the latest already). Only in PutPolicy's answer.
	New *bool `json:"new,omitempty"`
}

// PutPolicy validates a policy document (YAML) on the server and stores
// it as the next version of the tenant's policy name. It needs the admin
// scope.
func (c *Client) PutPolicy(ctx context.Context, name string, doc []byte) (PolicyVersion, error) {
	var out PolicyVersion
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/policies/" + seg(name), raw: doc, contentType: "application/yaml"}, &out, 0)
	return out, err
}

// Policies lists the tenant's policies, each at its latest version.
func (c *Client) Policies(ctx context.Context) ([]PolicyVersion, error) {
	var out struct {
		Policies []PolicyVersion `json:"policies"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/policies"}, &out, 0)
	return out.Policies, err
}

// PolicyVersions lists the versions of the tenant's policy name, newest
// first; a name the tenant has not stored is CodeNotFound.
func (c *Client) PolicyVersions(ctx context.Context, name string) ([]PolicyVersion, error) {
	var out struct {
		Versions []PolicyVersion `json:"versions"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/policies/" + seg(name) + "/versions"}, &out, 0)
	return out.Versions, err
}

// LedgerEntry is a credit ledger entry; Amount is in micro-credits.
type LedgerEntry struct {
	ID      int64     `json:"id"`
	Kind    string    `json:"kind"`
	Amount  int64     `json:"amount"`
	RunID   string    `json:"run_id,omitempty"`
	Seq     int64     `json:"seq,omitempty"`
	Note    string    `json:"note,omitempty"`
	Created time.Time `json:"created"`
}

// Credits is the tenant's balance and a page of its ledger.
type Credits struct {
	Tenant string `json:"tenant"`
	// Balance is grants minus debits in micro-credits; Credits the same
	// in credits, as text.
	Balance int64         `json:"balance"`
	Credits string        `json:"credits"`
	Entries []LedgerEntry `json:"entries"`
	// NextAfter, when not 0, is the after of the next page.
	NextAfter int64 `json:"next_after,omitempty"`
}

// Credits returns the tenant's balance and its ledger entries after
// entry id after, at most limit (0: the server's default, 100).
func (c *Client) Credits(ctx context.Context, after int64, limit int) (Credits, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out Credits
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/credits", query: q}, &out, 0)
	return out, err
}
