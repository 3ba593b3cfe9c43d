package cli

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/egress"
	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/postgres"
	"github.com/airlockrun/airlock/internal/store/sqlite"
	"github.com/airlockrun/airlock/internal/telemetry"
)

// host is the run engine on the local store, as the run commands use it.
type host struct {
	env   *Env
	store store.Store
	blobs *blob.Store
	eng   *engine.Engine
	red   *secret.Redactor
	llm   *llmHub

	mu       sync.Mutex
	policies map[string]*policy.Document // by the hash of the run's policy bytes
}

// openStore opens the run store: the SQLite file under $AIRLOCK_HOME, or
// the PostgreSQL database of a postgres:// URL (--store, AIRLOCK_STORE).
func openStore(env *Env, red store.Redactor) (store.Store, error) {
	u := env.Store
	switch {
	case u == "" || u == "sqlite":
		return sqlite.Open(env.Ctx, filepath.Join(env.Home, "airlock.db"), sqlite.Options{Redactor: red})
	case strings.HasPrefix(u, "postgres://"), strings.HasPrefix(u, "postgresql://"):
		return postgres.Open(env.Ctx, u, postgres.Options{Redactor: red})
	case strings.HasPrefix(u, "sqlite:"):
		return sqlite.Open(env.Ctx, strings.TrimPrefix(u, "sqlite:"), sqlite.Options{Redactor: red})
	}
	return nil, usageError{Err: fmt.Errorf("--store %q: want sqlite, sqlite:PATH or a postgres:// URL", redactURL(u))}
}

// redactURL drops a URL's password for messages.
func redactURL(u string) string {
	if p, err := url.Parse(u); err == nil && p.User != nil {
		if _, ok := p.User.Password(); ok {
			p.User = url.UserPassword(p.User.Username(), "xxxxx")
			return p.String()
		}
	}
	return u
}

// hostOptions tune openHost.
type hostOptions struct {
	// timeline receives the run's events and progress; nil prints nothing.
	timeline *timeline
	// keyFile is the secret store's key file for policy credentials.
	keyFile string
	// readOnly opens no sandbox backend.
	readOnly bool
	// onEvents, when not nil, sees every batch of events the engine appends (after
	// the timeline).
	onEvents func([]event.Event)
	// wrapStore, when not nil, wraps the store every component uses
	// (serve's telemetry times each call).
	wrapStore func(store.Store) store.Store
	// red, when not nil, is the host's redactor, shared with sinks the
	// caller made before the host (serve's log and telemetry).
	red *secret.Redactor
}

// openHost opens the store under $AIRLOCK_HOME and builds an engine on it.
func openHost(env *Env, o hostOptions) (*host, error) {
	if env.Home == "" {
		return nil, errors.New("no airlock home directory")
	}
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		return nil, err
	}
	h := &host{env: env, red: o.red}
	if h.red == nil {
		h.red = secret.NewRedactor()
	}
	for _, k := range []string{"ANTHROPIC_API_KEY", "OPENAI_API_KEY"} {
		if v := env.getenv(k); v != "" {
			h.red.Add(secret.NewValue([]byte(v)))
		}
	}
	var err error
	if h.store, err = openStore(env, h.red); err != nil {
		return nil, err
	}
	// On PostgreSQL the blobs live in the database too, so that every
	// process on it (airlock serve replicas, workers) reads the uploads,
	// snapshots and artifacts any of them stored.
	var blobs blob.Options
	if pg, ok := h.store.(*postgres.Store); ok {
		blobs.Backend = pg.Blobs()
	}
	if o.wrapStore != nil {
		h.store = o.wrapStore(h.store)
	}
	if h.blobs, err = blob.New(filepath.Join(env.Home, "blobs"), blobs); err != nil {
		h.store.Close()
		return nil, err
	}
	h.llm = &llmHub{env: env, keyFile: o.keyFile, store: h.store, red: h.red}
	opts := engine.Options{Store: h.store, Blobs: h.blobs, LockDir: filepath.Join(env.Home, "runs", "locks"),
		NewProvider: h.provider, Network: &runNetwork{env: env, keyFile: o.keyFile, red: h.red, llm: h.llm}}
	if o.timeline != nil {
		opts.OnEvents, opts.OnProgress = engine.EachEvent(o.timeline.event), o.timeline.progress
	}
	if on, tl := o.onEvents, opts.OnEvents; on != nil {
		opts.OnEvents = func(evs []event.Event) {
			if tl != nil {
				tl(evs)
			}
			on(evs)
		}
	}
	opts.Policy = h.decideTool
	if opts.Prices, err = loadPrices(env.Home); err != nil {
		h.store.Close()
		return nil, err
	}
	h.llm.prices = opts.Prices
	if o.readOnly {
		opts.Backend = noBackend{}
	} else {
		b, err := env.sandboxes(telemetry.OriginRun)
		if err != nil {
			h.store.Close()
			return nil, err
		}
		opts.Backend = b
	}
	if h.eng, err = engine.New(opts); err != nil {
		h.store.Close()
		return nil, err
	}
	return h, nil
}

