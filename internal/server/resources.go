package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/store"
)

func (s *Server) listArtifacts(w http.ResponseWriter, r *http.Request, c *call) error {
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	arts, err := c.view.ListArtifacts(r.Context(), run.ID)
	if err != nil {
		return err
	}
	out := api.ArtifactList{Artifacts: []api.Artifact{}}
	for _, a := range arts {
		if !hiddenArtifact(a.Name) {
			out.Artifacts = append(out.Artifacts, ArtifactOf(a))
		}
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// downloadTypes are the media types a download is served as; any other
// is served as application/octet-stream, so that nothing a sandbox wrote
// is ever rendered by a browser as a page.
var downloadTypes = []string{"text/x-diff", "text/plain", "application/json", "application/gzip", "application/x-tar"}

// getArtifact downloads an artifact: the patch (patch.diff), a kept file
// (files/PATH), a snapshot. The bytes are checked against their digest as
// they are sent; a corrupt blob aborts the response.
func (s *Server) getArtifact(w http.ResponseWriter, r *http.Request, c *call) error {
	run, err := ownRun(r, c)
	if err != nil {
		return err
	}
	name := r.PathValue("name")
	a, err := c.view.GetArtifact(r.Context(), run.ID, name)
	if errors.Is(err, store.ErrNotFound) {
		return errNoArtifact
	}
	if err != nil {
		return err
	}
	rd, err := s.o.Blobs.Open(r.Context(), a.Digest)
	if err != nil {
		return err
	}
	defer rd.Close()
	media := "application/octet-stream"
	if mt, _, err := mime.ParseMediaType(a.MediaType); err == nil && slices.Contains(downloadTypes, mt) {
		media = mt
	}
	h := w.Header()
	h.Set("Content-Type", media)
	h.Set("Content-Length", strconv.FormatInt(a.Size, 10))
	h.Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": downloadName(a.Name)}))
	h.Set("Content-Security-Policy", "default-src 'none'; sandbox")
	h.Set("X-Artifact-Digest", a.Digest)
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	buf := make([]byte, 64<<10)
	for {
		n, rerr := rd.Read(buf)
		if n > 0 {
			_ = rc.SetWriteDeadline(time.Now().Add(s.cfg.WriteTimeout))
			if _, err := w.Write(buf[:n]); err != nil {
				return nil // the client went away
			}
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			// Corrupt or unreadable after the status was sent: abort
			// the response, so the client sees a broken download, never a
			// short or altered one that looks whole.
			c.log.Error("artifact download failed", "run_id", run.ID, "err", rerr)
			panic(http.ErrAbortHandler)
		}
	}
}

// downloadName is an artifact's file name for Content-Disposition: its
// base name, printable ASCII without quotes.
func downloadName(name string) string {
	b := []byte(path.Base(name))
	for i, ch := range b {
		if ch < 0x20 || ch >= 0x7f || ch == '"' || ch == '\\' || ch == '/' {
			b[i] = '_'
		}
	}
	if len(b) == 0 || string(b) == "." || string(b) == ".." {
		return "artifact"
	}
	return string(b)
}

func (s *Server) listApprovals(w http.ResponseWriter, r *http.Request, c *call) error {
	// The tenant is the caller's, never empty (authenticate checks): the
	// engine lists only that tenant's runs.
	as, err := s.o.Engine.Approvals(r.Context(), c.p.Tenant)
	if err != nil {
		return err
	}
	out := api.ApprovalList{Approvals: make([]api.Approval, 0, len(as))}
	for _, a := range as {
		// engine.Approval has the wire type's fields: one that is added
		// to either and not the other stops this from compiling.
		out.Approvals = append(out.Approvals, api.Approval(a))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.decide(w, r, c, true)
}

func (s *Server) deny(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.decide(w, r, c, false)
}

// decide records the caller's decision on an approval of one of its
// tenant's runs; the key id is recorded as who decided. A run whose
// policy names approvers may only be decided by a key whose id it names.
func (s *Server) decide(w http.ResponseWriter, r *http.Request, c *call, approve bool) error {
	var q api.DecisionRequest
	if err := s.decode(w, r, &q, approve); err != nil {
		return err
	}
	text := q.Comment
	if !approve {
		text = q.Reason
		if strings.TrimSpace(q.Reason) == "" {
			return badRequest("reason: required to deny (the model is told)")
		}
		if q.Comment != "" {
			return badRequest("comment: deny takes a reason")
		}
	} else if q.Reason != "" {
		return badRequest("reason: approve takes a comment")
	}
	if len(text) > maxReason || !printableText(text) {
		return badRequest("want printable text of at most %d bytes", maxReason)
	}
	id := r.PathValue("id")
	runID, ok := engine.ApprovalRunID(id)
	if !ok {
		return errNoApproval
	}
	run, err := c.view.GetRun(r.Context(), runID)
	if errors.Is(err, store.ErrNotFound) {
		return errNoApproval
	}
	if err != nil {
		return err
	}
	if len(run.Policy) > 0 {
		doc, err := policy.Parse(run.Policy)
		if err != nil {
			return publicf(api.CodeConflict, "the run's policy does not load")
		}
		if !doc.Approvals.MayDecide(c.p.KeyID) {
			return publicf(api.CodeForbidden, "the run's policy names who may decide, and not this key")
		}
	}
	if err := s.o.Engine.Decide(r.Context(), id, c.p.Tenant, c.p.KeyID, approve, text); err != nil {
		return err
	}
	what := "denied"
	if approve {
		what = "approved"
	}
	c.log.Info("approval decided", "approval_id", id, "decision", what)
	writeJSON(w, http.StatusOK, api.Decision{ID: id, Decision: what, By: c.p.KeyID})
	return nil
}

// PolicyVersionOf is a stored policy version as the API shows it, without its
// document: its hash is the policy hash (see fillPolicyHashes).
func PolicyVersionOf(v store.PolicyVersion) api.PolicyVersion {
	h := v.PolicyHash
	if h == "" {
		h = v.Hash
	}
	return api.PolicyVersion{Name: v.Name, Version: v.Version, Hash: h, DocumentHash: v.Hash, Created: v.CreatedAt.UTC(), Source: v.Source, By: v.By}
}

// fillPolicyHashes gives the versions stored without a policy hash (before
// the stores kept one) the hash of their documents.
func fillPolicyHashes(ctx context.Context, view *store.TenantStore, vs []store.PolicyVersion) {
	store.FillPolicyHashes(vs, func(v store.PolicyVersion) ([]byte, error) {
		full, err := view.GetPolicy(ctx, v.Name, fmt.Sprintf("v%d", v.Version))
		return full.Document, err
	}, policy.HashOf)
}

// putPolicy stores a policy document (the body, YAML) as the next version
// of the tenant's policy {name}, after checking it like a run's.
func (s *Server) putPolicy(w http.ResponseWriter, r *http.Request, c *call) error {
	name := r.PathValue("name")
	if err := store.ValidatePolicyName(name); err != nil {
		return badRequest("policy name %q: want 1 to %d of a-z, 0-9, '.', '_' and '-', starting with a letter or digit", clipText(name, 80), store.MaxPolicyNameLen)
	}
	b, err := readPolicyBody(w, r)
	if err != nil {
		return err
	}
	doc, err := s.checkPolicy(b)
	if err != nil {
		return err
	}
	v, created, err := c.view.PutPolicy(r.Context(), store.PolicyVersion{Name: name, Document: b, PolicyHash: doc.Hash(), Source: "api", By: c.p.KeyID})
	if err != nil {
		return err
	}
	out := PolicyVersionOf(v)
	out.New = &created
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, out)
	return nil
}

// readPolicyBody reads a request's body, a policy document (YAML) of at
// most store.MaxPolicyLen bytes.
func readPolicyBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, store.MaxPolicyLen))
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, err
	}
	if err != nil {
		return nil, badRequest("the request body could not be read")
	}
	if len(b) == 0 {
		return nil, badRequest("the body must be the policy document (YAML)")
	}
	return b, nil
}

