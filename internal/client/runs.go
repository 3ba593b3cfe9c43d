package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
)

// Run is a run as the API shows it. The fields from Steps on are only in
// the answer of Client.Run.
type Run struct {
	ID          string       `json:"id"`
	Tenant      string       `json:"tenant"`
	Status      event.Status `json:"status"`
	Model       string       `json:"model"`
	Task        string       `json:"task"`
	Created     time.Time    `json:"created"`
	Updated     time.Time    `json:"updated"`
	Finished    *time.Time   `json:"finished,omitempty"`
	ParentRunID string       `json:"parent_run_id,omitempty"`
	ParentSeq   int64        `json:"parent_seq,omitempty"`
	// Events is the seq of the run's last event.
	Events     int64  `json:"events"`
	PolicyHash string `json:"policy_hash"`

	Steps        *int                      `json:"steps,omitempty"`
	Usage        *event.Usage              `json:"usage,omitempty"`
	Reason       string                    `json:"reason,omitempty"`
	Summary      string                    `json:"summary,omitempty"`
	Verification *event.VerificationResult `json:"verification,omitempty"`
	Metadata     map[string]string         `json:"metadata,omitempty"`
}

// RunList is a page of runs.
type RunList struct {
	Runs []Run `json:"runs"`
	// NextCursor, when not empty, is ListRunsOptions.Cursor of the next
	// page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// ListRunsOptions select runs.
type ListRunsOptions struct {
	// Statuses, when not empty, keeps only runs in one of them.
	Statuses []event.Status
	// Limit is the page size: 1 to 500; 0 is the server's default (50).
	Limit int
	// Cursor is a RunList.NextCursor.
	Cursor string
	// Oldest lists the oldest runs first (default: the newest first).
	Oldest bool
}

// CreateRunRequest is a new run.
type CreateRunRequest struct {
	Task string `json:"task"`
	// Model is "PROVIDER:MODEL", or empty with Script.
	Model string `json:"model,omitempty"`
	// Script is the YAML of a scripted model's turns.
	Script string `json:"script,omitempty"`
	// Policy names a stored policy NAME[@vN|@HASHPREFIX] of the tenant;
	// PolicyDocument is a document (YAML) instead; neither: the built-in
	// strict default.
	Policy         string `json:"policy,omitempty"`
	PolicyDocument string `json:"policy_document,omitempty"`
	// Workspace is what /workspace starts as; nil: empty.
	Workspace *WorkspaceSource `json:"workspace,omitempty"`
	// Verify adds completion checks to the policy's.
	Verify *VerifySpec `json:"verify,omitempty"`
	// Artifacts adds globs of workspace files kept after verification.
	Artifacts []string `json:"artifacts,omitempty"`
	// MaxSteps lowers the policy's step budget (never raises it).
	MaxSteps int `json:"max_steps,omitempty"`
	// Metadata is the caller's own labels, returned with the run.
	Metadata map[string]string `json:"metadata,omitempty"`
}

// WorkspaceSource is where a run's workspace comes from.
type WorkspaceSource struct {
	// Upload is an Upload's ID.
	Upload string `json:"upload,omitempty"`
	// Git is a repository URL (not supported by the server yet).
	Git string `json:"git,omitempty"`
}

// VerifySpec are completion checks.
type VerifySpec struct {
	Commands    []string `json:"commands,omitempty"`
	Changed     []string `json:"changed,omitempty"`
	OnlyChanged []string `json:"only_changed,omitempty"`
}

// ForkRequest is a fork of a run after step AtStep (0: from the start).
// The other fields replace the parent's when not empty.
type ForkRequest struct {
	AtStep         int    `json:"at_step"`
	Model          string `json:"model,omitempty"`
	Script         string `json:"script,omitempty"`
	Policy         string `json:"policy,omitempty"`
	PolicyDocument string `json:"policy_document,omitempty"`
	MaxSteps       int    `json:"max_steps,omitempty"`
}

// Upload is a stored workspace tarball.
type Upload struct {
	// ID names the upload in WorkspaceSource.Upload.
	ID string `json:"id"`
	// Size is the stored (gzipped) size; Received the bytes sent.
	Size     int64 `json:"size"`
	Received int64 `json:"received"`
	Gzipped  bool  `json:"gzipped"`
}

// Artifact is a run's stored result: the patch (patch.diff), a kept file
// (files/PATH).
type Artifact struct {
	Name      string    `json:"name"`
	Digest    string    `json:"digest"`
	Size      int64     `json:"size"`
	MediaType string    `json:"media_type"`
	Created   time.Time `json:"created"`
}

// EventPage is a page of a run's log.
type EventPage struct {
	Events []event.Event `json:"events"`
	// NextAfter is the after of the next page.
	NextAfter int64 `json:"next_after"`
	// More says the log had more events than this page.
	More bool `json:"more"`
}

// ListRuns lists the tenant's runs, a page at a time.
func (c *Client) ListRuns(ctx context.Context, o ListRunsOptions) (RunList, error) {
	q := url.Values{}
	for _, s := range o.Statuses {
		q.Add("status", string(s))
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Oldest {
		q.Set("order", "asc")
	}
	var out RunList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs", query: q}, &out, 0)
	return out, err
}

// Run returns the tenant's run id, with its outcome so far (steps, usage,
// verification) and metadata. Another tenant's run is CodeNotFound, like
// one that does not exist.
func (c *Client) Run(ctx context.Context, id string) (Run, error) {
	var out Run
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs/" + seg(id)}, &out, 0)
	return out, err
}

// CreateRun creates a run; the server's workers drive it.
func (c *Client) CreateRun(ctx context.Context, q CreateRunRequest) (Run, error) {
	var out Run
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/runs", in: q}, &out, 0)
	return out, err
}

// actionBody is the body of cancel and pause.
type actionBody struct {
	Reason string `json:"reason,omitempty"`
}

// CancelRun cancels run id and returns it as it is after.
func (c *Client) CancelRun(ctx context.Context, id, reason string) (Run, error) {
	return c.act(ctx, id, "cancel", reason)
}

// PauseRun pauses run id: its workspace is kept, its sandboxes destroyed.
func (c *Client) PauseRun(ctx context.Context, id, reason string) (Run, error) {
	return c.act(ctx, id, "pause", reason)
}

// ResumeRun hands paused run id to the server's workers; the run answered
// may still be paused until one takes it.
func (c *Client) ResumeRun(ctx context.Context, id string) (Run, error) {
	return c.act(ctx, id, "resume", "")
}

func (c *Client) act(ctx context.Context, id, action, reason string) (Run, error) {
	var out Run
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/runs/" + seg(id) + "/" + action, in: actionBody{Reason: reason}}, &out, 0)
	return out, err
}

// ForkRun starts a new run from run id's conversation and workspace after
// a step, and returns the new run.
func (c *Client) ForkRun(ctx context.Context, id string, q ForkRequest) (Run, error) {
	var out Run
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/runs/" + seg(id) + "/fork", in: q}, &out, 0)
	return out, err
}

// MaxEventPage is the most events Events asks for at a time: a page is
// read whole, and may be this many times event.MaxEncodedSize.
const MaxEventPage = 64

// Events returns the events of run id after seq after, at most limit
// (1 to MaxEventPage; 0 or more is MaxEventPage), as the server sent
// them: each decoded strictly (event.Decode), their order and hashes not
// checked (event.NewChain checks a log).
func (c *Client) Events(ctx context.Context, id string, after int64, limit int) (EventPage, error) {
	if limit <= 0 || limit > MaxEventPage {
		limit = MaxEventPage
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "limit": {strconv.Itoa(limit)}}
	var out EventPage
	// Each event is at most event.MaxEncodedSize, plus its comma.
	bound := int64(limit)*(event.MaxEncodedSize+1) + 4096
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs/" + seg(id) + "/events", query: q}, &out, bound)
	return out, err
}

// Artifacts lists run id's artifacts (not its workspace snapshots).
func (c *Client) Artifacts(ctx context.Context, id string) ([]Artifact, error) {
	var out struct {
		Artifacts []Artifact `json:"artifacts"`
	}
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs/" + seg(id) + "/artifacts"}, &out, 0)
	return out.Artifacts, err
}

// ErrCorrupt reports a download whose bytes do not match the digest or
// length the server announced: what was written to w is not the artifact.
var ErrCorrupt = errors.New("client: the download does not match its digest")

// Download writes run id's artifact name to w and returns its size. The
// bytes are checked against the X-Artifact-Digest and Content-Length the
// server sends; a mismatch is ErrCorrupt.
func (c *Client) Download(ctx context.Context, id, name string, w io.Writer) (int64, error) {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = seg(p)
	}
	q := request{method: http.MethodGet, path: "/v1/runs/" + seg(id) + "/artifacts/" + strings.Join(parts, "/"), long: true,
		header: http.Header{"Accept": {"*/*"}}}
	resp, cancel, err := c.send(ctx, q)
	if err != nil {
		return 0, err
	}
	defer cancel()
	defer resp.Body.Close()
	if resp.ContentLength < 0 {
		return 0, fmt.Errorf("client: download %s of %s: the server sent no Content-Length", name, id)
	}
	digest := resp.Header.Get("X-Artifact-Digest")
	var h hash.Hash
	hexDigest, ok := strings.CutPrefix(digest, "sha256:")
	if ok {
		h = sha256.New()
		w = io.MultiWriter(w, h)
	}
	n, err := io.Copy(w, io.LimitReader(resp.Body, resp.ContentLength+1))
	if err != nil {
		return n, fmt.Errorf("client: download %s of %s: %w", name, id, transportErr(err))
	}
	if n != resp.ContentLength {
		return n, fmt.Errorf("%w: %s of %s: %d bytes, announced %d", ErrCorrupt, name, id, n, resp.ContentLength)
	}
	if h != nil && hex.EncodeToString(h.Sum(nil)) != hexDigest {
		return n, fmt.Errorf("%w: %s of %s", ErrCorrupt, name, id)
	}
	return n, nil
}

// Upload stores a workspace tarball (tar or gzipped tar) read from r, for
// CreateRunRequest.Workspace. It is sent once: a refusal is not retried.
func (c *Client) Upload(ctx context.Context, r io.Reader) (Upload, error) {
	var out Upload
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/uploads", stream: r, contentType: "application/octet-stream", long: true}, &out, 0)
	return out, err
}
