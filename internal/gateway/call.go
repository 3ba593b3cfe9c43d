package gateway

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/bridge"
	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/gateway/wire"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/sse"
)

// call is one model call of a sandbox, from its checks to its debit.
type call struct {
	g     *Gateway
	id    bridge.Identity
	log   *slog.Logger
	start time.Time
	api   wire.API
	entry *upstream // the upstream the sandbox addressed
	pol   *policy.LLM
	tok   string // the sandbox's token, scrubbed from logged bodies

	ev        event.LLMCall
	exhausted *event.BudgetExhausted
	spec      string // "UPSTREAM:MODEL" of the upstream call, for prices
	key       []byte // the upstream key of this call, scrubbed from answers
	respLog   strings.Builder

	// Set by the steps of serve, in order: req and inputEst (readRequest),
	// to (route), st, account and rate (admit).
	req      *wire.Request
	inputEst int64     // req's input tokens, estimated from its size
	to       *upstream // the upstream the call goes to
	st       *runState
	account  credit.Account // the tenant's, read for a billed call only
	rate     credit.Rate    // the upstream model's
}

// forwardHeaders are the only request headers that go upstream from the
// sandbox. Everything else (its token in Authorization or x-api-key,
// cookies, organization and project selectors) stays behind.
var forwardHeaders = []string{"Accept", "User-Agent", "Anthropic-Version", "Anthropic-Beta", "Openai-Beta"}

// answerHeaders are the only upstream response headers that go to the
// sandbox besides Content-Type.
var answerHeaders = []string{"X-Request-Id", "Request-Id", "Retry-After", "X-Should-Retry"}

// serve runs the call: it reads the sandbox's request, routes it to an
// upstream, admits it (rate limit, prices, budgets), and exchanges it with
// the upstream. Each step answers the sandbox itself when it stops the
// call; once the call goes upstream it is recorded and debited as it lands.
func (c *call) serve(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	if !c.readRequest(w, r) {
		return
	}
	if !c.route(ctx, w) {
		return
	}
	if !c.admit(ctx, w) {
		return
	}
	limit, ok := c.budget(ctx, w)
	if !ok {
		return
	}
	ureq, ok := c.upstreamRequest(ctx, w, r, limit)
	if !ok {
		return
	}
	c.exchange(ctx, w, ureq)
}

// readRequest reads and parses the sandbox's request into c.req and
// c.inputEst, and notes its model (and, when the policy logs bodies, the
// body) in the call's event. false: it answered a bad request.
func (c *call) readRequest(w http.ResponseWriter, r *http.Request) bool {
	kind := c.entry.kind
	body, aerr := readBody(r.Body, c.g.cfg.MaxRequestBytes)
	if aerr != nil {
		aerr.write(w, kind)
		return false
	}
	req, err := wire.ParseRequest(c.api, body)
	if err != nil {
		badRequest(err.Error()).write(w, kind)
		return false
	}
	if c.tok != "" && strings.Contains(req.Model, c.tok) {
		// Never echo a token into an event.
		badRequest("model must be a model name").write(w, kind)
		return false
	}
	c.req, c.inputEst = req, wire.Estimate(len(body))
	c.ev.Model, c.ev.Stream = req.Model, req.Stream
	if c.pol.LogBodies {
		c.ev.RequestBody = c.scrubLog(string(body))
	}
	return true
}

// route resolves the requested model under the policy to an upstream,
// c.to, and the model there (c.spec and the call's event say both). false:
// it refused a call that no upstream of the sandbox's API serves or that
// the policy does not allow.
func (c *call) route(ctx context.Context, w http.ResponseWriter) bool {
	upName, upModel, _ := c.pol.Resolve(c.entry.name, c.req.Model)
	c.ev.Upstream, c.ev.UpstreamModel = upName, upModel
	c.spec = upName + ":" + upModel
	c.to = c.g.ups[upName]
	switch {
	case c.to == nil:
		c.refuse(ctx, w, errNoUpstream, "upstream_not_configured")
		return false
	case c.to.kind != c.entry.kind:
		c.refuse(ctx, w, errWrongAPI, "wrong_api")
		return false
	case !c.pol.Allows(upName, upModel):
		c.refuse(ctx, w, errModelNotAllowed, "model_not_allowed")
		return false
	}
	return true
}

