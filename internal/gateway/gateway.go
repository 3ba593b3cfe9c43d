package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/gateway/wire"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/price"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/secret/token"
)

// Upstream kinds: the wire format an upstream speaks.
const (
	// KindOpenAI is the OpenAI API (Chat Completions, Responses,
	// Embeddings, Models), as OpenAI and compatible servers (vLLM,
	// Ollama, llama.cpp, LiteLLM...) serve it.
	KindOpenAI = wire.KindOpenAI
	// KindAnthropic is the Anthropic Messages API.
	KindAnthropic = wire.KindAnthropic
)

// Purpose is the purpose of the run tokens the gateway accepts.
const Purpose = "llm"

// Verifier checks a run token presented over a sandbox's socket.
// *token.Store satisfies it.
type Verifier interface {
	Verify(tok string, on token.Scope) (token.Scope, error)
}

// Upstream is a model provider the gateway forwards to.
type Upstream struct {
	// Kind is KindOpenAI or KindAnthropic.
	Kind string
	// BaseURL is where the API lives, as its SDK's base URL says it: for
	// KindOpenAI with the version ("https://api.openai.com/v1",
	// "http://127.0.0.1:11434/v1"), for KindAnthropic without
	// ("https://api.anthropic.com").
	BaseURL string
	// Key returns the provider key, fetched for every call so that a
	// rotation takes effect at once. nil sends no key (a local server).
	Key func(ctx context.Context) (secret.Value, error)
	// Header holds extra headers for every request to this upstream
	// (OpenAI-Organization, say); they replace what the sandbox sent.
	Header http.Header
}

// Call is what Config.Record gets for one call.
type Call struct {
	// Event is the llm.call event to append to the run's log.
	Event event.LLMCall
	// Exhausted is set when the call found (or ran) one of the gateway's
	// budgets spent: the host should write it as the run's
	// budget.exhausted event (once per budget is enough).
	Exhausted *event.BudgetExhausted
}

// Config configures a Gateway.
type Config struct {
	// Tokens verifies run tokens (required).
	Tokens Verifier
	// Upstreams by name (required, at least one): the name is the path
	// segment the sandbox addresses (/llm/NAME/...) and the UPSTREAM of
	// the policy's map ("openai", "anthropic", "local"). Names are
	// lowercase letters, digits, _ and -.
	Upstreams map[string]Upstream
	// Policy returns the llm section of the run's policy (required); nil
	// or not Enabled refuses every call of the run.
	Policy func(ctx context.Context, id bridge.Identity) (*policy.LLM, error)
	// Prices prices usage, by "UPSTREAM:MODEL" (see price.Table.Lookup).
	// A model without a price costs nothing, unless the tenant is
	// metered or the run has a credit budget: then it is refused (the
	// rule of package credit).
	Prices price.Table
	// Ledger holds the tenants' credits. A tenant whose ledger has an
	// entry is metered: a call is refused once its balance is spent, and
	// each call is debited, linked to its llm.call event. nil meters no
	// one.
	Ledger credit.Ledger
	// Meter counts the credits; nil is a meter of Ledger and Prices of
	// the gateway's own (see engine.Options.Meter).
	Meter *credit.Meter
	// Record appends the call's event to the run's log and returns its
	// seq, which the debit names (required). It runs after the answer
	// went to the sandbox, in the background (Close waits for it), with a
	// context that outlives the request; it must be safe for concurrent
	// use.
	Record func(ctx context.Context, id bridge.Identity, c Call) (seq int64, err error)
	// Spent returns what the run's gateway calls used before this
	// Gateway saw the run (from its llm.call events, after a restart), so
	// that budgets go on where they were. It is called once per run; nil
	// starts every run at zero.
	Spent func(ctx context.Context, id bridge.Identity) (Totals, error)
	// Redactor scrubs the bodies the policy asks to log; every upstream
	// key is added to it. nil means a private Redactor.
	Redactor *secret.Redactor
	// Now reads the clock (rate limits, latencies); nil means time.Now.
	Now func() time.Time
	// Transport sends requests upstream; nil means a private
	// http.Transport. It must not follow redirects or use a proxy from
	// the environment.
	Transport http.RoundTripper
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
	// MaxRequestBytes bounds a request body (default 32 MiB);
	// MaxResponseBytes an answer that is not streamed (default 64 MiB).
	MaxRequestBytes, MaxResponseBytes int64
}

