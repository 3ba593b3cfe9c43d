package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/airlockrun/airlock/internal/api"
)

// Approvals lists the tenant's pending approvals.
func (c *Client) Approvals(ctx context.Context) ([]api.Approval, error) {
	var out api.ApprovalList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/approvals"}, &out, 0)
	return out.Approvals, err
}

// Approve approves pending approval id, with an optional comment for the
// log.
func (c *Client) Approve(ctx context.Context, id, comment string) (api.Decision, error) {
	var out api.Decision
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/approvals/" + seg(id) + "/approve", in: api.DecisionRequest{Comment: comment}}, &out, 0)
	return out, err
}

// Deny denies pending approval id; the reason is required (the model is
// told).
func (c *Client) Deny(ctx context.Context, id, reason string) (api.Decision, error) {
	var out api.Decision
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/approvals/" + seg(id) + "/deny", in: api.DecisionRequest{Reason: reason}}, &out, 0)
	return out, err
}

// PutPolicy validates a policy document (YAML) on the server and stores
// it as the next version of the tenant's policy name. It needs the admin
// scope.
func (c *Client) PutPolicy(ctx context.Context, name string, doc []byte) (api.PolicyVersion, error) {
	var out api.PolicyVersion
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/policies/" + seg(name), raw: doc, contentType: "application/yaml"}, &out, 0)
	return out, err
}

// ValidatePolicy checks a policy document (YAML) as the server checks one
// it stores or runs under, and stores nothing. A document the server would
// refuse is an *Error (bad_request, forbidden, too_large) saying why.
func (c *Client) ValidatePolicy(ctx context.Context, doc []byte) (api.PolicyCheck, error) {
	var out api.PolicyCheck
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/policies/validate", raw: doc, contentType: "application/yaml"}, &out, 0)
	return out, err
}

// Policies lists the tenant's policies, each at its latest version.
func (c *Client) Policies(ctx context.Context) ([]api.PolicyVersion, error) {
	var out api.PolicyList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/policies"}, &out, 0)
	return out.Policies, err
}

// PolicyVersions lists the versions of the tenant's policy name, newest
// first; a name the tenant has not stored is api.CodeNotFound.
func (c *Client) PolicyVersions(ctx context.Context, name string) ([]api.PolicyVersion, error) {
	var out api.PolicyVersionList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/policies/" + seg(name) + "/versions"}, &out, 0)
	return out.Versions, err
}

// Policy returns one version of the tenant's policy name with its
// document: ref is "vN", a hash prefix of 8 or more hex digits, or "" for
// the latest. A name or version the tenant does not have is
// api.CodeNotFound.
func (c *Client) Policy(ctx context.Context, name, ref string) (api.PolicyVersion, error) {
	if ref == "" {
		ref = "latest"
	}
	var out api.PolicyVersion
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/policies/" + seg(name) + "/versions/" + seg(ref)}, &out, 0)
	return out, err
}

// Credits returns the tenant's balance and its ledger entries after
// entry id after, at most limit (0: the server's default, 100).
func (c *Client) Credits(ctx context.Context, after int64, limit int) (api.Credits, error) {
	q := url.Values{}
	if after > 0 {
		q.Set("after", strconv.FormatInt(after, 10))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.Credits
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/credits", query: q}, &out, 0)
	return out, err
}

// Grant adds a grant to the key's own tenant's ledger (q.Tenant empty or
// that tenant) and returns the entry and the balance after it. It needs
// the admin scope.
func (c *Client) Grant(ctx context.Context, q api.GrantRequest) (api.Grant, error) {
	var out api.Grant
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/credits/grants", in: q}, &out, 0)
	return out, err
}

// Secrets lists the tenant's secrets: names, host bindings and times,
// never values. It needs the secrets:write scope.
func (c *Client) Secrets(ctx context.Context) (api.SecretList, error) {
	var out api.SecretList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/secrets"}, &out, 0)
	return out, err
}

// PutSecret stores value as the tenant's secret name, replacing any
// earlier value, bound to hosts when there are any; it returns the
// secret's description (the server never sends a value back). The request
// body is cleared once sent. It needs the secrets:write scope.
func (c *Client) PutSecret(ctx context.Context, name string, value []byte, hosts []string) (api.Secret, error) {
	var out api.Secret
	body, err := json.Marshal(api.SecretRequest{Value: string(value), Hosts: hosts})
	if err != nil {
		return out, fmt.Errorf("client: PUT /v1/secrets/%s: %w", seg(name), err)
	}
	defer clear(body)
	err = c.call(ctx, request{method: http.MethodPut, path: "/v1/secrets/" + seg(name), raw: body, contentType: "application/json"}, &out, 0)
	return out, err
}

// DeleteSecret deletes the tenant's secret name; one the tenant does not
// have is api.CodeNotFound. It needs the secrets:write scope.
func (c *Client) DeleteSecret(ctx context.Context, name string) error {
	return c.call(ctx, request{method: http.MethodDelete, path: "/v1/secrets/" + seg(name)}, nil, 0)
}

// Sandboxes lists the tenant's live sandboxes of the server's E2B API
// and MCP sessions, with their exposed ports. It needs runs:read.
func (c *Client) Sandboxes(ctx context.Context) ([]api.Sandbox, error) {
	var out api.SandboxList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/sandboxes"}, &out, 0)
	return out.Sandboxes, err
}

// Sandbox returns the tenant's live sandbox id. It needs runs:read.
func (c *Client) Sandbox(ctx context.Context, id string) (api.Sandbox, error) {
	var out api.Sandbox
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/sandboxes/" + seg(id)}, &out, 0)
	return out, err
}

// RevokeExposure ends the exposure of port of the MCP sandbox id, with
// its open connections, and returns what it was; a port not exposed is
// api.CodeNotFound, an E2B sandbox's api.CodeConflict. It needs
// runs:write.
func (c *Client) RevokeExposure(ctx context.Context, id string, port int) (api.SandboxExposure, error) {
	var out api.SandboxExposure
	err := c.call(ctx, request{method: http.MethodDelete, path: "/v1/sandboxes/" + seg(id) + "/exposures/" + strconv.Itoa(port)}, &out, 0)
	return out, err
}