// admit counts the call against the run's rate limit, and reads the
// model's rate and, for a billed call, the tenant's credit account (c.st,
// c.rate, c.account). false: it answered a call over the rate limit, one
// that cannot be priced where its cost must be counted (credit.Meter.Rate),
// or an internal error.
func (c *call) admit(ctx context.Context, w http.ResponseWriter) bool {
	g, kind := c.g, c.entry.kind
	st, err := g.run(ctx, c.id)
	if err != nil {
		c.log.Error("gateway run totals", "err", g.red.String(err.Error()))
		errInternal.write(w, kind)
		return false
	}
	c.st = st
	if ok, wait := st.allow(g.now(), c.pol.MaxRequestsPerMinute); !ok {
		// Not recorded: a loop of refused calls must not flood the
		// run's log; the proxy's audit has each one.
		e := errRateLimited
		e.retryAfter = wait
		e.write(w, kind)
		return false
	}
	if !c.api.Billed() {
		c.rate = g.meter.Lookup(c.spec)
		return true
	}
	if c.account, err = g.meter.Account(ctx, c.id.Tenant); err != nil {
		c.log.Error("gateway credit account", "err", g.red.String(err.Error()))
		errInternal.write(w, kind)
		return false
	}
	if c.rate, err = g.meter.Rate(c.account, c.spec, c.pol.MaxCredits > 0); err != nil {
		c.refuse(ctx, w, errNoPrice, "model_not_priced")
		return false
	}
	return true
}

// budget checks the budgets before anything goes upstream, and returns the
// most output tokens the call may ask for: 0 or less when the request
// needs no cap (see outputCap). false: it answered a spent budget.
func (c *call) budget(ctx context.Context, w http.ResponseWriter) (limit int64, ok bool) {
	if !c.api.Billed() {
		return 0, true
	}
	used := c.st.used()
	if b, lim, u := spent(c.pol, used, c.account); b != "" {
		c.exhausted = &event.BudgetExhausted{Budget: b, Limit: lim, Used: u}
		c.refuseBudget(ctx, w, b)
		return 0, false
	}
	if !c.api.Generates() {
		return 0, true
	}
	limit, b := outputCap(c.pol, used, c.rate, c.account, c.inputEst)
	if limit == 0 {
		c.refuseBudget(ctx, w, b)
		return 0, false
	}
	if limit > 0 && c.req.MaxTokens == 0 && limit > maxUnaskedCap {
		limit = -1
	}
	return limit, true
}

// upstreamRequest builds the request to c.to: the sandbox's request for
// the upstream's model, asking for at most limit output tokens when limit
// is positive, with the few headers that go upstream from the sandbox
// (forwardHeaders), the upstream's own, and its key last. false: it
// answered an internal error, or that the key is unavailable.
func (c *call) upstreamRequest(ctx context.Context, w http.ResponseWriter, r *http.Request, limit int64) (*http.Request, bool) {
	out, err := c.req.Encode(c.ev.UpstreamModel, max(limit, 0))
	if err != nil {
		errInternal.write(w, c.entry.kind)
		return nil, false
	}
	ureq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.to.upstreamURL(c.api, r.URL.RawQuery), bytes.NewReader(out))
	if err != nil {
		errInternal.write(w, c.entry.kind)
		return nil, false
	}
	h := ureq.Header
	for _, k := range forwardHeaders {
		if v := r.Header.Values(k); len(v) > 0 {
			h[k] = slicesClone(v)
		}
	}
	h.Set("Content-Type", "application/json")
	if c.entry.kind == KindAnthropic && h.Get("Anthropic-Version") == "" {
		h.Set("Anthropic-Version", "2023-06-01")
	}
	for k, v := range c.to.header {
		h[k] = slicesClone(v)
	}
	// The key goes in last, after the sandbox's headers were left
	// behind: nothing the sandbox sends can take its place.
	if !c.setKey(ctx, w, h) {
		return nil, false
	}
	return ureq, true
}