// Defaults of Config.
const (
	defaultMaxRequest  = 32 << 20
	defaultMaxResponse = 64 << 20
	// maxEvent bounds one event of an upstream stream.
	maxEvent = 8 << 20
	// maxErrorBody bounds an upstream error answer passed on.
	maxErrorBody = 1 << 20
	// maxLogBody bounds each body kept in an llm.call event.
	maxLogBody = 64 << 10
	// recordTimeout bounds recording and debiting a call.
	recordTimeout = 30 * time.Second
	// maxUnaskedCap is the largest output bound the gateway adds to a
	// request that gave none: a larger one could be refused by a model
	// whose own limit is smaller, and the stream meter still holds the
	// budget.
	maxUnaskedCap = 4096
)

// Gateway serves the LLM endpoints. Create it with New; it is an
// http.Handler for egress.Config.Local and is safe for concurrent use.
type Gateway struct {
	cfg       Config
	ups       map[string]*upstream
	red       *secret.Redactor
	now       func() time.Time
	log       *slog.Logger
	transport http.RoundTripper
	own       *http.Transport // the private transport, closed by Close

	// meter counts the tenants' credits (Config.Ledger, Config.Prices).
	meter *credit.Meter

	mu sync.Mutex
	// runs and closed are guarded by mu.
	runs   map[runKey]*runState
	closed bool
	// pending counts the calls being recorded in the background.
	pending sync.WaitGroup

	keysMu sync.Mutex
	// keys is guarded by keysMu: hashes of the keys given to the
	// redactor, so that each is added once.
	keys map[[sha256.Size]byte]bool
}

// upstream is a checked Upstream.
type upstream struct {
	name, kind string
	base       string // BaseURL without a trailing slash
	key        func(ctx context.Context) (secret.Value, error)
	header     http.Header
}

// New checks cfg and builds a Gateway. It starts no goroutine.
func New(cfg Config) (*Gateway, error) {
	var errs []error
	if cfg.Tokens == nil {
		errs = append(errs, errors.New("gateway: config: Tokens is required"))
	}
	if cfg.Policy == nil {
		errs = append(errs, errors.New("gateway: config: Policy is required"))
	}
	if cfg.Record == nil {
		errs = append(errs, errors.New("gateway: config: Record is required"))
	}
	if len(cfg.Upstreams) == 0 {
		errs = append(errs, errors.New("gateway: config: at least one upstream is required"))
	}
	if err := cfg.Prices.Validate(); err != nil {
		errs = append(errs, fmt.Errorf("gateway: config: prices: %w", err))
	}
	if cfg.MaxRequestBytes < 0 || cfg.MaxResponseBytes < 0 {
		errs = append(errs, errors.New("gateway: config: body limits must not be negative"))
	}
	g := &Gateway{
		cfg: cfg, ups: map[string]*upstream{}, red: cfg.Redactor, now: cfg.Now, log: cfg.Logger,
		transport: cfg.Transport, meter: meterOf(cfg), runs: map[runKey]*runState{}, keys: map[[sha256.Size]byte]bool{},
	}
	for _, name := range sortedKeys(cfg.Upstreams) {
		u := cfg.Upstreams[name]
		if !validName(name) {
			errs = append(errs, fmt.Errorf("gateway: config: upstream name %q: want lowercase letters, digits, _ and -", name))
			continue
		}
		if u.Kind != KindOpenAI && u.Kind != KindAnthropic {
			errs = append(errs, fmt.Errorf("gateway: config: upstream %s: kind %q is neither %s nor %s", name, u.Kind, KindOpenAI, KindAnthropic))
		}
		base, err := url.Parse(u.BaseURL)
		if err != nil || base.Scheme != "http" && base.Scheme != "https" || base.Host == "" || base.User != nil ||
			base.RawQuery != "" || base.Fragment != "" {
			// The URL is host configuration, but it could hold
			// credentials: name the upstream, not the URL.
			errs = append(errs, fmt.Errorf("gateway: config: upstream %s: base URL is not an http(s) URL without user, query or fragment", name))
			continue
		}
		g.ups[name] = &upstream{name: name, kind: u.Kind, base: strings.TrimSuffix(base.String(), "/"), key: u.Key, header: u.Header.Clone()}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if g.cfg.MaxRequestBytes == 0 {
		g.cfg.MaxRequestBytes = defaultMaxRequest
	}
	if g.cfg.MaxResponseBytes == 0 {
		g.cfg.MaxResponseBytes = defaultMaxResponse
	}
	if g.red == nil {
		g.red = secret.NewRedactor()
	}
	if g.now == nil {
		g.now = time.Now
	}
	if g.log == nil {
		g.log = slog.New(slog.DiscardHandler)
	}
	if g.transport == nil {
		g.own = &http.Transport{
			// Never a proxy from the environment: the host reaches
			// its upstreams directly.
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConns:          256,
			MaxIdleConnsPerHost:   64,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   15 * time.Second,
			ExpectContinueTimeout: time.Second,
		}
		g.transport = g.own
	}
	return g, nil
}

// Close waits until every finished call is recorded and debited, and
// drops the idle upstream connections of the private transport. Calls
// served after Close are recorded before their answer ends.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	g.mu.Unlock()
	g.pending.Wait()
	if g.own != nil {
		g.own.CloseIdleConnections()
	}
	return nil
}

