package host

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/gateway"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/secret"
	"github.com/airlockrun/airlock/internal/secret/token"
	"github.com/airlockrun/airlock/internal/store"
)

// The LLM gateway of a host process: one per process, built when the first
// sandbox of a run whose policy enables it is attached. A sandbox reaches it
// through its own egress proxy (the proxy serves /llm/... itself), holding
// only a run token bound to its tenant, run, sandbox and purpose; the host
// attaches the provider key.

// gatewayAddr is where a sandbox reaches the gateway: its proxy's address.
const gatewayAddr = "http://127.0.0.1:3128/llm/"

// llmHub holds the gateway and the runs it serves.
type llmHub struct {
	h *Host

	once   sync.Once
	gw     *gateway.Gateway
	tokens *token.Store
	err    error

	mu   sync.Mutex
	runs map[[2]string]*llmRun // by tenant and run
}

// llmRun is a run the gateway serves while any of its sandboxes lives.
type llmRun struct {
	sandboxes int
	llm       *policy.LLM
	log       func(ctx context.Context, ps ...event.Payload) (int64, error)
}

// llmUpstreams is $AIRLOCK_HOME/llm.yaml: the upstreams beside the two
// built-in ones (openai, anthropic), or replacing them.
type llmUpstreams struct {
	Upstreams map[string]struct {
		Kind    string `yaml:"kind"`
		BaseURL string `yaml:"base_url"`
		// KeyEnv names the host variable, KeySecret the secret-store
		// entry, holding the key; neither sends no key (a local server).
		KeyEnv    string `yaml:"key_env"`
		KeySecret string `yaml:"key_secret"`
	} `yaml:"upstreams"`
}

// gateway returns the process's gateway, building it on first use.
func (l *llmHub) gateway() (*gateway.Gateway, *token.Store, error) {
	l.once.Do(func() {
		rs, err := l.h.run()
		if err != nil {
			l.err = err
			return
		}
		ups, err := l.upstreams()
		if err != nil {
			l.err = err
			return
		}
		l.tokens = token.NewStore(nil)
		l.gw, l.err = gateway.New(gateway.Config{
			Tokens: l.tokens, Upstreams: ups, Prices: rs.prices, Ledger: rs.store, Meter: rs.meter, Redactor: l.h.red,
			Policy: func(_ context.Context, id bridge.Identity) (*policy.LLM, error) {
				if r := l.run(id.Tenant, id.Run); r != nil {
					return r.llm, nil
				}
				return nil, nil
			},
			Record: func(ctx context.Context, id bridge.Identity, c gateway.Call) (int64, error) {
				r := l.run(id.Tenant, id.Run)
				if r == nil {
					return 0, fmt.Errorf("run %s is not served here any more", id.Run)
				}
				ps := []event.Payload{c.Event}
				if c.Exhausted != nil {
					ps = append(ps, *c.Exhausted)
				}
				return r.log(ctx, ps...)
			},
			Spent: func(ctx context.Context, id bridge.Identity) (gateway.Totals, error) { return spent(ctx, rs.store, id) },
		})
	})
	return l.gw, l.tokens, l.err
}

func (l *llmHub) run(tenant, run string) *llmRun {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.runs[[2]string{tenant, run}]
}

// upstreams are openai and anthropic, their keys from the host's
// environment or secret store, and what llm.yaml adds.
func (l *llmHub) upstreams() (map[string]gateway.Upstream, error) {
	ups := map[string]gateway.Upstream{
		"openai":    {Kind: gateway.KindOpenAI, BaseURL: "https://api.openai.com/v1", Key: l.key("OPENAI_API_KEY", "openai-api-key")},
		"anthropic": {Kind: gateway.KindAnthropic, BaseURL: "https://api.anthropic.com", Key: l.key("ANTHROPIC_API_KEY", "anthropic-api-key")},
	}
	b, err := os.ReadFile(filepath.Join(l.h.cfg.Home, "llm.yaml"))
	if errors.Is(err, os.ErrNotExist) {
		return ups, nil
	}
	if err != nil {
		return nil, err
	}
	var f llmUpstreams
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("llm.yaml: %w", err)
	}
	for name, u := range f.Upstreams {
		up := gateway.Upstream{Kind: u.Kind, BaseURL: u.BaseURL}
		if u.KeyEnv != "" || u.KeySecret != "" {
			up.Key = l.key(u.KeyEnv, u.KeySecret)
		}
		ups[name] = up
	}
	return ups, nil
}

