package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
)

// remoteBackend is an airlock serve API, reached with one tenant's API
// key: everything it lists or changes is that tenant's. It answers with
// the API's types, as the local backend does, so the commands print the
// same.
//
// Exit statuses of its errors: a key the server refuses (unauthenticated)
// and bad input the server rejects (bad_request, not_found, too_large)
// exit 2, like a usage error; a refusal the key cannot overcome
// (forbidden: a missing scope, a policy naming host resources) and a
// conflict (the run has ended, the approval was decided) exit 1; the
// server failing or out of reach exits 125.
type remoteBackend struct {
	env *Env
	c   *client.Client
	// url is AIRLOCK_URL, for messages.
	url string
	// tl receives the events of the runs drive follows; nil prints none.
	tl *timeline
}

var _ backend = (*remoteBackend)(nil)

func newRemote(env *Env, url, key string, tl *timeline) (*remoteBackend, error) {
	c, err := client.New(url, key, client.Options{UserAgent: "airlock/" + Version})
	if err != nil {
		// The client's words are "API URL ..." and "... API key ...": say
		// which variable holds what it refused.
		msg := strings.TrimPrefix(err.Error(), "client: ")
		if rest, ok := strings.CutPrefix(msg, "API URL"); ok {
			return nil, usageError{Err: errors.New("AIRLOCK_URL" + rest)}
		}
		return nil, usageError{Err: errors.New("AIRLOCK_API_KEY: " + msg)}
	}
	return &remoteBackend{env: env, c: c, url: strings.TrimRight(url, "/"), tl: tl}, nil
}

func (b *remoteBackend) close() {}

// fail maps an error of the API or of reaching it to the command's.
func (b *remoteBackend) fail(err error) error {
	var ae *client.Error
	if !errors.As(err, &ae) {
		if errors.Is(err, context.Canceled) {
			return err
		}
		return fmt.Errorf("server %s: %s", b.url, strings.TrimPrefix(err.Error(), "client: "))
	}
	msg := ae.Message
	if ae.RequestID != "" && !strings.Contains(msg, ae.RequestID) && (ae.Code == api.CodeInternal || ae.Code == api.CodeUnavailable) {
		msg += " (request " + ae.RequestID + ")"
	}
	switch ae.Code {
	case api.CodeUnauthenticated:
		return usageError{Err: fmt.Errorf("the server at %s refused the API key in AIRLOCK_API_KEY: %s", b.url, msg)}
	case api.CodeForbidden:
		return reportedError{Err: fmt.Errorf("the server refused: %s", msg), Code: 1}
	case api.CodeConflict:
		return reportedError{Err: errors.New(msg), Code: 1}
	case api.CodeBadRequest, api.CodeNotFound, api.CodeTooLarge, api.CodeMethodNotAllowed:
		return usageError{Err: errors.New(msg)}
	}
	return fmt.Errorf("server %s: %s", b.url, msg)
}

func (b *remoteBackend) localHost(what string) (*local, error) {
	return nil, notRemote(what, "it needs this host's engine and sandboxes")
}

// keyTenant is the tenant of the API key, as the secrets listing says.
func (b *remoteBackend) keyTenant(ctx context.Context) (string, error) {
	l, err := b.c.Secrets(ctx)
	if err != nil {
		return "", b.fail(err)
	}
	return l.Tenant, nil
}

// secretTenant checks --tenant against the key's tenant: a key manages
// its own tenant's secrets only.
func (b *remoteBackend) secretTenant(ctx context.Context, f *SecretStoreFlags) error {
	if f.Tenant == "" {
		return nil
	}
	t, err := b.keyTenant(ctx)
	if err != nil {
		return err
	}
	if t != f.Tenant {
		return usageError{Err: fmt.Errorf("the API key is tenant %s's: it manages that tenant's secrets, not %s's", t, f.Tenant)}
	}
	return nil
}

func (b *remoteBackend) setSecret(ctx context.Context, f *SecretStoreFlags, name string, value []byte, hosts []string) ([]string, error) {
	if err := b.secretTenant(ctx, f); err != nil {
		return nil, err
	}
	s, err := b.c.PutSecret(ctx, name, value, hosts)
	if err != nil {
		return nil, b.fail(err)
	}
	return s.Hosts, nil
}