// Totals returns what tenant's run has used through this Gateway so far
// (with Config.Spent's seed), calls in flight not counted.
func (g *Gateway) Totals(tenant, run string) Totals {
	g.mu.Lock()
	st := g.runs[runKey{tenant, run}]
	g.mu.Unlock()
	if st == nil {
		return Totals{}
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.done
}

// EndRun forgets tenant's run: call it when the run ends (with the
// token store's RevokeRun), so that the Gateway does not keep state for
// every run it ever served.
func (g *Gateway) EndRun(tenant, run string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	delete(g.runs, runKey{tenant, run})
}

func validName(s string) bool {
	if s == "" || len(s) > 64 || s[0] < 'a' || s[0] > 'z' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// ServeHTTP serves one call from a sandbox. See the package doc for what
// it checks, in which order.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := g.now()
	rest, ok := strings.CutPrefix(r.URL.Path, "/llm/")
	name, rest, _ := strings.Cut(rest, "/")
	up := g.ups[name]
	if !ok || up == nil {
		errNotFound.write(w, KindOpenAI)
		return
	}
	a, modelID, aerr := up.route(r.Method, "/"+rest)
	if aerr != nil {
		aerr.write(w, up.kind)
		return
	}
	id, ok := bridge.IdentityFrom(r.Context())
	if !ok {
		errNoIdentity.write(w, up.kind)
		return
	}
	log := g.log.With("tenant", id.Tenant, "run_id", id.Run, "sandbox_id", id.Sandbox)
	tok := bearer(r.Header)
	if _, err := g.cfg.Tokens.Verify(tok, token.Scope{Tenant: id.Tenant, Run: id.Run, Sandbox: id.Sandbox, Purpose: Purpose}); err != nil {
		// The reason (expired, sandbox_mismatch...) is for the log only:
		// telling the sandbox would say that the token exists elsewhere.
		log.Info("gateway token refused", "err", err.Error())
		errToken.write(w, up.kind)
		return
	}
	pol, err := g.cfg.Policy(r.Context(), id)
	if err != nil {
		log.Error("gateway policy lookup", "err", g.red.String(err.Error()))
		errInternal.write(w, up.kind)
		return
	}
	if pol == nil || !pol.Enabled {
		errDisabled.write(w, up.kind)
		return
	}
	if a == wire.OpenAIModels || a == wire.AnthropicModels {
		g.serveModels(w, up, pol, modelID)
		return
	}
	c := &call{
		g: g, id: id, log: log, start: start, api: a, entry: up, pol: pol, tok: tok,
		ev: event.LLMCall{Sandbox: id.Sandbox, API: a.String(), Upstream: up.name},
	}
	c.serve(w, r)
}

// route maps a method and path below /llm/NAME to an endpoint of the
// upstream's kind; modelID is the model a GET v1/models/ID names.
func (u *upstream) route(method, path string) (a wire.API, modelID string, e *apiError) {
	want := http.MethodPost
	switch {
	case path == "/v1/models" || strings.HasPrefix(path, "/v1/models/"):
		want = http.MethodGet
		modelID = strings.TrimPrefix(strings.TrimPrefix(path, "/v1/models"), "/")
		a = wire.OpenAIModels
		if u.kind == KindAnthropic {
			a = wire.AnthropicModels
		}
	case u.kind == KindOpenAI && path == "/v1/chat/completions":
		a = wire.Chat
	case u.kind == KindOpenAI && path == "/v1/responses":
		a = wire.Responses
	case u.kind == KindOpenAI && path == "/v1/embeddings":
		a = wire.Embeddings
	case u.kind == KindAnthropic && path == "/v1/messages":
		a = wire.Messages
	case u.kind == KindAnthropic && path == "/v1/messages/count_tokens":
		a = wire.CountTokens
	default:
		return 0, "", &errNotFound
	}
	if method != want {
		return 0, "", &errMethod
	}
	return a, modelID, nil
}

// upstreamURL is where a call of a goes on u: the SDK's path below its
// base URL, appended to u's base URL.
func (u *upstream) upstreamURL(a wire.API, rawQuery string) string {
	var p string
	switch a {
	case wire.Chat:
		p = "/chat/completions"
	case wire.Responses:
		p = "/responses"
	case wire.Embeddings:
		p = "/embeddings"
	case wire.Messages:
		p = "/v1/messages"
	case wire.CountTokens:
		p = "/v1/messages/count_tokens"
	}
	s := u.base + p
	if rawQuery != "" {
		s += "?" + rawQuery
	}
	return s
}

// models lists the models a sandbox can call through upstream u: every
// model the allowlist names literally or the map defines that resolves to
// an upstream of u's kind and is allowed there.
func (g *Gateway) models(u *upstream, pol *policy.LLM) []string {
	var cands []string
	for _, p := range pol.Models {
		if strings.ContainsAny(p, "*?") {
			continue
		}
		up, m, ok := strings.Cut(p, ":")
		switch {
		case !ok || g.ups[up] == nil:
			cands = append(cands, p)
		case up == u.name:
			// "UPSTREAM:MODEL": the sandbox asks for MODEL there.
			cands = append(cands, m)
		}
	}
	for k := range pol.Map {
		cands = append(cands, k)
	}
	var out []string
	for _, m := range cands {
		upName, model, _ := pol.Resolve(u.name, m)
		if to := g.ups[upName]; to != nil && to.kind == u.kind && wire.ValidModel(m) && pol.Allows(upName, model) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// serveModels answers GET v1/models (id empty) or v1/models/ID in u's
// format.
func (g *Gateway) serveModels(w http.ResponseWriter, u *upstream, pol *policy.LLM, id string) {
	ms := g.models(u, pol)
	type openaiModel struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Created int64  `json:"created"`
		OwnedBy string `json:"owned_by"`
	}
	type anthropicModel struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	one := func(m string) any {
		if u.kind == KindAnthropic {
			return anthropicModel{Type: "model", ID: m, DisplayName: m, CreatedAt: "1970-01-01T00:00:00Z"}
		}
		return openaiModel{ID: m, Object: "model", OwnedBy: "airlock"}
	}
	var v any
	switch {
	case id != "":
		if !slices.Contains(ms, id) {
			e := errNotFound
			e.code, e.msg = "model_not_found", "airlock gateway: no such model for this run"
			e.write(w, u.kind)
			return
		}
		v = one(id)
	case u.kind == KindAnthropic:
		data := make([]any, 0, len(ms))
		for _, m := range ms {
			data = append(data, one(m))
		}
		var firstID, lastID *string
		if len(ms) > 0 {
			firstID, lastID = &ms[0], &ms[len(ms)-1]
		}
		v = struct {
			Data    []any   `json:"data"`
			HasMore bool    `json:"has_more"`
			FirstID *string `json:"first_id"`
			LastID  *string `json:"last_id"`
		}{data, false, firstID, lastID}
	default:
		data := make([]any, 0, len(ms))
		for _, m := range ms {
			data = append(data, one(m))
		}
		v = struct {
			Object string `json:"object"`
			Data   []any  `json:"data"`
		}{"list", data}
	}
	b, err := json.Marshal(v)
	if err != nil {
		errInternal.write(w, u.kind)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	_, _ = w.Write(b)
}

// addKey gives a key to the redactor, once per distinct key.
func (g *Gateway) addKey(v secret.Value) {
	h := sha256.Sum256(v.Reveal())
	g.keysMu.Lock()
	defer g.keysMu.Unlock()
	if !g.keys[h] {
		g.keys[h] = true
		g.red.Add(v)
	}
}

// bearer returns the token the request presents: "Authorization: Bearer
// T" (the OpenAI SDKs) or "x-api-key: T" (the Anthropic SDKs).
func bearer(h interface{ Get(string) string }) string {
	if a := h.Get("Authorization"); a != "" {
		scheme, tok, ok := strings.Cut(strings.TrimSpace(a), " ")
		if ok && strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(tok)
		}
		return ""
	}
	return strings.TrimSpace(h.Get("X-Api-Key"))
}

// meterOf is cfg's Meter, or one of its own.
func meterOf(cfg Config) *credit.Meter {
	if cfg.Meter != nil {
		return cfg.Meter
	}
	return credit.New(cfg.Ledger, cfg.Prices)
}