// validatePolicy checks a policy document (the body, YAML) as putPolicy
// and run creation would, and stores nothing: the document resolved and
// its hashes, or what is wrong with it.
func (s *Server) validatePolicy(w http.ResponseWriter, r *http.Request, _ *call) error {
	b, err := readPolicyBody(w, r)
	if err != nil {
		return err
	}
	doc, err := s.checkPolicy(b)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, api.PolicyCheck{Hash: doc.Hash(), Canonical: string(doc.Canonical()), CanonicalHash: doc.Hash(), DocumentHash: store.DocumentHash(b)})
	return nil
}

// policyVersion answers one version of the tenant's policy {name}, with
// its document: {ref} is vN, a hash prefix of at least 8 hex digits, or
// "latest".
func (s *Server) policyVersion(w http.ResponseWriter, r *http.Request, c *call) error {
	name, ref := r.PathValue("name"), r.PathValue("ref")
	if store.ValidatePolicyName(name) != nil {
		return errNoPolicy
	}
	switch ref {
	case "latest":
		ref = ""
	case "":
		return errNoPolicy
	}
	if _, err := store.ParsePolicyRef(ref); err != nil {
		return badRequest("version %q: want vN, at least 8 hex digits of the version's hash, or latest", clipText(ref, 80))
	}
	v, err := c.view.GetPolicy(r.Context(), name, ref)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNoPolicy
	case errors.Is(err, store.ErrInvalid):
		return badRequest("policy %s@%s: %s", name, clipText(ref, 80), clientText(err))
	case err != nil:
		return err
	}
	if !utf8.Valid(v.Document) {
		return publicf(api.CodeConflict, "the stored document is not UTF-8 text, which JSON cannot carry")
	}
	vs := []store.PolicyVersion{v}
	fillPolicyHashes(r.Context(), c.view, vs)
	out := PolicyVersionOf(vs[0])
	out.Document = string(v.Document)
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) listPolicies(w http.ResponseWriter, r *http.Request, c *call) error {
	vs, err := c.view.ListPolicies(r.Context())
	if err != nil {
		return err
	}
	fillPolicyHashes(r.Context(), c.view, vs)
	out := api.PolicyList{Policies: []api.PolicyVersion{}}
	for _, v := range vs {
		out.Policies = append(out.Policies, PolicyVersionOf(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) policyVersions(w http.ResponseWriter, r *http.Request, c *call) error {
	name := r.PathValue("name")
	if store.ValidatePolicyName(name) != nil {
		return errNoPolicy
	}
	vs, err := c.view.PolicyVersions(r.Context(), name)
	if errors.Is(err, store.ErrNotFound) {
		return errNoPolicy
	}
	if err != nil {
		return err
	}
	fillPolicyHashes(r.Context(), c.view, vs)
	out := api.PolicyVersionList{Versions: []api.PolicyVersion{}}
	for _, v := range vs {
		out.Versions = append(out.Versions, PolicyVersionOf(v))
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

func (s *Server) credits(w http.ResponseWriter, r *http.Request, c *call) error {
	q := r.URL.Query()
	after, err := parseParam(afterParam, q.Get("after"))
	if err != nil {
		return err
	}
	n, err := parseParam(pageParam, q.Get("limit"))
	if err != nil {
		return err
	}
	limit := int(n)
	bal, err := c.view.Balance(r.Context())
	if err != nil {
		return err
	}
	es, err := c.view.LedgerEntries(r.Context(), after, limit)
	if err != nil {
		return err
	}
	out := api.Credits{Tenant: c.p.Tenant, Balance: bal, Credits: formatCredits(bal), Entries: []api.LedgerEntry{}}
	for _, e := range es {
		out.Entries = append(out.Entries, LedgerEntryOf(e))
	}
	if len(es) == limit {
		out.NextAfter = es[len(es)-1].ID
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

// LedgerEntryOf is a ledger entry as the API shows it.
func LedgerEntryOf(e store.LedgerEntry) api.LedgerEntry {
	return api.LedgerEntry{ID: e.ID, Kind: e.Kind, Amount: e.Amount, RunID: e.RunID, Seq: e.Seq, Note: e.Note, Created: e.Created.UTC()}
}

// maxGrant bounds one grant: 10^12 credits, in micro-credits.
const maxGrant = 1_000_000_000_000 * 1_000_000

// checkGrant validates a grant a key of tenant asks for (the store checks
// the note).
func checkGrant(q api.GrantRequest, tenant string) error {
	switch {
	case q.Tenant != "" && q.Tenant != tenant:
		return publicf(api.CodeForbidden, "a key grants credits to its own tenant only")
	case q.Amount < 1 || q.Amount > maxGrant:
		return badRequest("amount %d: want 1 to %d micro-credits", q.Amount, int64(maxGrant))
	}
	return nil
}

// grant adds a grant to the caller's tenant's ledger. There is no operator
// key that stands above tenants: a key grants to its own tenant only, so
// any other tenant, one that exists or not, is refused alike.
func (s *Server) grant(w http.ResponseWriter, r *http.Request, c *call) error {
	var q api.GrantRequest
	if err := s.decode(w, r, &q, false); err != nil {
		return err
	}
	if err := checkGrant(q, c.p.Tenant); err != nil {
		return err
	}
	e, err := c.view.AddLedgerEntry(r.Context(), store.LedgerEntry{Kind: store.LedgerGrant, Amount: q.Amount, Note: q.Note})
	if err != nil {
		return err
	}
	bal, err := c.view.Balance(r.Context())
	if err != nil {
		return err
	}
	c.log.Info("credits granted", "entry", e.ID, "amount", e.Amount)
	writeJSON(w, http.StatusCreated, api.Grant{Tenant: c.p.Tenant, Entry: LedgerEntryOf(e), Balance: bal, Credits: formatCredits(bal)})
	return nil
}

// formatCredits writes micro-credits as credits, without trailing zeros.
func formatCredits(micro int64) string {
	sign := ""
	if micro < 0 {
		sign, micro = "-", -micro
	}
	s := fmt.Sprintf("%s%d.%06d", sign, micro/1_000_000, micro%1_000_000)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// ArtifactOf is a stored artifact as the API shows it.
func ArtifactOf(a store.Artifact) api.Artifact {
	return api.Artifact{Name: a.Name, Digest: a.Digest, Size: a.Size, MediaType: a.MediaType, Created: a.Created.UTC()}
}