func (h *host) close() {
	h.llm.close()
	h.store.Close()
}

// decideTool is the engine's policy hook: the run's policy document (the
// built-in strict default when it has none) decides each tool call.
func (h *host) decideTool(_ context.Context, q engine.PolicyQuery) event.PolicyDecision {
	doc, err := h.policyOf(q.Run)
	if err != nil {
		return event.PolicyDecision{Decision: event.DecisionDeny, Rule: "policy", Reason: "the run's policy does not load: " + err.Error()}
	}
	return engine.DecideTool(doc, q)
}

// policyOf parses a run's policy once.
func (h *host) policyOf(r store.Run) (*policy.Document, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.policies == nil {
		h.policies = map[string]*policy.Document{}
	}
	if d, ok := h.policies[r.PolicyHash]; ok {
		return d, nil
	}
	d := policy.Default()
	if len(r.Policy) > 0 {
		var err error
		if d, err = policy.Parse(r.Policy); err != nil {
			return nil, err
		}
	}
	h.policies[r.PolicyHash] = d
	return d, nil
}

// provider builds a real model provider with its key from the environment
// or the secret store.
func (h *host) provider(ps engine.ProviderSpec) (model.Provider, error) {
	spec := ps.Model
	kind, _, _ := strings.Cut(spec, ":")
	var keyVar, secretName string
	switch kind {
	case "anthropic":
		keyVar, secretName = "ANTHROPIC_API_KEY", "anthropic-api-key"
	case "openai", "openai-responses":
		keyVar, secretName = "OPENAI_API_KEY", "openai-api-key"
	case "openai-compatible":
		keyVar, secretName = "OPENAI_API_KEY", "openai-compatible-api-key"
	}
	o := model.Options{BaseURL: ps.BaseURL, Retry: model.RetryPolicy{MaxAttempts: ps.Attempts}}
	if v := h.env.getenv(keyVar); keyVar != "" && v != "" {
		o.Key = secret.NewValue([]byte(v))
	} else if secretName != "" {
		if st, err := openSecretStore(h.env, ""); err == nil {
			if v, _, err := st.Get(h.env.Ctx, event.LocalTenant, secretName); err == nil {
				o.Key = v
				h.red.Add(v)
			}
		}
	}
	p, err := model.New(spec, o)
	if err != nil && keyVar != "" && o.Key.Len() == 0 && kind != "openai-compatible" {
		return nil, fmt.Errorf("%w (set %s or `airlock secrets set %s`)", err, keyVar, secretName)
	}
	return p, err
}

// checkModel builds the provider a run on model spec would get, so that an
// unknown spec, a bad base URL or a missing key is refused as bad input
// (exit 2) before the run is recorded, not recorded as a run that failed.
func (h *host) checkModel(spec, baseURL string) error {
	if _, err := h.provider(engine.ProviderSpec{Model: spec, BaseURL: baseURL}); err != nil {
		return usageError{Err: err}
	}
	return nil
}

// runNetwork gives each run sandbox an egress proxy under the run's policy
// (none when the policy allows nothing: no route at all then), and records
// the proxy's decisions in the run's log.
type runNetwork struct {
	env     *Env
	keyFile string
	// red is the run store's redactor: the values of the credentials the
	// proxy injects are scrubbed from every event too, should a response
	// ever echo one past the proxy's own scrubbing.
	red *secret.Redactor
	// llm serves the sandboxes of runs whose policy enables the gateway.
	llm *llmHub
}