// setKey puts c.to's key, if it has one, in h, and keeps it in c.key to
// scrub it from answers. false: it answered that the key is unavailable,
// and recorded the call.
func (c *call) setKey(ctx context.Context, w http.ResponseWriter, h http.Header) bool {
	if c.to.key == nil {
		return true
	}
	v, err := c.to.key(ctx)
	if err != nil || v.Len() == 0 {
		if err != nil {
			c.log.Error("gateway upstream key", "upstream", c.to.name, "err", c.g.red.String(err.Error()))
		}
		c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "key_unavailable"
		c.answerError(ctx, w, errKey)
		return false
	}
	c.g.addKey(v)
	c.key = v.Reveal()
	if c.entry.kind == KindAnthropic {
		h.Set("X-Api-Key", string(c.key))
	} else {
		h.Set("Authorization", "Bearer "+string(c.key))
	}
	return true
}

// exchange sends ureq upstream and passes the answer on: an error answer
// as the upstream gave it, an event stream as it streams when the sandbox
// asked for one, else whole. The call is in flight from here: its
// estimate counts against the run's budgets until it lands (land), when it
// returns.
func (c *call) exchange(ctx context.Context, w http.ResponseWriter, ureq *http.Request) {
	fl := c.st.start(c.estimate(c.inputEst, 0))
	m := &wire.Meter{API: c.api}
	cut := ""
	defer func() {
		c.land(ctx, fl, m, c.inputEst, cut)
	}()

	resp, err := c.g.transport.RoundTrip(ureq)
	if err != nil {
		c.log.Info("gateway upstream", "upstream", c.to.name, "err", c.g.red.String(scrub(err.Error(), c.key)))
		e := errUnreachable
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, os.ErrDeadlineExceeded) {
			e = errUpstreamTimeout
		}
		m.Done = true // nothing was generated
		c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "unreachable"
		if ctx.Err() != nil {
			c.ev.Outcome, c.ev.Reason = event.LLMOutcomeCancelled, ""
		}
		c.ev.Status = e.status
		e.write(w, c.entry.kind)
		return
	}
	defer resp.Body.Close()
	c.ev.Status = resp.StatusCode
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		m.Done = true
		c.passError(w, resp)
		return
	}
	if c.req.Stream && isEventStream(resp.Header.Get("Content-Type")) {
		cut = c.stream(ctx, w, resp, c.req, m, fl, c.inputEst)
		return
	}
	c.whole(w, resp, m)
}

// readBody reads a request body of at most limit bytes.
func readBody(r io.Reader, limit int64) ([]byte, *apiError) {
	b, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, &errBodyRead
	}
	if int64(len(b)) > limit {
		return nil, &errTooLarge
	}
	return b, nil
}

func isEventStream(ct string) bool {
	mt, _, err := mime.ParseMediaType(ct)
	return err == nil && mt == "text/event-stream"
}

func slicesClone(v []string) []string { return append([]string(nil), v...) }

// spent returns the first budget already spent: the run's gateway tokens,
// its gateway credits, or the tenant's credits (credit.Account.Spent); ""
// when none is.
func spent(pol *policy.LLM, used Totals, a credit.Account) (budget string, limit, usedOf int64) {
	switch {
	case pol.MaxTokens > 0 && used.Tokens >= pol.MaxTokens:
		return budgetTokens, pol.MaxTokens, used.Tokens
	case pol.MaxCredits > 0 && used.MicroCredits >= pol.MaxCredits*microPerCredit:
		return budgetCredits, pol.MaxCredits * microPerCredit, used.MicroCredits
	}
	if ex := a.Spent(); ex != nil {
		return ex.Budget, ex.Limit, ex.Used
	}
	return "", 0, 0
}