func (b *remoteBackend) listSecrets(ctx context.Context, f *SecretStoreFlags) ([]api.Secret, error) {
	l, err := b.c.Secrets(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	if f.Tenant != "" && f.Tenant != l.Tenant {
		return nil, usageError{Err: fmt.Errorf("the API key is tenant %s's: it lists that tenant's secrets, not %s's", l.Tenant, f.Tenant)}
	}
	return l.Secrets, nil
}

func (b *remoteBackend) deleteSecret(ctx context.Context, f *SecretStoreFlags, name string) error {
	if err := b.secretTenant(ctx, f); err != nil {
		return err
	}
	err := b.c.DeleteSecret(ctx, name)
	if client.IsCode(err, api.CodeNotFound) {
		return fmt.Errorf("%w: %s", host.ErrNoSecret, name)
	}
	if err != nil {
		return b.fail(err)
	}
	return nil
}

// grant credits the key's own tenant: the server refuses any other.
func (b *remoteBackend) grant(ctx context.Context, tenant string, micro int64, note string) (api.LedgerEntry, int64, error) {
	g, err := b.c.Grant(ctx, api.GrantRequest{Tenant: tenant, Amount: micro, Note: note})
	if err != nil {
		return api.LedgerEntry{}, 0, b.fail(err)
	}
	return g.Entry, g.Balance, nil
}

// policy reads a stored version with its document; what the tenant does
// not have is the local words' usage error.
func (b *remoteBackend) policy(ctx context.Context, arg string) (api.PolicyVersion, error) {
	name, ref, err := splitPolicyRef(arg)
	if err != nil {
		return api.PolicyVersion{}, err
	}
	v, err := b.c.Policy(ctx, name, ref)
	switch {
	case client.IsCode(err, api.CodeNotFound):
		return api.PolicyVersion{}, usageError{Err: &host.PolicyNotFoundError{Name: name, Ref: ref}}
	case err != nil:
		return api.PolicyVersion{}, b.fail(err)
	}
	return v, nil
}

// checkPolicy has the server check the document as it checks one it
// stores or runs under (its rules about host resources included).
func (b *remoteBackend) checkPolicy(ctx context.Context, file string) ([]byte, string, error) {
	doc, err := os.ReadFile(file)
	if err != nil {
		return nil, "", usageError{Err: fmt.Errorf("policy: %w", err)}
	}
	c, err := b.c.ValidatePolicy(ctx, doc)
	if err != nil {
		return nil, "", b.fail(err)
	}
	return []byte(c.Canonical), c.CanonicalHash, nil
}

func (b *remoteBackend) unfinished(context.Context) ([]string, error) {
	return nil, usageError{Err: errors.New("give the runs to resume: against a server, its workers drive every unfinished run themselves")}
}

// maxRunPage and maxLedgerPage are the API's largest pages of runs and of
// ledger entries.
const (
	maxRunPage    = 500
	maxLedgerPage = 1000
)

func (b *remoteBackend) listRuns(ctx context.Context, statuses []event.Status, metadata map[string]string, limit int) ([]api.Run, error) {
	want := max(limit, 1)
	var out []api.Run
	cursor := ""
	for len(out) < want {
		page, err := b.c.ListRuns(ctx, client.ListRunsOptions{Statuses: statuses, Metadata: metadata, Limit: min(want-len(out), maxRunPage), Cursor: cursor})
		if err != nil {
			return nil, b.fail(err)
		}
		out = append(out, page.Runs...)
		if page.NextCursor == "" || len(page.Runs) == 0 {
			break
		}
		cursor = page.NextCursor
	}
	return out, nil
}

// run finds a run as host.FindRun does: the full id, else a unique
// prefix or suffix of one of the tenant's runs. Another tenant's run is
// not found, like one that does not exist.
func (b *remoteBackend) run(ctx context.Context, arg string) (api.Run, error) {
	r, err := b.c.Run(ctx, arg)
	if err == nil {
		return r, nil
	}
	if !client.IsCode(err, api.CodeNotFound) {
		return api.Run{}, b.fail(err)
	}
	if len(arg) < 4 {
		return api.Run{}, usageError{Err: fmt.Errorf("no run %q", arg)}
	}
	var match []api.Run
	o := client.ListRunsOptions{Limit: maxRunPage, Oldest: true}
	for {
		page, err := b.c.ListRuns(ctx, o)
		if err != nil {
			return api.Run{}, b.fail(err)
		}
		for _, x := range page.Runs {
			if strings.HasPrefix(x.ID, arg) || strings.HasSuffix(x.ID, arg) || strings.HasPrefix(x.ID, event.RunIDPrefix+arg) {
				match = append(match, x)
			}
		}
		if page.NextCursor == "" || len(page.Runs) == 0 {
			break
		}
		o.Cursor = page.NextCursor
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return api.Run{}, usageError{Err: fmt.Errorf("no run %q", arg)}
	}
	return api.Run{}, usageError{Err: fmt.Errorf("%q names %d runs; give more of the id", arg, len(match))}
}

func (b *remoteBackend) outcome(ctx context.Context, id string) (api.Run, []api.Artifact, error) {
	r, err := b.c.Run(ctx, id)
	if err != nil {
		return api.Run{}, nil, b.fail(err)
	}
	arts, err := b.c.Artifacts(ctx, id)
	if err != nil {
		return api.Run{}, nil, b.fail(err)
	}
	return r, arts, nil
}

func (b *remoteBackend) events(ctx context.Context, id string, from int64) ([]event.Event, error) {
	page, err := b.c.Events(ctx, id, from-1, 0)
	if err != nil {
		return nil, b.fail(err)
	}
	return page.Events, nil
}

// verify checks the chain of the events the server sends, up to the last
// one the run records, and that it ends at the hash the run records, as
// store.VerifyRun does locally.
func (b *remoteBackend) verify(ctx context.Context, r api.Run) (host.Verification, error) {
	last, err := event.ParseHash(r.LastHash)
	if err != nil {
		last = event.Hash{} // none recorded: the chain is checked without it
	}
	c := event.NewChain(r.ID)
	for c.Seq() < r.Events {
		page, err := b.c.Events(ctx, r.ID, c.Seq(), 0)
		if err != nil {
			return host.Verification{Events: c.Seq()}, b.fail(err)
		}
		if len(page.Events) == 0 {
			break
		}
		for _, e := range page.Events {
			if e.Seq > r.Events {
				break
			}
			if err := c.Next(e); err != nil {
				return host.Verification{Events: c.Seq(), Broken: err}, nil
			}
		}
	}
	if c.Seq() != r.Events {
		return host.Verification{Events: c.Seq(), Broken: &event.VerifyError{
			RunID: r.ID, Seq: c.Seq() + 1, Got: r.Events,
			Err: fmt.Errorf("%w: last event is seq %d, the run records %d", event.ErrTruncated, c.Seq(), r.Events),
		}}, nil
	}
	if c.Seq() > 0 && !last.IsZero() && c.Last() != last {
		return host.Verification{Events: c.Seq(), Broken: &event.VerifyError{
			RunID: r.ID, Seq: c.Seq(),
			Err: fmt.Errorf("%w: last event differs from the one the run records", event.ErrHashMismatch),
		}}, nil
	}
	n, at := c.Deleted()
	return host.Verification{Events: c.Seq(), Last: c.Last().String(), Deleted: n, DeletedAt: at}, nil
}

// ended is the error of acting on run id that the server says conflicts:
// the local engine's words when the run has ended.
func (b *remoteBackend) ended(ctx context.Context, id string, err error) error {
	if client.IsCode(err, api.CodeConflict) {
		if r, gerr := b.c.Run(ctx, id); gerr == nil && r.Status.Final() {
			return reportedError{Err: fmt.Errorf("run already ended: run %s is %s", id, r.Status), Code: 1}
		}
	}
	return b.fail(err)
}

func (b *remoteBackend) stop(ctx context.Context, id string, pause bool, reason string) error {
	var err error
	if pause {
		_, err = b.c.PauseRun(ctx, id, reason)
	} else {
		_, err = b.c.CancelRun(ctx, id, reason)
	}
	if err != nil {
		return b.ended(ctx, id, err)
	}
	return nil
}

func (b *remoteBackend) fork(ctx context.Context, parentArg string, q host.ForkRequest) (string, error) {
	var errs []error
	if q.BaseURL != "" {
		errs = append(errs, errors.New("--base-url: a server calls only its own model providers"))
	}
	if q.PolicyName != "" {
		errs = append(errs, errors.New("--policy-name: store the policy with airlock policy put, then give --policy NAME"))
	}
	if err := errors.Join(errs...); err != nil {
		return "", notRemote("airlock runs fork with these flags", err.Error())
	}
	parent, err := b.run(ctx, parentArg)
	if err != nil {
		return "", err
	}
	at := q.AtStep
	child, err := b.c.ForkRun(ctx, parent.ID, api.ForkRequest{
		AtStep: &at, Model: q.Model, Script: q.Script, MaxSteps: q.MaxSteps,
		Policy: q.PolicyRef, PolicyDocument: q.PolicyDocument,
	})
	if err != nil {
		return "", b.fail(err)
	}
	return child.ID, nil
}

func (b *remoteBackend) approvals(ctx context.Context, tenant string) ([]api.Approval, error) {
	as, err := b.c.Approvals(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	var out []api.Approval
	for _, a := range as {
		if tenant == "" || a.Tenant == tenant {
			out = append(out, a)
		}
	}
	return out, nil
}

// decide decides as the API key: the server records the key's id as who
// decided. An approval of another tenant's run is no approval.
func (b *remoteBackend) decide(ctx context.Context, id, tenant string, approve bool, text string) (string, error) {
	none := usageError{Err: fmt.Errorf("no such approval: %q", id)}
	if tenant != "" {
		runID, ok := host.ApprovalRunID(id)
		if !ok {
			return "", none
		}
		r, err := b.c.Run(ctx, runID)
		switch {
		case client.IsCode(err, api.CodeNotFound):
			return "", none
		case err != nil:
			return "", b.fail(err)
		case r.Tenant != tenant:
			return "", none
		}
	}
	var d api.Decision
	var err error
	if approve {
		d, err = b.c.Approve(ctx, id, text)
	} else {
		d, err = b.c.Deny(ctx, id, text)
	}
	switch {
	case client.IsCode(err, api.CodeNotFound):
		return "", none
	case err != nil:
		return "", b.fail(err)
	}
	return d.By, nil
}

// putPolicy uploads the document; the server checks it as it checks a
// run's, and records the key's id as who stored it.
func (b *remoteBackend) putPolicy(ctx context.Context, name, _ string, doc []byte) (api.PolicyVersion, error) {
	v, err := b.c.PutPolicy(ctx, name, doc)
	if err != nil {
		return api.PolicyVersion{}, b.fail(err)
	}
	return v, nil
}

func (b *remoteBackend) policyVersions(ctx context.Context, name string) ([]api.PolicyVersion, error) {
	vs, err := b.c.PolicyVersions(ctx, name)
	if client.IsCode(err, api.CodeNotFound) {
		return nil, &host.PolicyNotFoundError{Name: name}
	}
	if err != nil {
		return nil, b.fail(err)
	}
	return vs, nil
}

func (b *remoteBackend) policies(ctx context.Context) ([]api.PolicyVersion, error) {
	vs, err := b.c.Policies(ctx)
	if err != nil {
		return nil, b.fail(err)
	}
	return vs, nil
}

// credits shows the key's own tenant only: another tenant is a usage
// error that says whose the key is.
func (b *remoteBackend) credits(ctx context.Context, tenant string) (int64, []api.LedgerEntry, error) {
	var all []api.LedgerEntry
	var bal int64
	for after, first := int64(0), true; first || after != 0; first = false {
		page, err := b.c.Credits(ctx, after, maxLedgerPage)
		if err != nil {
			return 0, nil, b.fail(err)
		}
		if first {
			if page.Tenant != tenant {
				return 0, nil, usageError{Err: fmt.Errorf("the API key is tenant %s's: it shows that tenant's credits, not %s's", page.Tenant, tenant)}
			}
			bal = page.Balance
		}
		all = append(all, page.Entries...)
		after = page.NextAfter
	}
	return bal, all, nil
}

// detachWait bounds the cancellation a Ctrl-C sends to the server.
const detachWait = 30 * time.Second