func (n *runNetwork) Attach(ctx context.Context, a sandbox.Attachment) (func(), error) {
	if len(a.Policy) == 0 {
		return func() {}, nil
	}
	doc, err := policy.Parse(a.Policy)
	if err != nil {
		return nil, err
	}
	if len(doc.Network.Allow) == 0 && len(doc.Network.Credentials) == 0 && doc.Network.Default != policy.Ask && !doc.LLM.Enabled {
		return func() {}, nil
	}
	if len(doc.Network.Credentials) > 0 {
		st, err := openSecretStore(n.env, n.keyFile)
		if err != nil {
			return nil, err
		}
		for _, c := range doc.Network.Credentials {
			if v, _, err := st.Get(ctx, a.Tenant, c.Secret); err == nil {
				n.red.Add(v)
			}
		}
	}
	o := egressOptions{runID: a.RunID, tenant: a.Tenant,
		extra: auditFunc(func(r egress.Record) {
			host := r.Host
			if r.Local {
				host = "(local) " + r.Path
			}
			a.Audit(event.EgressDecision{Decision: r.Decision, Reason: r.Reason, Rule: r.Rule, Method: r.Method, Host: host, Port: r.Port,
				Addr: r.Addr, Status: r.Status, BytesIn: r.BytesIn, BytesOut: r.BytesOut, DurationMS: r.Duration.Milliseconds(),
				Inspected: r.Inspected, Credential: r.Credential})
		}),
		ask: approverFunc(func(ctx context.Context, _ bridge.Identity, r policy.Request) (bool, error) {
			return a.Ask(ctx, r.Host, r.Port)
		}),
	}
	endLLM := func() {}
	if doc.LLM.Enabled {
		gw, end, err := n.llm.attach(a, &doc.LLM)
		if err != nil {
			return nil, err
		}
		o.local, endLLM = gw, end
	}
	eg, err := startEgress(ctx, n.env, a.Spec.ID, &doc.Network, &EgressFlags{KeyFile: n.keyFile}, o)
	if err != nil {
		endLLM()
		return nil, err
	}
	eg.apply(a.Spec)
	return func() {
		eg.close(nil)
		endLLM()
	}, nil
}

type approverFunc func(context.Context, bridge.Identity, policy.Request) (bool, error)

func (f approverFunc) Ask(ctx context.Context, id bridge.Identity, r policy.Request) (bool, error) {
	return f(ctx, id, r)
}

type auditFunc func(egress.Record)

func (f auditFunc) Record(r egress.Record) { f(r) }

// noBackend refuses to create sandboxes: the read-only run commands.
type noBackend struct{}

func (noBackend) Create(context.Context, sandbox.Spec) (sandbox.Sandbox, error) {
	return nil, errors.New("no sandbox backend in a read-only command")
}

// resolve finds a run id argument: a full id, or a unique suffix or
// prefix of one.
func (h *host) resolve(ctx context.Context, id string) (store.Run, error) {
	r, err := h.store.GetRun(ctx, id)
	if err == nil || !errors.Is(err, store.ErrNotFound) {
		return r, err
	}
	if len(id) < 4 {
		return r, usageError{Err: fmt.Errorf("no run %q", id)}
	}
	var match []store.Run
	f := store.RunFilter{}
	for {
		page, err := h.store.ListRuns(ctx, f)
		if err != nil {
			return r, err
		}
		for _, x := range page {
			if strings.HasPrefix(x.ID, id) || strings.HasSuffix(x.ID, id) || strings.HasPrefix(x.ID, event.RunIDPrefix+id) {
				match = append(match, x)
			}
		}
		if len(page) < store.PageLimit(0) {
			break
		}
		f.After = page[len(page)-1].ID
	}
	switch len(match) {
	case 1:
		return match[0], nil
	case 0:
		return r, usageError{Err: fmt.Errorf("no run %q", id)}
	}
	return r, usageError{Err: fmt.Errorf("%q names %d runs; give more of the id", id, len(match))}
}
