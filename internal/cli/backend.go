package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
)

// backend is where the runs, approvals, policies and credits of the run
// commands (runs, run, approvals, approve, deny, policy, credits, secrets)
// live: this host (localBackend), or an airlock serve API (remoteBackend)
// when AIRLOCK_URL and AIRLOCK_API_KEY are set. Both speak the API's
// types, so the commands print the same whichever it is.
//
// Errors are the commands' own: usageError (exit 2), reportedError, or
// other (125).
type backend interface {
	// listRuns returns up to limit runs, the newest first; statuses, when
	// not empty, keeps only runs in one of them, and metadata only runs
	// whose metadata has each of its pairs.
	listRuns(ctx context.Context, statuses []event.Status, metadata map[string]string, limit int) ([]api.Run, error)
	// run finds the run arg names: a full id, or a unique part of one;
	// none is a usage error `no run "ARG"`.
	run(ctx context.Context, arg string) (api.Run, error)
	// outcome returns run id with its outcome, metadata and policy, and
	// its artifacts.
	outcome(ctx context.Context, id string) (api.Run, []api.Artifact, error)
	// events returns a page of run id's events from seq from on; an empty
	// page is the end of the log.
	events(ctx context.Context, id string, from int64) ([]event.Event, error)
	// verify checks run r's hash chain and returns how many events it
	// checked and the last one's hash, or why the chain does not verify
	// (broken); err is a failure to check it at all.
	verify(ctx context.Context, r api.Run) (host.Verification, error)
	// stop cancels or pauses run id.
	stop(ctx context.Context, id string, pause bool, reason string) error

	// create records the run q asks for and returns its id.
	create(ctx context.Context, q host.RunRequest) (string, error)
	// fork creates the fork of the run parent names that q asks for and
	// returns its id.
	fork(ctx context.Context, parent string, q host.ForkRequest) (string, error)
	// unfinished lists the runs `airlock runs resume` with no argument
	// resumes.
	unfinished(ctx context.Context) ([]string, error)
	// drive drives run id (resume: a stopped one) in the foreground,
	// printing its timeline to the one the backend was opened with; it
	// writes the artifacts to out and maps the final status to the exit
	// status. It is safe to call for several runs at once.
	drive(id, out string, resume bool) error

	// approvals lists pending approvals (of tenant's runs when not empty).
	approvals(ctx context.Context, tenant string) ([]api.Approval, error)
	// decide approves or denies approval id and returns who decided.
	decide(ctx context.Context, id, tenant string, approve bool, text string) (string, error)

	// putPolicy stores doc (read from file) as the next version of
	// policy name; the version's New says whether it is new.
	putPolicy(ctx context.Context, name, file string, doc []byte) (api.PolicyVersion, error)
	// policyVersions lists name's versions, newest first (a
	// host.PolicyNotFoundError for no such policy).
	policyVersions(ctx context.Context, name string) ([]api.PolicyVersion, error)
	// policy reads the stored version ref names, with its document.
	policy(ctx context.Context, ref string) (api.PolicyVersion, error)
	// checkPolicy checks the policy document in file as this backend
	// would store or run under it and returns it resolved, with its hash; a
	// document it would not take is an error saying why.
	checkPolicy(ctx context.Context, file string) (canonical []byte, hash string, err error)
	// policies lists the stored policies at their latest versions.
	policies(ctx context.Context) ([]api.PolicyVersion, error)

	// putTemplate stores doc (the template document the command made,
	// from source) as the next version of template name; the version's
	// New says whether it is new.
	putTemplate(ctx context.Context, name, source string, doc []byte) (api.Template, error)
	// templates lists the templates at their latest versions.
	templates(ctx context.Context) ([]api.Template, error)
	// templateVersions lists name's versions, newest first.
	templateVersions(ctx context.Context, name string) ([]api.Template, error)
	// template reads version of template name (0: the latest), with its
	// document.
	template(ctx context.Context, name string, version int64) (api.Template, error)
	// deleteTemplate removes every version of template name and returns
	// how many there were.
	deleteTemplate(ctx context.Context, name string) (int64, error)

	// credits returns tenant's balance and whole ledger, oldest first.
	credits(ctx context.Context, tenant string) (int64, []api.LedgerEntry, error)
	// grant adds credits to tenant's ledger; the entry and the balance.
	grant(ctx context.Context, tenant string, micro int64, note string) (api.LedgerEntry, int64, error)
	// setSecret stores value as the secret name of the tenant f names
	// (the local tenant's, or the API key's, when empty), bound to hosts;
	// it returns the hosts the secret is bound to.
	setSecret(ctx context.Context, f *SecretStoreFlags, name string, value []byte, hosts []string) ([]string, error)
	// listSecrets describes the tenant's secrets, sorted by name.
	listSecrets(ctx context.Context, f *SecretStoreFlags) ([]api.Secret, error)
	// deleteSecret deletes the tenant's secret name (host.ErrNoSecret
	// when there is none).
	deleteSecret(ctx context.Context, f *SecretStoreFlags, name string) error
	// localHost returns this host for what only it can do (what names
	// the command); the remote backend refuses.
	localHost(what string) (*local, error)

	close()
}