// outputCap returns the most output tokens a call may generate under the
// budgets once its input (estimated) is paid: -1 when no budget bounds
// it, 0 when the budgets cannot pay for the input, and the budget that
// bounds it.
func outputCap(pol *policy.LLM, used Totals, r credit.Rate, a credit.Account, inputEst int64) (int64, string) {
	limit, budget := int64(-1), ""
	bound := func(n int64, b string) {
		n = max(n, 0)
		if limit < 0 || n < limit {
			limit, budget = n, b
		}
	}
	if pol.MaxTokens > 0 {
		bound(pol.MaxTokens-used.Tokens-inputEst, budgetTokens)
	}
	if pr := r.Price; r.Priced && pr.Output > 0 {
		// The bounds keep every product below in range; a price past
		// them only makes the cap looser, and the stream meter still
		// holds the budget.
		const maxFactor = 1 << 31
		credits := func(left int64, b string) {
			left = min(left, wire.MaxCount)
			in := (min(inputEst, maxFactor)*min(pr.Input, maxFactor) + microPerCredit - 1) / microPerCredit
			bound((left-in)*microPerCredit/pr.Output, b)
		}
		if pol.MaxCredits > 0 {
			credits(pol.MaxCredits*microPerCredit-used.MicroCredits, budgetCredits)
		}
		if a.Metered {
			credits(a.Balance, budgetTenant)
		}
	}
	return limit, budget
}

// estimate prices an estimate of in input and out output tokens.
func (c *call) estimate(in, out int64) Totals {
	t := Totals{Tokens: in + out}
	t.MicroCredits, _ = c.rate.Cost(event.Usage{InputTokens: in, OutputTokens: out})
	return t
}

// over returns the budget that totals t exceed, or "".
func (c *call) over(t Totals) string {
	switch {
	case c.pol.MaxTokens > 0 && t.Tokens > c.pol.MaxTokens:
		return budgetTokens
	case c.pol.MaxCredits > 0 && t.MicroCredits > c.pol.MaxCredits*microPerCredit:
		return budgetCredits
	}
	return ""
}

// refuse answers e without calling upstream and records the refusal.
func (c *call) refuse(ctx context.Context, w http.ResponseWriter, e apiError, reason string) {
	c.ev.Outcome, c.ev.Reason = event.LLMOutcomeRefused, reason
	c.answerError(ctx, w, e)
}

// refuseBudget answers that budget is spent and records it.
func (c *call) refuseBudget(ctx context.Context, w http.ResponseWriter, budget string) {
	c.ev.Outcome, c.ev.Budget = event.LLMOutcomeBudgetExhausted, budget
	c.answerError(ctx, w, budgetError(c.entry.kind, budget))
}

// answerError writes e and records the call (nothing went upstream).
func (c *call) answerError(ctx context.Context, w http.ResponseWriter, e apiError) {
	c.ev.Status = e.status
	e.write(w, c.entry.kind)
	c.ev.LatencyMS = c.g.now().Sub(c.start).Milliseconds()
	c.g.record(ctx, c)
}

// passError passes an upstream's error answer on, scrubbed of the key.
func (c *call) passError(w http.ResponseWriter, resp *http.Response) {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	b = scrubBytes(b, c.key)
	c.copyHeaders(w, resp)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(b)
	c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "upstream_status"
	if c.pol.LogBodies {
		c.ev.ResponseBody = c.scrubLog(string(b))
	}
}

func (c *call) copyHeaders(w http.ResponseWriter, resp *http.Response) {
	h := w.Header()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		h.Set("Content-Type", ct)
	}
	for _, k := range answerHeaders {
		if v := resp.Header.Get(k); v != "" {
			h.Set(k, scrub(v, c.key))
		}
	}
}

