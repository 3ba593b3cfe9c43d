package cli

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
)

// backend is where the runs, approvals, policies and credits of the run
// commands (runs, run, approvals, approve, deny, policy, credits, secrets)
// live: this host's store and engine (localBackend), or an airlock serve
// API (remoteBackend) when AIRLOCK_URL and AIRLOCK_API_KEY are set. The
// commands print what it returns, so both give the same output.
//
// Errors are the commands' own: usageError (exit 2), reportedError, or
// other (125). Runs are store.Run and outcomes engine.Outcome whichever
// the backend.
type backend interface {
	// listRuns returns up to limit runs (store.PageLimit), the newest
	// first; statuses, when not empty, keeps only runs in one of them,
	// and metadata only runs whose metadata has each of its pairs.
	listRuns(ctx context.Context, statuses []event.Status, metadata map[string]string, limit int) ([]store.Run, error)
	// run finds the run arg names: a full id, or a unique part of one;
	// none is a usage error `no run "ARG"`.
	run(ctx context.Context, arg string) (store.Run, error)
	// outcome reports how run r stands.
	outcome(ctx context.Context, r store.Run) (engine.Outcome, error)
	// events returns a page of run id's events from seq from on; an empty
	// page is the end of the log.
	events(ctx context.Context, id string, from int64) ([]event.Event, error)
	// verify checks run r's hash chain and returns how many events it
	// checked and the last one's hash, or why the chain does not verify
	// (broken); err is a failure to check it at all.
	verify(ctx context.Context, r store.Run) (n int64, last string, broken, err error)
	// stop cancels or pauses run id.
	stop(ctx context.Context, id string, pause bool, reason string) error

	// create records the run c asks for and returns its id.
	create(ctx context.Context, c *AgentRunCmd) (string, error)
	// fork creates the fork c asks for and returns its id.
	fork(ctx context.Context, c *RunsForkCmd) (string, error)
	// unfinished lists the runs `airlock runs resume` with no argument
	// resumes.
	unfinished(ctx context.Context) ([]string, error)
	// drive drives run id (resume: a stopped one) in the foreground,
	// printing its timeline to the one the backend was opened with; it
	// writes the artifacts to out and maps the final status to the exit
	// status. It is safe to call for several runs at once.
	drive(id, out string, resume bool) error

	// approvals lists pending approvals (of tenant's runs when not empty).
	approvals(ctx context.Context, tenant string) ([]engine.Approval, error)
	// decide approves or denies approval id and returns who decided.
	decide(ctx context.Context, id, tenant string, approve bool, text string) (string, error)

	// putPolicy stores doc (read from file) as the next version of
	// policy name: the version, and whether it is new.
	putPolicy(ctx context.Context, name, file string, doc []byte) (store.PolicyVersion, bool, error)
	// policyVersions lists name's versions, newest first (store.ErrNotFound
	// for no such policy).
	policyVersions(ctx context.Context, name string) ([]store.PolicyVersion, error)
	// policy reads the stored version ref names, with its document.
	policy(ctx context.Context, ref string) (store.PolicyVersion, error)
	// checkPolicy checks the policy document in file as this backend
	// would store or run under it and returns it resolved, with its hash; a
	// document it would not take is an error saying why.
	checkPolicy(ctx context.Context, file string) (canonical []byte, hash string, err error)
	// policies lists the stored policies at their latest versions.
	policies(ctx context.Context) ([]store.PolicyVersion, error)

	// credits returns tenant's balance and whole ledger, oldest first.
	credits(ctx context.Context, tenant string) (int64, []store.LedgerEntry, error)
	// grant adds credits to tenant's ledger; the entry and the balance.
	grant(ctx context.Context, tenant string, micro int64, note string) (store.LedgerEntry, int64, error)
	// setSecret stores v as the secret name of the tenant f names (the
	// default's, or the API key's, when empty), bound to hosts
	// (normalized); it returns the hosts the secret is bound to.
	setSecret(ctx context.Context, f *SecretStoreFlags, name string, v secret.Value, hosts []string) ([]string, error)
	// listSecrets describes the tenant's secrets, sorted by name.
	listSecrets(ctx context.Context, f *SecretStoreFlags) ([]secret.Info, error)
	// deleteSecret deletes the tenant's secret name (secret.ErrNotFound
	// when there is none).
	deleteSecret(ctx context.Context, f *SecretStoreFlags, name string) error
	// localHost returns this host's engine for what only it can do (what
	// names the command); the remote backend refuses.
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

// localBackend is this host's store and engine. The host opens on first
// use, so that a command's usage errors come before any store or sandbox
// error.
type localBackend struct {
	env    *Env
	o      hostOptions
	gcOnce sync.Once

	mu sync.Mutex
	// h is the host, once opened (guarded by mu).
	h *local
	// pst is the store of the policy commands, which need no engine
	// (guarded by mu).
	pst store.Store
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

func (b *localBackend) policyStore() (store.Store, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pst == nil {
		st, err := openPolicyStore(b.env)
		if err != nil {
			return nil, err
		}
		b.pst = st
	}
	return b.pst, nil
}

func (b *localBackend) close() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.h != nil {
		b.h.close()
	}
	if b.pst != nil {
		b.pst.Close()
	}
}

func (b *localBackend) localHost(string) (*local, error) { return b.host() }

func (b *localBackend) listRuns(ctx context.Context, statuses []event.Status, metadata map[string]string, limit int) ([]store.Run, error) {
	h, err := b.host()
	if err != nil {
		return nil, err
	}
	return h.store.ListRuns(ctx, store.RunFilter{Limit: limit, Desc: true, Statuses: statuses, Metadata: metadata})
}

func (b *localBackend) run(ctx context.Context, arg string) (store.Run, error) {
	h, err := b.host()
	if err != nil {
		return store.Run{}, err
	}
	return h.resolve(ctx, arg)
}

func (b *localBackend) outcome(ctx context.Context, r store.Run) (engine.Outcome, error) {
	h, err := b.host()
	if err != nil {
		return engine.Outcome{}, err
	}
	return h.eng.Outcome(ctx, r.ID)
}

func (b *localBackend) events(ctx context.Context, id string, from int64) ([]event.Event, error) {
	h, err := b.host()
	if err != nil {
		return nil, err
	}
	return h.store.Events(ctx, id, from, store.MaxPage)
}

// verify counts any error of reading the log as the chain not verifying.
func (b *localBackend) verify(ctx context.Context, r store.Run) (int64, string, error, error) {
	h, err := b.host()
	if err != nil {
		return 0, "", nil, err
	}
	n, broken := store.VerifyRun(ctx, h.store, r.ID)
	return n, r.LastHash.String(), broken, nil
}

// stop cancels or pauses, then waits (up to a minute) for a driving
// process to let go.
func (b *localBackend) stop(ctx context.Context, id string, pause bool, reason string) error {
	h, err := b.host()
	if err != nil {
		return err
	}
	if pause {
		err = h.eng.Pause(ctx, id, reason)
	} else {
		err = h.eng.Cancel(ctx, id, "user", reason)
	}
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for h.eng.Driven(id) && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

func (b *localBackend) create(ctx context.Context, c *AgentRunCmd) (string, error) {
	req, err := c.request(b.env)
	if err != nil {
		return "", usageError{Err: err}
	}
	h, err := b.host()
	if err != nil {
		return "", err
	}
	if len(req.Script) == 0 {
		if err := hostError(h.h.CheckModel(req.Config.Model, req.Config.BaseURL)); err != nil {
			return "", err
		}
	}
	r, err := h.eng.Create(ctx, req)
	if err != nil {
		return "", err
	}
	return r.ID, nil
}

func (b *localBackend) fork(ctx context.Context, c *RunsForkCmd) (string, error) {
	o, pol, err := c.options()
	if err != nil {
		return "", err
	}
	h, err := b.host()
	if err != nil {
		return "", err
	}
	if o.Model != "" && len(o.Script) == 0 {
		if err := hostError(h.h.CheckModel(o.Model, o.BaseURL)); err != nil {
			return "", err
		}
	}
	parent, err := h.resolve(ctx, c.ID)
	if err != nil {
		return "", err
	}
	// The parent's tenant owns the child, and so the policy it names or
	// records. (Fork has no PolicyName: the version is recorded here.)
	switch {
	case pol.ref != "":
		if pol, err = pol.loadStored(ctx, h.store, parent.Tenant); err != nil {
			return "", err
		}
		o.Policy, o.PolicySource, o.PolicyVersion = pol.doc, pol.source, pol.version
	case pol.name != "":
		v, _, err := h.store.PutPolicy(ctx, store.PolicyVersion{Tenant: parent.Tenant, Name: pol.name, Document: pol.doc,
			PolicyHash: pol.parsed.Hash(), Source: pol.source, By: whoami(b.env)})
		if err != nil {
			return "", err
		}
		o.PolicyVersion = fmt.Sprintf("%s@v%d", v.Name, v.Version)
	}
	child, err := h.eng.Fork(ctx, parent.ID, c.At, o)
	if err != nil {
		return "", err
	}
	return child.ID, nil
}

func (b *localBackend) unfinished(ctx context.Context) ([]string, error) {
	h, err := b.host()
	if err != nil {
		return nil, err
	}
	runs, err := store.Unfinished(ctx, h.store)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, r := range runs {
		if !h.eng.Driven(r.ID) {
			ids = append(ids, r.ID)
		}
	}
	return ids, nil
}

func (b *localBackend) drive(id, out string, resume bool) error {
	h, err := b.host()
	if err != nil {
		return err
	}
	b.gcOnce.Do(func() { go b.env.GC() })
	return h.foreground(id, out, func(ctx context.Context) (engine.Outcome, error) {
		if resume {
			return h.eng.Resume(ctx, id)
		}
		return h.eng.Drive(ctx, id)
	})
}

func (b *localBackend) approvals(ctx context.Context, tenant string) ([]engine.Approval, error) {
	h, err := b.host()
	if err != nil {
		return nil, err
	}
	return h.eng.Approvals(ctx, tenant)
}

func (b *localBackend) decide(ctx context.Context, id, tenant string, approve bool, text string) (string, error) {
	h, err := b.host()
	if err != nil {
		return "", err
	}
	by := whoami(b.env)
	if err := h.mayDecide(b.env, id); err != nil {
		return "", err
	}
	if err := h.eng.Decide(ctx, id, tenant, by, approve, text); err != nil {
		return "", err
	}
	return by, nil
}

func (b *localBackend) putPolicy(ctx context.Context, name, file string, doc []byte) (store.PolicyVersion, bool, error) {
	st, err := b.policyStore()
	if err != nil {
		return store.PolicyVersion{}, false, err
	}
	hash, err := policy.HashOf(doc)
	if err != nil {
		return store.PolicyVersion{}, false, usageError{Err: fmt.Errorf("%s: %w", file, err)}
	}
	v, created, err := st.PutPolicy(ctx, store.PolicyVersion{Tenant: event.LocalTenant, Name: name, Document: doc, PolicyHash: hash, Source: file, By: whoami(b.env)})
	if errors.Is(err, store.ErrInvalid) {
		return v, false, usageError{Err: err}
	}
	return v, created, err
}

func (b *localBackend) policyVersions(ctx context.Context, name string) ([]store.PolicyVersion, error) {
	st, err := b.policyStore()
	if err != nil {
		return nil, err
	}
	vs, err := st.PolicyVersions(ctx, event.LocalTenant, name)
	fillPolicyHashes(ctx, st, event.LocalTenant, vs)
	return vs, err
}

func (b *localBackend) policy(ctx context.Context, ref string) (store.PolicyVersion, error) {
	st, err := b.policyStore()
	if err != nil {
		return store.PolicyVersion{}, err
	}
	v, err := getPolicy(ctx, st, event.LocalTenant, ref)
	if err == nil {
		vs := []store.PolicyVersion{v}
		fillPolicyHashes(ctx, st, event.LocalTenant, vs)
		v = vs[0]
	}
	return v, err
}

func (b *localBackend) policies(ctx context.Context) ([]store.PolicyVersion, error) {
	st, err := b.policyStore()
	if err != nil {
		return nil, err
	}
	vs, err := st.ListPolicies(ctx, event.LocalTenant)
	fillPolicyHashes(ctx, st, event.LocalTenant, vs)
	return vs, err
}

func (b *localBackend) credits(ctx context.Context, tenant string) (int64, []store.LedgerEntry, error) {
	h, err := b.host()
	if err != nil {
		return 0, nil, err
	}
	bal, err := h.store.Balance(ctx, tenant)
	if err != nil {
		return 0, nil, err
	}
	var all []store.LedgerEntry
	for after := int64(0); ; {
		page, err := h.store.LedgerEntries(ctx, tenant, after, store.MaxPage)
		if err != nil {
			return 0, nil, err
		}
		all = append(all, page...)
		if len(page) < store.MaxPage {
			return bal, all, nil
		}
		after = page[len(page)-1].ID
	}
}

func (b *localBackend) grant(ctx context.Context, tenant string, micro int64, note string) (store.LedgerEntry, int64, error) {
	h, err := b.host()
	if err != nil {
		return store.LedgerEntry{}, 0, err
	}
	if err := knownTenant(ctx, h.store, tenant); err != nil {
		return store.LedgerEntry{}, 0, err
	}
	e, err := h.store.AddLedgerEntry(ctx, store.LedgerEntry{Tenant: tenant, Kind: store.LedgerGrant, Amount: micro, Note: note})
	if err != nil {
		if errors.Is(err, store.ErrInvalid) {
			return e, 0, usageError{Err: err}
		}
		return e, 0, err
	}
	bal, err := h.store.Balance(ctx, tenant)
	return e, bal, err
}

// knownTenant refuses, as bad input, a tenant that does not exist: the
// local tenant always does, any other once airlock tenants create made it.
// Without it a typo would open a ledger that no run or key ever uses.
func knownTenant(ctx context.Context, st store.Store, name string) error {
	if name == event.LocalTenant {
		return nil
	}
	if store.ValidateTenantName(name) != nil {
		return tenantNameError(name)
	}
	_, err := st.GetTenant(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return noTenantError(name)
	}
	return err
}

// tenant is the tenant of the local secret commands: --tenant, else the
// local tenant's.
func (f *SecretStoreFlags) tenant() string {
	if f.Tenant == "" {
		return event.LocalTenant
	}
	return f.Tenant
}

func (b *localBackend) setSecret(ctx context.Context, f *SecretStoreFlags, name string, v secret.Value, hosts []string) ([]string, error) {
	st, err := f.open(b.env)
	if err != nil {
		return nil, err
	}
	if err := st.Set(ctx, f.tenant(), name, v, hosts); err != nil {
		return nil, err
	}
	return secret.NormalizeHosts(hosts)
}

func (b *localBackend) listSecrets(ctx context.Context, f *SecretStoreFlags) ([]secret.Info, error) {
	st, err := f.open(b.env)
	if err != nil {
		return nil, err
	}
	return st.List(ctx, f.tenant())
}

func (b *localBackend) deleteSecret(ctx context.Context, f *SecretStoreFlags, name string) error {
	st, err := f.open(b.env)
	if err != nil {
		return err
	}
	return st.Delete(ctx, f.tenant(), name)
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