// openBackend chooses the backend: the API at AIRLOCK_URL with the key
// AIRLOCK_API_KEY when both are set, this host's store otherwise. o is
// for the local engine (the timeline also receives a remote run's
// events); neither opens anything before it is needed.
func openBackend(env *Env, o hostOptions) (backend, error) {
	url, key := env.getenv("AIRLOCK_URL"), env.getenv("AIRLOCK_API_KEY")
	switch {
	case url != "" && key != "":
		return newRemote(env, url, key, o.timeline)
	case url != "":
		return nil, usageError{Err: errors.New("AIRLOCK_URL is set but AIRLOCK_API_KEY is not: set both to use a server, neither to use this host's store")}
	case key != "":
		return nil, usageError{Err: errors.New("AIRLOCK_API_KEY is set but AIRLOCK_URL is not: set both to use a server, neither to use this host's store")}
	}
	return &localBackend{env: env, o: o}, nil
}

// localBackend is this host. It opens on first use, so that a command's
// usage errors come before any store or sandbox error.
type localBackend struct {
	env    *Env
	o      hostOptions
	gcOnce sync.Once

	mu sync.Mutex
	// h is the host, once opened (guarded by mu).
	h *local
}

var _ backend = (*localBackend)(nil)

func (b *localBackend) host() (*local, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h == nil {
		h, err := openLocal(b.env, b.o)
		if err != nil {
			return nil, err
		}
		b.h = h
	}
	return b.h, nil
}

func (b *localBackend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h != nil {
		b.h.close()
	}
}

func (b *localBackend) localHost(string) (*local, error) { return b.host() }

// do runs f on the host, its errors given the command line's statuses.
func do[T any](b *localBackend, f func(*host.Host) (T, error)) (T, error) {
	h, err := b.host()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(h.h)
	return v, hostError(err)
}

func (b *localBackend) listRuns(ctx context.Context, statuses []event.Status, metadata map[string]string, limit int) ([]api.Run, error) {
	return do(b, func(h *host.Host) ([]api.Run, error) { return h.Runs(ctx, statuses, metadata, limit) })
}

func (b *localBackend) run(ctx context.Context, arg string) (api.Run, error) {
	return do(b, func(h *host.Host) (api.Run, error) { return h.FindRun(ctx, arg) })
}

func (b *localBackend) outcome(ctx context.Context, id string) (api.Run, []api.Artifact, error) {
	var arts []api.Artifact
	r, err := do(b, func(h *host.Host) (r api.Run, err error) {
		r, arts, err = h.Outcome(ctx, id)
		return r, err
	})
	return r, arts, err
}

func (b *localBackend) events(ctx context.Context, id string, from int64) ([]event.Event, error) {
	return do(b, func(h *host.Host) ([]event.Event, error) { return h.Events(ctx, id, from) })
}

// verify counts any error of reading the log as the chain not verifying.
func (b *localBackend) verify(ctx context.Context, r api.Run) (host.Verification, error) {
	h, err := b.host()
	if err != nil {
		return host.Verification{}, err
	}
	v, err := h.h.Verify(ctx, r.ID)
	return v, hostError(err)
}

// stop cancels or pauses, then waits (up to a minute) for a driving
// process to let go.
func (b *localBackend) stop(ctx context.Context, id string, pause bool, reason string) error {
	_, err := do(b, func(h *host.Host) (struct{}, error) { return struct{}{}, h.Stop(ctx, id, pause, "user", reason) })
	return err
}

func (b *localBackend) create(ctx context.Context, q host.RunRequest) (string, error) {
	return do(b, func(h *host.Host) (string, error) { return h.CreateRun(ctx, q) })
}

func (b *localBackend) fork(ctx context.Context, parent string, q host.ForkRequest) (string, error) {
	q.PolicyBy = whoami(b.env)
	id, err := do(b, func(h *host.Host) (string, error) { return h.Fork(ctx, parent, q) })
	var nf *host.PolicyNotFoundError
	if errors.As(err, &nf) {
		return "", usageError{Err: fmt.Errorf("--policy %s: no such file, and %w", q.PolicyRef, nf)}
	}
	return id, err
}

func (b *localBackend) unfinished(ctx context.Context) ([]string, error) {
	return do(b, func(h *host.Host) ([]string, error) { return h.Unfinished(ctx) })
}

func (b *localBackend) drive(id, out string, resume bool) error {
	h, err := b.host()
	if err != nil {
		return err
	}
	b.gcOnce.Do(func() { go h.h.GC() })
	return h.foreground(id, out, resume)
}