// whole passes on an answer that is not streamed, once it is read whole
// (to read its usage and scrub it).
func (c *call) whole(w http.ResponseWriter, resp *http.Response, m *wire.Meter) {
	b, err := io.ReadAll(io.LimitReader(resp.Body, c.g.cfg.MaxResponseBytes+1))
	switch {
	case err != nil:
		c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "body_broken"
		c.ev.Status = errStreamBroken.status
		errStreamBroken.write(w, c.entry.kind)
		return
	case int64(len(b)) > c.g.cfg.MaxResponseBytes:
		c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "too_large"
		c.ev.Status = errUpstreamTooLarge.status
		errUpstreamTooLarge.write(w, c.entry.kind)
		return
	}
	m.Body(b)
	b = scrubBytes(b, c.key)
	c.copyHeaders(w, resp)
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(resp.StatusCode)
	c.ev.TTFTMS = c.g.now().Sub(c.start).Milliseconds()
	if _, err := w.Write(b); err != nil {
		c.ev.Outcome = event.LLMOutcomeCancelled
	} else {
		c.ev.Outcome = event.LLMOutcomeOK
	}
	if c.pol.LogBodies {
		c.ev.ResponseBody = c.scrubLog(string(b))
	}
}

// stream passes an event stream on, one event at a time, each flushed as
// it arrives. It meters the output as it goes and ends the stream with an
// error event once the run's gateway budget is over; it returns the budget
// that cut it, if one did.
func (c *call) stream(ctx context.Context, w http.ResponseWriter, resp *http.Response, req *wire.Request, m *wire.Meter,
	fl *flight, inputEst int64,
) (cut string) {
	c.copyHeaders(w, resp)
	h := w.Header()
	h.Set("Cache-Control", "no-cache")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	if err := rc.Flush(); err != nil {
		c.ev.Outcome = event.LLMOutcomeCancelled
		return ""
	}
	rd := sse.NewReader(resp.Body, maxEvent)
	var buf bytes.Buffer
	write := func(b []byte) bool {
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	for {
		ev, err := rd.Next()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				c.ev.Outcome = event.LLMOutcomeCancelled
			case errors.Is(err, io.EOF) && (m.Done || m.HaveIn && m.HaveOut):
				c.ev.Outcome = event.LLMOutcomeOK
			default:
				// The upstream ended or broke off before its last event:
				// say so in the stream, or the SDK may take a partial
				// answer for a whole one.
				c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "stream_broken"
				write(errStreamBroken.streamEvent(c.api))
			}
			break
		}
		forward, toks := m.Event(ev, req.IncludeUsage)
		var t Totals
		if toks > 0 {
			m.Est += toks
			in := inputEst
			if n, ok := m.Input(); ok {
				in = n
			}
			t = fl.set(c.estimate(in, m.Est))
		}
		if forward {
			if len(c.key) > 0 && strings.Contains(ev.Data, string(c.key)) {
				ev.Data = strings.ReplaceAll(ev.Data, string(c.key), "[redacted]")
			}
			buf.Reset()
			wire.WriteEvent(&buf, ev)
			if !write(buf.Bytes()) {
				c.ev.Outcome = event.LLMOutcomeCancelled
				break
			}
			if toks > 0 && c.ev.TTFTMS == 0 {
				c.ev.TTFTMS = c.g.now().Sub(c.start).Milliseconds()
			}
			if c.pol.LogBodies && c.respLog.Len() < maxLogBody {
				c.respLog.WriteString(ev.Data)
				c.respLog.WriteByte('\n')
			}
		}
		if toks > 0 && !m.Done {
			if b := c.over(t); b != "" {
				write(budgetError(c.entry.kind, b).streamEvent(c.api))
				c.ev.Outcome, c.ev.Budget = event.LLMOutcomeBudgetExhausted, b
				cut = b
				break
			}
		}
	}
	if m.Failed && c.ev.Outcome == event.LLMOutcomeOK {
		c.ev.Outcome, c.ev.Reason = event.LLMOutcomeUpstreamError, "stream_error"
	}
	if c.pol.LogBodies {
		c.ev.ResponseBody = c.scrubLog(c.respLog.String())
	}
	return cut
}