// key fetches a provider key for every call (a rotation applies at once):
// the host variable env, else the local tenant's secret name. The gateway
// gives each distinct key to the host's redactor (Config.Redactor).
func (l *llmHub) key(env, name string) func(context.Context) (secret.Value, error) {
	return func(ctx context.Context) (secret.Value, error) {
		v, err := l.h.modelKey(ctx, env, name)
		if err == nil && v.Len() == 0 {
			err = errors.New("no key configured")
		}
		return v, err
	}
}

// spent sums what a run's recorded gateway calls used, so that a run
// resumed by another process goes on with its budgets where they were.
func spent(ctx context.Context, st store.Store, id bridge.Identity) (gateway.Totals, error) {
	var t gateway.Totals
	for from := int64(1); ; {
		evs, err := st.Events(ctx, id.Run, from, store.MaxPage)
		if err != nil {
			return t, err
		}
		for _, e := range evs {
			if e.Type != event.TypeLLMCall {
				continue
			}
			p, err := e.Unpack()
			if err != nil {
				return t, err
			}
			c := p.(*event.LLMCall)
			t.Tokens += c.Usage.InputTokens + c.Usage.OutputTokens
			t.MicroCredits += c.CostMicroCredits
		}
		if len(evs) < store.MaxPage {
			return t, nil
		}
		from = evs[len(evs)-1].Seq + 1
	}
}

// GatewayEnv are the variables the host gives a run's sandboxes: airlock
// run --env may not set them.
var GatewayEnv = []string{"AIRLOCK_TOKEN", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"}

// attach serves the sandbox of a: a token bound to it, the variables the
// SDKs read (GatewayEnv), and the gateway as its proxy's local handler. The returned
// function ends it once the sandbox is gone.
func (l *llmHub) attach(a sandbox.Attachment, llm *policy.LLM) (*gateway.Gateway, func(), error) {
	gw, tokens, err := l.gateway()
	if err != nil {
		return nil, nil, fmt.Errorf("llm gateway: %w", err)
	}
	tok, err := tokens.Issue(token.Scope{Tenant: a.Tenant, Run: a.RunID, Sandbox: a.Spec.ID, Purpose: gateway.Purpose}, token.MaxTTL)
	if err != nil {
		return nil, nil, err
	}
	l.h.red.Add(secret.NewValue([]byte(tok)))
	a.Spec.Env = append(a.Spec.Env, // the names of GatewayEnv
		"AIRLOCK_TOKEN="+tok, "OPENAI_API_KEY="+tok, "ANTHROPIC_API_KEY="+tok,
		"OPENAI_BASE_URL="+gatewayAddr+"openai/v1", "ANTHROPIC_BASE_URL="+gatewayAddr+"anthropic")
	key := [2]string{a.Tenant, a.RunID}
	l.mu.Lock()
	if l.runs == nil {
		l.runs = map[[2]string]*llmRun{}
	}
	r := l.runs[key]
	if r == nil {
		r = &llmRun{llm: llm, log: a.Log}
		l.runs[key] = r
	}
	r.sandboxes++
	l.mu.Unlock()
	return gw, func() {
		tokens.RevokeSandbox(a.Tenant, a.Spec.ID)
		l.mu.Lock()
		r.sandboxes--
		last := r.sandboxes == 0
		l.mu.Unlock()
		if !last {
			return
		}
		// Late records of the run's last calls may still come: forget the
		// run a while after its last sandbox.
		time.AfterFunc(time.Minute, func() {
			l.mu.Lock()
			defer l.mu.Unlock()
			if r.sandboxes == 0 && l.runs[key] == r {
				delete(l.runs, key)
				tokens.RevokeRun(a.Tenant, a.RunID)
				gw.EndRun(a.Tenant, a.RunID)
			}
		})
	}, nil
}

// close waits for the gateway's pending records.
func (l *llmHub) close() {
	if l.gw != nil {
		_ = l.gw.Close()
	}
}
