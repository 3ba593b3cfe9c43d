package wire

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sse"
)

// MaxCount bounds a token count the gateway believes, so that no sum or
// price of counts can overflow.
const MaxCount = 1 << 40

// count is a token count in a provider's usage object: a JSON number
// (some compatible servers write 12.0), clamped to 0..MaxCount.
type count int64

func (c *count) UnmarshalJSON(b []byte) error {
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return nil // a count the gateway cannot read is absent
	}
	switch {
	case f != f || f < 0:
		*c = 0
	case f > MaxCount:
		*c = MaxCount
	default:
		*c = count(math.Ceil(f))
	}
	return nil
}

// openaiUsage is the usage object of Chat Completions, Embeddings and the
// Responses API (which use different names).
type openaiUsage struct {
	PromptTokens        *count         `json:"prompt_tokens"`
	CompletionTokens    *count         `json:"completion_tokens"`
	InputTokens         *count         `json:"input_tokens"`
	OutputTokens        *count         `json:"output_tokens"`
	PromptTokensDetails *cachedDetails `json:"prompt_tokens_details"`
	InputTokensDetails  *cachedDetails `json:"input_tokens_details"`
}

type cachedDetails struct {
	CachedTokens count `json:"cached_tokens"`
}

// anthropicUsage is the usage object of a message, message_start and
// message_delta; message_delta repeats only some fields.
type anthropicUsage struct {
	InputTokens   *count `json:"input_tokens"`
	OutputTokens  *count `json:"output_tokens"`
	CacheCreation *count `json:"cache_creation_input_tokens"`
	CacheRead     *count `json:"cache_read_input_tokens"`
}

// chatChunk is a Chat Completions stream chunk (or a whole completion,
// whose choices carry a message instead of a delta).
type chatChunk struct {
	Choices []struct {
		Delta   *chatDelta `json:"delta"`
		Message *chatDelta `json:"message"`
	} `json:"choices"`
	Usage *openaiUsage     `json:"usage"`
	Error *json.RawMessage `json:"error"`
}

