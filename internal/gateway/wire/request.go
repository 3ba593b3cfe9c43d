package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// API is one endpoint the gateway serves.
type API int

// The endpoints.
const (
	// Chat is OpenAI's POST v1/chat/completions.
	Chat API = iota + 1
	// Responses is OpenAI's POST v1/responses.
	Responses
	// Embeddings is OpenAI's POST v1/embeddings.
	Embeddings
	// OpenAIModels is OpenAI's GET v1/models.
	OpenAIModels
	// Messages is Anthropic's POST v1/messages.
	Messages
	// CountTokens is Anthropic's POST v1/messages/count_tokens.
	CountTokens
	// AnthropicModels is Anthropic's GET v1/models.
	AnthropicModels
)

// String is the name an llm.call event records.
func (a API) String() string {
	switch a {
	case Chat:
		return "openai.chat"
	case Responses:
		return "openai.responses"
	case Embeddings:
		return "openai.embeddings"
	case OpenAIModels:
		return "openai.models"
	case Messages:
		return "anthropic.messages"
	case CountTokens:
		return "anthropic.count_tokens"
	case AnthropicModels:
		return "anthropic.models"
	}
	return "unknown"
}

// Kind is the wire format of a: KindOpenAI or KindAnthropic.
func (a API) Kind() string {
	if a >= Messages {
		return KindAnthropic
	}
	return KindOpenAI
}

// Generates reports whether a call of a produces output tokens, so that
// its max-tokens field can be capped and its stream metered.
func (a API) Generates() bool { return a == Chat || a == Responses || a == Messages }

// Billed reports whether a call of a costs anything.
func (a API) Billed() bool {
	return a != CountTokens && a != OpenAIModels && a != AnthropicModels
}

// MaxFields are the fields of a's request that bound its output, the one
// the gateway sets when none is given first.
func (a API) MaxFields() []string {
	switch a {
	case Chat:
		return []string{"max_completion_tokens", "max_tokens"}
	case Responses:
		return []string{"max_output_tokens"}
	case Messages:
		return []string{"max_tokens"}
	}
	return nil
}

// Bounds of a request.
const (
	maxModelLen = 256
	// maxRequestFields bounds the top-level fields of a request object.
	maxRequestFields = 256
)

// Request is a decoded request body: the top-level fields, kept as they
// came, and the few the gateway reads or changes.
type Request struct {
	// API is the endpoint the request was sent to.
	API API
	// Model is the model the request names.
	Model string
	// Stream says the request asks for a stream.
	Stream bool
	// IncludeUsage says the sandbox asked for the usage chunk of a Chat
	// Completions stream (stream_options.include_usage).
	IncludeUsage bool
	// MaxTokens is the smallest output bound the request gives, 0 when
	// it gives none.
	MaxTokens int64
	fields    map[string]json.RawMessage
}

// RequestError is a request the gateway refuses; its message is a fixed
// text naming a field, never a value.
type RequestError struct{ msg string }

func (e *RequestError) Error() string { return e.msg }

func reqErr(msg string) error { return &RequestError{msg: msg} }

// ParseRequest decodes the JSON body of a call of a. A body that is not
// one JSON object, a missing or malformed model, and fields of the wrong
// type among those the gateway reads are errors (*RequestError).
// Duplicate keys keep the last value, and encode writes only that one, so
// the upstream sees exactly what was checked.
func ParseRequest(a API, body []byte) (*Request, error) {
	if !json.Valid(body) {
		return nil, reqErr("the request body is not valid JSON")
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil || fields == nil {
		return nil, reqErr("the request body is not a JSON object")
	}
	if len(fields) > maxRequestFields {
		return nil, reqErr("the request body has too many fields")
	}
	r := &Request{API: a, fields: fields}
	raw, ok := fields["model"]
	if !ok || isNull(raw) {
		return nil, reqErr("model is required")
	}
	if err := json.Unmarshal(raw, &r.Model); err != nil {
		return nil, reqErr("model must be a string")
	}
	if !ValidModel(r.Model) {
		return nil, reqErr("model must be 1 to 256 bytes of printable UTF-8")
	}
	if raw, ok := fields["stream"]; ok && !isNull(raw) {
		if err := json.Unmarshal(raw, &r.Stream); err != nil {
			return nil, reqErr("stream must be true or false")
		}
		if r.Stream && (a == Embeddings || a == CountTokens) {
			return nil, reqErr("stream is not supported on this endpoint")
		}
	}
	if raw, ok := fields["stream_options"]; ok && !isNull(raw) && a == Chat {
		var so map[string]json.RawMessage
		if err := json.Unmarshal(raw, &so); err != nil || so == nil {
			return nil, reqErr("stream_options must be an object")
		}
		if iu, ok := so["include_usage"]; ok && !isNull(iu) {
			if err := json.Unmarshal(iu, &r.IncludeUsage); err != nil {
				return nil, reqErr("stream_options.include_usage must be true or false")
			}
		}
	}
	for _, f := range a.MaxFields() {
		raw, ok := fields[f]
		if !ok || isNull(raw) {
			continue
		}
		var n int64
		if err := json.Unmarshal(raw, &n); err != nil || n < 0 {
			return nil, reqErr(f + " must be a whole number, 0 or more")
		}
		if r.MaxTokens == 0 || n < r.MaxTokens {
			r.MaxTokens = n
		}
	}
	return r, nil
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// ValidModel reports whether s can name a model: 1 to 256 bytes of UTF-8
// without control characters.
func ValidModel(s string) bool {
	if s == "" || len(s) > maxModelLen || !utf8.ValidString(s) {
		return false
	}
	for _, c := range s {
		if c < 0x20 || c == 0x7f || c >= 0x80 && c < 0xa0 {
			return false
		}
	}
	return true
}

// Encode returns the body to send upstream: model as the upstream calls
// it; for a Chat Completions stream, stream_options.include_usage set so
// that the upstream reports usage; and, when limit > 0, every output bound
// of the request (or the API's main one, when it gives none) at most limit.
// Other fields are passed on as they came.
func (r *Request) Encode(model string, limit int64) ([]byte, error) {
	out := make(map[string]json.RawMessage, len(r.fields)+2)
	for k, v := range r.fields {
		out[k] = v
	}
	m, err := json.Marshal(model)
	if err != nil {
		return nil, err
	}
	out["model"] = m
	if r.API == Chat && r.Stream {
		so := map[string]json.RawMessage{}
		if raw, ok := r.fields["stream_options"]; ok && !isNull(raw) {
			_ = json.Unmarshal(raw, &so) // checked by ParseRequest
		}
		so["include_usage"] = json.RawMessage("true")
		b, err := marshalCompact(so)
		if err != nil {
			return nil, err
		}
		out["stream_options"] = b
	}
	if limit > 0 {
		set := false
		for _, f := range r.API.MaxFields() {
			raw, ok := out[f]
			if !ok || isNull(raw) {
				continue
			}
			var n int64
			_ = json.Unmarshal(raw, &n) // checked by ParseRequest
			out[f] = json.RawMessage(itoa(min(n, limit)))
			set = true
		}
		if fs := r.API.MaxFields(); !set && len(fs) > 0 {
			out[fs[0]] = json.RawMessage(itoa(limit))
		}
	}
	return marshalCompact(out)
}

// marshalCompact encodes v without escaping <, > and &, so that text the
// sandbox sent reaches the upstream as it was.
func marshalCompact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