func (b *localBackend) approvals(ctx context.Context, tenant string) ([]api.Approval, error) {
	return do(b, func(h *host.Host) ([]api.Approval, error) { return h.Approvals(ctx, tenant) })
}

// decide lets the local user decide: their $USER and uid are what the
// run's policy approvers name.
func (b *localBackend) decide(ctx context.Context, id, tenant string, approve bool, text string) (string, error) {
	by := whoami(b.env)
	_, err := do(b, func(h *host.Host) (struct{}, error) {
		return struct{}{}, h.Decide(ctx, id, tenant, by, localNames(b.env), approve, text)
	})
	var not *host.NotApproverError
	if errors.As(err, &not) {
		return "", reportedError{Err: fmt.Errorf("%s may not decide on approvals of run %s: %w", by, not.Run, not), Code: 1}
	}
	if errors.Is(err, host.ErrNoApproval) {
		return "", usageError{Err: err}
	}
	return by, err
}

func (b *localBackend) putPolicy(ctx context.Context, name, file string, doc []byte) (api.PolicyVersion, error) {
	return do(b, func(h *host.Host) (api.PolicyVersion, error) {
		return h.PutPolicy(ctx, event.LocalTenant, name, file, whoami(b.env), doc)
	})
}

func (b *localBackend) policyVersions(ctx context.Context, name string) ([]api.PolicyVersion, error) {
	return do(b, func(h *host.Host) ([]api.PolicyVersion, error) { return h.PolicyVersions(ctx, event.LocalTenant, name) })
}

func (b *localBackend) policy(ctx context.Context, ref string) (api.PolicyVersion, error) {
	if _, _, err := splitPolicyRef(ref); err != nil {
		return api.PolicyVersion{}, err
	}
	v, err := do(b, func(h *host.Host) (api.PolicyVersion, error) { return h.Policy(ctx, event.LocalTenant, ref) })
	var nf *host.PolicyNotFoundError
	if errors.As(err, &nf) {
		return v, usageError{Err: nf}
	}
	return v, err
}

func (b *localBackend) policies(ctx context.Context) ([]api.PolicyVersion, error) {
	return do(b, func(h *host.Host) ([]api.PolicyVersion, error) { return h.Policies(ctx, event.LocalTenant) })
}

func (b *localBackend) credits(ctx context.Context, tenant string) (int64, []api.LedgerEntry, error) {
	var entries []api.LedgerEntry
	bal, err := do(b, func(h *host.Host) (bal int64, err error) {
		bal, entries, err = h.Credits(ctx, tenant)
		return bal, err
	})
	return bal, entries, err
}

func (b *localBackend) grant(ctx context.Context, tenant string, micro int64, note string) (api.LedgerEntry, int64, error) {
	var bal int64
	e, err := do(b, func(h *host.Host) (e api.LedgerEntry, err error) {
		e, bal, err = h.Grant(ctx, tenant, micro, note)
		return e, err
	})
	var nt *host.NoTenantError
	if errors.As(err, &nt) {
		return e, 0, usageError{Err: nt}
	}
	return e, bal, err
}

// tenant is the tenant of the local secret commands: --tenant, else the
// local tenant's.
func (f *SecretStoreFlags) tenant() string {
	if f.Tenant == "" {
		return event.LocalTenant
	}
	return f.Tenant
}

func (b *localBackend) setSecret(ctx context.Context, f *SecretStoreFlags, name string, value []byte, hosts []string) ([]string, error) {
	return do(b, func(h *host.Host) ([]string, error) { return h.SetSecret(ctx, f.tenant(), name, value, hosts) })
}

func (b *localBackend) listSecrets(ctx context.Context, f *SecretStoreFlags) ([]api.Secret, error) {
	return do(b, func(h *host.Host) ([]api.Secret, error) { return h.SecretsOf(ctx, f.tenant()) })
}

func (b *localBackend) deleteSecret(ctx context.Context, f *SecretStoreFlags, name string) error {
	_, err := do(b, func(h *host.Host) (struct{}, error) { return struct{}{}, h.DeleteSecret(ctx, f.tenant(), name) })
	return err
}

// checkPolicy loads the document as policy check does: this host takes
// any valid one; a bad one has its problems printed, one per line, and
// gives exit status 2.
func (b *localBackend) checkPolicy(_ context.Context, file string) ([]byte, string, error) {
	d, err := loadPolicy(b.env, file)
	if err != nil {
		return nil, "", err
	}
	return d.Canonical(), d.Hash(), nil
}

// notRemote is the error of a command a server cannot do (exit 2).
func notRemote(what, why string) error {
	return usageError{Err: fmt.Errorf("%s is not available against a server (AIRLOCK_URL is set): %s", what, why)}
}
