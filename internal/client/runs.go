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

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
)

// ListRunsOptions select runs.
type ListRunsOptions struct {
	// Statuses, when not empty, keeps only runs in one of them.
	Statuses []event.Status
	// Limit is the page size: 1 to 500; 0 is the server's default (50).
	Limit int
	// Cursor is an api.RunList's NextCursor.
	Cursor string
	// Oldest lists the oldest runs first (default: the newest first).
	Oldest bool
	// Metadata, when not empty, keeps only runs whose metadata has every
	// one of these keys with exactly its value.
	Metadata map[string]string
}

// ListRuns lists the tenant's runs, a page at a time.
func (c *Client) ListRuns(ctx context.Context, o ListRunsOptions) (api.RunList, error) {
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
	for k, v := range o.Metadata {
		q.Set("metadata["+k+"]", v)
	}
	var out api.RunList
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs", query: q}, &out, 0)
	return out, err
}

// Run returns the tenant's run id, with its outcome so far (steps, usage,
// verification) and metadata. Another tenant's run is api.CodeNotFound, like
// one that does not exist.
func (c *Client) Run(ctx context.Context, id string) (api.Run, error) {
	var out api.Run
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs/" + seg(id)}, &out, 0)
	return out, err
}

// CreateRun creates a run; the server's workers drive it. The run answered
// carries the request's metadata.
func (c *Client) CreateRun(ctx context.Context, q api.CreateRunRequest) (api.Run, error) {
	var out api.Run
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/runs", in: q}, &out, 0)
	return out, err
}

// CancelRun cancels run id and returns it as it is after.
func (c *Client) CancelRun(ctx context.Context, id, reason string) (api.Run, error) {
	return c.act(ctx, id, "cancel", reason)
}

// PauseRun pauses run id: its workspace is kept, its sandboxes destroyed.
func (c *Client) PauseRun(ctx context.Context, id, reason string) (api.Run, error) {
	return c.act(ctx, id, "pause", reason)
}

// ResumeRun hands paused run id to the server's workers; the run answered
// may still be paused until one takes it.
func (c *Client) ResumeRun(ctx context.Context, id string) (api.Run, error) {
	return c.act(ctx, id, "resume", "")
}

func (c *Client) act(ctx context.Context, id, action, reason string) (api.Run, error) {
	var out api.Run
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/runs/" + seg(id) + "/" + action, in: api.ActionRequest{Reason: reason}}, &out, 0)
	return out, err
}

// ForkRun starts a new run from run id's conversation and workspace after
// a step, and returns the new run.
func (c *Client) ForkRun(ctx context.Context, id string, q api.ForkRequest) (api.Run, error) {
	var out api.Run
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
func (c *Client) Events(ctx context.Context, id string, after int64, limit int) (api.EventPage, error) {
	if limit <= 0 || limit > MaxEventPage {
		limit = MaxEventPage
	}
	q := url.Values{"after": {strconv.FormatInt(after, 10)}, "limit": {strconv.Itoa(limit)}}
	var out api.EventPage
	// Each event is at most event.MaxEncodedSize, plus its comma.
	bound := int64(limit)*(event.MaxEncodedSize+1) + 4096
	err := c.call(ctx, request{method: http.MethodGet, path: "/v1/runs/" + seg(id) + "/events", query: q}, &out, bound)
	return out, err
}

// Artifacts lists run id's artifacts (not its workspace snapshots).
func (c *Client) Artifacts(ctx context.Context, id string) ([]api.Artifact, error) {
	var out api.ArtifactList
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
	q := request{
		method: http.MethodGet, path: "/v1/runs/" + seg(id) + "/artifacts/" + strings.Join(parts, "/"), long: true,
		header: http.Header{"Accept": {"*/*"}},
	}
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
func (c *Client) Upload(ctx context.Context, r io.Reader) (api.Upload, error) {
	var out api.Upload
	err := c.call(ctx, request{method: http.MethodPost, path: "/v1/uploads", stream: r, contentType: "application/octet-stream", long: true}, &out, 0)
	return out, err
}