type chatDelta struct {
	Content          *string `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	Reasoning        *string `json:"reasoning"`
	Refusal          *string `json:"refusal"`
	ToolCalls        []struct {
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	} `json:"tool_calls"`
}

// size is the number of bytes of output text in d.
func (d *chatDelta) size() int {
	n := 0
	for _, s := range []*string{d.Content, d.ReasoningContent, d.Reasoning, d.Refusal} {
		if s != nil {
			n += len(*s)
		}
	}
	for _, c := range d.ToolCalls {
		n += len(c.Function.Name) + len(c.Function.Arguments)
	}
	return n
}

// responsesEvent is a Responses API stream event, or (Response unset) the
// whole response of a call that did not stream.
type responsesEvent struct {
	Type     string          `json:"type"`
	Delta    json.RawMessage `json:"delta"`
	Response *struct {
		Usage *openaiUsage `json:"usage"`
	} `json:"response"`
	Usage *openaiUsage `json:"usage"`
}

// anthropicEvent is an Anthropic Messages stream event, or (Type
// "message") the whole message of a call that did not stream.
type anthropicEvent struct {
	Type    string `json:"type"`
	Message *struct {
		Usage *anthropicUsage `json:"usage"`
	} `json:"message"`
	Delta *struct {
		Text        string `json:"text"`
		PartialJSON string `json:"partial_json"`
		Thinking    string `json:"thinking"`
	} `json:"delta"`
	Usage *anthropicUsage `json:"usage"`
}

// Meter reads the usage a provider reports in its answer, and estimates
// the output of a stream as its deltas arrive, for the budgets and for a
// debit when the stream ends before the provider reported usage. It never
// looks at anything the sandbox sent.
type Meter struct {
	// API is the endpoint whose answer is metered (set it).
	API API
	// In, Out, CacheRead and CacheWrite are what the provider reported;
	// HaveIn and HaveOut say whether it did. In counts only the
	// uncached input for Messages (Anthropic's own way), all of it for
	// the OpenAI APIs; Usage and Input give it the common way.
	In, Out, CacheRead, CacheWrite int64
	HaveIn, HaveOut                bool
	// Est is the estimated output of the stream so far, in tokens: the
	// caller adds what Event returns.
	Est int64
	// Done says the answer's last event arrived ([DONE], message_stop,
	// response.completed and the like), or a whole answer was read.
	Done bool
	// Failed says the upstream reported an error inside its stream.
	Failed bool
}

// Estimate is a conservative count of the tokens in n bytes of output
// text: a token is rarely shorter than four bytes of English or code.
func Estimate(n int) int64 {
	if n <= 0 {
		return 0
	}
	return int64(n+3) / 4
}

// Event reads one stream event. It returns whether the event goes on to
// the sandbox (a Chat Completions usage chunk the sandbox did not ask for
// does not) and the output tokens it is estimated to carry.
func (m *Meter) Event(ev sse.Event, includeUsage bool) (forward bool, tokens int64) {
	switch m.API {
	case Chat:
		if strings.TrimSpace(ev.Data) == "[DONE]" {
			m.Done = true
			return true, 0
		}
		var c chatChunk
		if json.Unmarshal([]byte(ev.Data), &c) != nil {
			return true, 0
		}
		if c.Error != nil && !isNull(*c.Error) {
			m.Failed = true
		}
		n := 0
		for _, ch := range c.Choices {
			if ch.Delta != nil {
				n += ch.Delta.size()
			}
		}
		if c.Usage != nil {
			m.openai(c.Usage)
			if len(c.Choices) == 0 && !includeUsage {
				return false, 0
			}
		}
		return true, Estimate(n)
	case Responses:
		var e responsesEvent
		if json.Unmarshal([]byte(ev.Data), &e) != nil {
			return true, 0
		}
		typ := e.Type
		if typ == "" {
			typ = ev.Type
		}
		switch typ {
		case "response.completed", "response.incomplete", "response.failed":
			m.Done = true
			m.Failed = typ == "response.failed"
			if e.Response != nil && e.Response.Usage != nil {
				m.openai(e.Response.Usage)
			}
		case "error":
			m.Failed = true
		}
		if strings.HasSuffix(typ, ".delta") {
			var s string
			if json.Unmarshal(e.Delta, &s) == nil {
				return true, Estimate(len(s))
			}
		}
		return true, 0
	case Messages:
		var e anthropicEvent
		if json.Unmarshal([]byte(ev.Data), &e) != nil {
			return true, 0
		}
		switch e.Type {
		case "message_start":
			if e.Message != nil && e.Message.Usage != nil {
				m.anthropic(e.Message.Usage, false)
			}
		case "message_delta":
			if e.Usage != nil {
				m.anthropic(e.Usage, true)
			}
		case "message_stop":
			m.Done = true
		case "error":
			m.Failed = true
		case "content_block_delta":
			if e.Delta != nil {
				return true, Estimate(len(e.Delta.Text) + len(e.Delta.PartialJSON) + len(e.Delta.Thinking))
			}
		}
		return true, 0
	}
	return true, 0
}

// Body reads the usage of a whole (not streamed) answer.
func (m *Meter) Body(b []byte) {
	switch m.API {
	case Chat, Embeddings:
		var c chatChunk
		if json.Unmarshal(b, &c) == nil && c.Usage != nil {
			m.openai(c.Usage)
			if m.API == Embeddings && m.HaveIn {
				m.Out, m.HaveOut = 0, true
			}
		}
	case Responses:
		var e responsesEvent
		if json.Unmarshal(b, &e) == nil && e.Usage != nil {
			m.openai(e.Usage)
		}
	case Messages:
		var e anthropicEvent
		if json.Unmarshal(b, &e) == nil && e.Usage != nil {
			m.anthropic(e.Usage, true)
		}
	}
	if !m.HaveOut {
		// An answer without usage: the whole body bounds its output.
		m.Est = Estimate(len(b))
	}
	m.Done = true
}

func (m *Meter) openai(u *openaiUsage) {
	if v := first(u.PromptTokens, u.InputTokens); v != nil {
		m.In, m.HaveIn = int64(*v), true
	}
	if v := first(u.CompletionTokens, u.OutputTokens); v != nil {
		m.Out, m.HaveOut = int64(*v), true
	}
	switch {
	case u.PromptTokensDetails != nil:
		m.CacheRead = int64(u.PromptTokensDetails.CachedTokens)
	case u.InputTokensDetails != nil:
		m.CacheRead = int64(u.InputTokensDetails.CachedTokens)
	}
	m.CacheRead = min(m.CacheRead, m.In)
}

// anthropic takes the fields u has. Anthropic counts cached input apart
// from input_tokens; the Meter counts it inside, as event.Usage does.
// final says u is the last word on output (message_delta or a whole
// message), not message_start's opening count.
func (m *Meter) anthropic(u *anthropicUsage, final bool) {
	if u.CacheRead != nil {
		m.CacheRead = int64(*u.CacheRead)
	}
	if u.CacheCreation != nil {
		m.CacheWrite = int64(*u.CacheCreation)
	}
	if u.InputTokens != nil {
		m.In, m.HaveIn = int64(*u.InputTokens), true
	}
	if u.OutputTokens != nil {
		m.Out = int64(*u.OutputTokens)
		m.HaveOut = m.HaveOut || final
	}
}

func first(cs ...*count) *count {
	for _, c := range cs {
		if c != nil {
			return c
		}
	}
	return nil
}

// Usage returns the call's usage: what the provider reported where it did,
// and the estimates (inputEst for the input, the stream's estimate for the
// output) where it did not; estimated says some of it is an estimate.
func (m *Meter) Usage(inputEst int64) (u event.Usage, estimated bool) {
	in := m.In
	if m.API == Messages {
		in += m.CacheRead + m.CacheWrite
	}
	u = event.Usage{InputTokens: in, OutputTokens: m.Out, CacheReadTokens: m.CacheRead, CacheWriteTokens: m.CacheWrite}
	if !m.HaveIn {
		u.InputTokens, estimated = max(inputEst, u.InputTokens), true
	}
	if !m.HaveOut {
		u.OutputTokens, estimated = max(m.Est, m.Out), true
	}
	return u, estimated
}

// WriteEvent appends ev in the wire format: its type when it has one, then
// its data, one line per data line.
func WriteEvent(b *bytes.Buffer, ev sse.Event) {
	if ev.Type != "" && ev.Type != "message" {
		b.WriteString("event: ")
		b.WriteString(ev.Type)
		b.WriteByte('\n')
	}
	data := ev.Data
	for {
		line, rest, more := strings.Cut(data, "\n")
		b.WriteString("data: ")
		b.WriteString(line)
		b.WriteByte('\n')
		if !more {
			break
		}
		data = rest
	}
	b.WriteByte('\n')
}

// Input returns the input tokens the provider reported, cached ones
// included, and whether it reported them.
func (m *Meter) Input() (int64, bool) {
	if m.API == Messages {
		return m.In + m.CacheRead + m.CacheWrite, m.HaveIn
	}
	return m.In, m.HaveIn
}
