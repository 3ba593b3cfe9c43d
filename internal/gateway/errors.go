package gateway

import (
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/airlockrun/airlock/internal/gateway/wire"
)

// apiError is an answer of the gateway itself, written in the error shape
// of the provider the sandbox talks to so that its SDK raises it. Messages
// are fixed texts: they never hold a key, a token, a model name the
// sandbox sent, an upstream URL or a host path.
type apiError struct {
	status int
	// openaiType and code go into an OpenAI error object; anthropicType
	// into an Anthropic one.
	openaiType, code, anthropicType string
	msg                             string
	// retryAfter, when set, is sent as Retry-After.
	retryAfter time.Duration
	// final tells the SDK not to retry (x-should-retry: false): the same
	// request cannot succeed later in this run.
	final bool
}

// The gateway's errors. Refusals of a request are 4xx; the SDKs retry 429
// and 5xx unless told otherwise.
var (
	errNotFound = apiError{
		status: http.StatusNotFound, openaiType: "invalid_request_error", code: "not_found",
		anthropicType: "not_found_error", msg: "airlock gateway: no such endpoint", final: true,
	}
	errMethod = apiError{
		status: http.StatusMethodNotAllowed, openaiType: "invalid_request_error", code: "method_not_allowed",
		anthropicType: "invalid_request_error", msg: "airlock gateway: method not allowed on this endpoint", final: true,
	}
	errNoIdentity = apiError{
		status: http.StatusForbidden, openaiType: "permission_error", code: "no_sandbox",
		anthropicType: "permission_error", msg: "airlock gateway: reachable only from a sandbox, through its egress socket", final: true,
	}
	errToken = apiError{
		status: http.StatusUnauthorized, openaiType: "invalid_request_error", code: "invalid_api_key",
		anthropicType: "authentication_error", final: true,
		msg: "airlock gateway: invalid token: use this sandbox's AIRLOCK_TOKEN (a token works only from the sandbox it was issued to, until its run ends)",
	}
	errDisabled = apiError{
		status: http.StatusForbidden, openaiType: "permission_error", code: "gateway_disabled",
		anthropicType: "permission_error", msg: "airlock gateway: model calls are not enabled by this run's policy (llm.enabled)", final: true,
	}
	errModelNotAllowed = apiError{
		status: http.StatusForbidden, openaiType: "permission_error", code: "model_not_allowed",
		anthropicType: "permission_error", msg: "airlock gateway: the model is not allowed by this run's policy (llm.models)", final: true,
	}
	errWrongAPI = apiError{
		status: http.StatusBadRequest, openaiType: "invalid_request_error", code: "model_wrong_api",
		anthropicType: "invalid_request_error", msg: "airlock gateway: the model is served by an upstream that does not speak this API", final: true,
	}
	errNoUpstream = apiError{
		status: http.StatusBadGateway, openaiType: "api_error", code: "upstream_not_configured",
		anthropicType: "api_error", msg: "airlock gateway: the model's upstream is not configured on this host", final: true,
	}
	errNoPrice = apiError{
		status: http.StatusForbidden, openaiType: "permission_error", code: "model_not_priced",
		anthropicType: "permission_error", msg: "airlock gateway: the model has no price on this host, and this run's calls must be counted (the tenant is metered, or llm.max_credits is set)", final: true,
	}
	errRateLimited = apiError{
		status: http.StatusTooManyRequests, openaiType: "requests", code: "rate_limit_exceeded",
		anthropicType: "rate_limit_error", msg: "airlock gateway: too many model calls in the last minute for this run's policy (llm.max_requests_per_minute)",
	}
	errTooLarge = apiError{
		status: http.StatusRequestEntityTooLarge, openaiType: "invalid_request_error", code: "request_too_large",
		anthropicType: "request_too_large", msg: "airlock gateway: request body too large", final: true,
	}
	errBodyRead = apiError{
		status: http.StatusBadRequest, openaiType: "invalid_request_error", code: "bad_body",
		anthropicType: "invalid_request_error", msg: "airlock gateway: the request body could not be read", final: true,
	}
	errUnreachable = apiError{
		status: http.StatusBadGateway, openaiType: "api_error", code: "upstream_unreachable",
		anthropicType: "api_error", msg: "airlock gateway: the upstream could not be reached",
	}
	errUpstreamTimeout = apiError{
		status: http.StatusGatewayTimeout, openaiType: "api_error", code: "upstream_timeout",
		anthropicType: "api_error", msg: "airlock gateway: the upstream did not answer in time",
	}
	errUpstreamTooLarge = apiError{
		status: http.StatusBadGateway, openaiType: "api_error", code: "upstream_too_large",
		anthropicType: "api_error", msg: "airlock gateway: the upstream's answer is too large", final: true,
	}
	errStreamBroken = apiError{
		status: http.StatusBadGateway, openaiType: "api_error", code: "upstream_stream_broken",
		anthropicType: "api_error", msg: "airlock gateway: the upstream's stream broke off",
	}
	errKey = apiError{
		status: http.StatusBadGateway, openaiType: "api_error", code: "upstream_key_unavailable",
		anthropicType: "api_error", msg: "airlock gateway: the upstream's key is not available on this host",
	}
	errInternal = apiError{
		status: http.StatusInternalServerError, openaiType: "api_error", code: "internal_error",
		anthropicType: "api_error", msg: "airlock gateway: internal error",
	}
)