// land ends the call's flight: its usage (reported, or estimated where the
// answer ended before the provider reported it) is priced, added to the
// run's totals, recorded and debited.
func (c *call) land(ctx context.Context, fl *flight, m *wire.Meter, inputEst int64, cut string) {
	var u event.Usage
	estimated := false
	if c.api.Billed() && !(m.Done && !m.HaveIn && !m.HaveOut && c.ev.Outcome != event.LLMOutcomeOK) {
		u, estimated = m.Usage(inputEst)
	}
	var cost int64
	if u.InputTokens > 0 || u.OutputTokens > 0 {
		var err error
		if cost, err = c.rate.Cost(u); err != nil {
			c.log.Error("gateway price", "model", c.spec, "err", err.Error())
		}
	}
	totals := fl.land(Totals{Tokens: u.InputTokens + u.OutputTokens, MicroCredits: cost})
	c.ev.Usage, c.ev.UsageEstimated, c.ev.CostMicroCredits = u, estimated, cost
	c.ev.LatencyMS = c.g.now().Sub(c.start).Milliseconds()
	if cut != "" {
		lim, used := c.pol.MaxTokens, totals.Tokens
		if cut == budgetCredits {
			lim, used = c.pol.MaxCredits*microPerCredit, totals.MicroCredits
		}
		c.exhausted = &event.BudgetExhausted{Budget: cut, Limit: lim, Used: used}
	}
	c.g.record(ctx, c)
}

// record records the call and debits its cost. It does so in the
// background, so that the sandbox's answer ends (and its connection can
// carry the next call) without waiting for the store; the run's totals,
// which the budgets read, were updated before, and the cost is held
// against the tenant's balance (credit.Meter.Hold) until the debit is
// made. Close waits for it.
func (g *Gateway) record(ctx context.Context, c *call) {
	ctx = context.WithoutCancel(ctx)
	release := g.meter.Hold(c.id.Tenant, c.ev.CostMicroCredits)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		g.recordNow(ctx, c, release)
		return
	}
	g.pending.Add(1)
	g.mu.Unlock()
	go func() {
		defer g.pending.Done()
		g.recordNow(ctx, c, release)
	}()
}

// recordNow records the call and debits its cost, with a context that
// outlives the request (the sandbox may be gone; the call happened), then
// releases the cost's hold. A debit that fails stays owed to the ledger
// (credit.Meter.Debit), and the run's engine settles it too.
func (g *Gateway) recordNow(ctx context.Context, c *call, release func()) {
	defer release()
	ctx, cancel := context.WithTimeout(ctx, recordTimeout)
	defer cancel()
	seq, err := g.cfg.Record(ctx, c.id, Call{Event: c.ev, Exhausted: c.exhausted})
	if err != nil {
		c.log.Error("gateway record llm.call", "err", g.red.String(err.Error()))
		return // a debit must name its event
	}
	err = g.meter.Debit(ctx, credit.Debit{
		Tenant: c.id.Tenant, RunID: c.id.Run, Seq: seq, Amount: c.ev.CostMicroCredits,
		Note: "llm " + c.spec,
	})
	if err != nil {
		c.log.Error("gateway debit", "seq", seq, "err", g.red.String(err.Error()))
	}
}

// scrubLog prepares a body for an event: cut to maxLogBody at a UTF-8
// boundary, the token and every known secret replaced.
func (c *call) scrubLog(s string) string {
	if len(s) > maxLogBody {
		s = strings.ToValidUTF8(s[:maxLogBody], "")
	}
	s = scrub(s, []byte(c.tok))
	s = scrub(s, c.key)
	return c.g.red.String(s)
}

func scrub(s string, secret []byte) string {
	if len(secret) == 0 || !strings.Contains(s, string(secret)) {
		return s
	}
	return strings.ReplaceAll(s, string(secret), "[redacted]")
}

func scrubBytes(b, secret []byte) []byte {
	if len(secret) == 0 || !bytes.Contains(b, secret) {
		return b
	}
	return bytes.ReplaceAll(b, secret, []byte("[redacted]"))
}