// budgetError is the answer when a budget is spent: OpenAI's own
// "insufficient_quota" (429) and Anthropic's "billing_error" (402), both
// final, so that no SDK retries into a spent budget.
func budgetError(kind, budget string) apiError {
	msg := "airlock gateway: "
	switch budget {
	case budgetTokens:
		msg += "this run's LLM token budget (llm.max_tokens) is spent"
	case budgetCredits:
		msg += "this run's LLM credit budget (llm.max_credits) is spent"
	default:
		msg += "the tenant's credit balance is spent"
	}
	e := apiError{openaiType: "insufficient_quota", code: "insufficient_quota", anthropicType: "billing_error", msg: msg, final: true}
	e.status = http.StatusTooManyRequests
	if kind == KindAnthropic {
		e.status = http.StatusPaymentRequired
	}
	return e
}

// badRequest is a 400 with a fixed message from the request decoder.
func badRequest(msg string) apiError {
	return apiError{
		status: http.StatusBadRequest, openaiType: "invalid_request_error", code: "invalid_request",
		anthropicType: "invalid_request_error", msg: "airlock gateway: " + msg, final: true,
	}
}

// body returns e as the JSON error object of kind.
func (e apiError) body(kind string) []byte {
	var v any
	if kind == KindAnthropic {
		v = anthropicErrorBody{Type: "error", Error: anthropicErrorDetail{Type: e.anthropicType, Message: e.msg}}
	} else {
		v = openaiErrorBody{Error: openaiErrorDetail{Message: e.msg, Type: e.openaiType, Code: e.code}}
	}
	b, _ := json.Marshal(v) // plain strings: cannot fail
	return b
}

type openaiErrorBody struct {
	Error openaiErrorDetail `json:"error"`
}

type openaiErrorDetail struct {
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    string  `json:"code"`
}

type anthropicErrorBody struct {
	Type  string               `json:"type"`
	Error anthropicErrorDetail `json:"error"`
}

type anthropicErrorDetail struct {
	Type    string `json:"type"`
	Message string `json:"message"`
}

// write sends e as a whole response.
func (e apiError) write(w http.ResponseWriter, kind string) {
	b := e.body(kind)
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	if e.retryAfter > 0 {
		h.Set("Retry-After", strconv.FormatInt(int64((e.retryAfter+time.Second-1)/time.Second), 10))
	}
	if e.final {
		h.Set("X-Should-Retry", "false")
	}
	w.WriteHeader(e.status)
	_, _ = w.Write(b)
}

// streamEvent returns e as the error event that ends a stream of api: for
// Chat Completions a data chunk with an "error" object, for the Responses
// API and Anthropic Messages an "error" event; each SDK raises it.
func (e apiError) streamEvent(a wire.API) []byte {
	switch a {
	case wire.Messages:
		return append(append([]byte("event: error\ndata: "), e.body(KindAnthropic)...), "\n\n"...)
	case wire.Responses:
		b, _ := json.Marshal(responsesErrorEvent{
			Type: "error", Code: e.code, Message: e.msg,
			Error: openaiErrorDetail{Message: e.msg, Type: e.openaiType, Code: e.code},
		})
		return append(append([]byte("event: error\ndata: "), b...), "\n\n"...)
	}
	return append(append([]byte("data: "), e.body(KindOpenAI)...), "\n\n"...)
}

// responsesErrorEvent is the Responses API's stream error event, with the
// error object repeated for SDKs that read it.
type responsesErrorEvent struct {
	Type    string            `json:"type"`
	Code    string            `json:"code"`
	Message string            `json:"message"`
	Param   *string           `json:"param"`
	Error   openaiErrorDetail `json:"error"`
}
