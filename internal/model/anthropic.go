package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	"github.com/airlockrun/airlock/internal/sse"
)

// AnthropicVersion is the anthropic-version header sent with every request.
const AnthropicVersion = "2023-06-01"

// Anthropic speaks the Anthropic Messages API: POST {base}/v1/messages with
// x-api-key and anthropic-version, streamed as server-sent events.
type Anthropic struct {
	c     *client
	model string
}

var _ Provider = (*Anthropic)(nil)

// NewAnthropic returns a provider for the Anthropic Messages API; model is
// used when a Request names none. o.Key is required.
func NewAnthropic(model string, o Options) (*Anthropic, error) {
	if o.Key.Len() == 0 {
		return nil, errors.New("anthropic: no API key")
	}
	c, err := newClient("anthropic", "https://api.anthropic.com", "request-id", o)
	if err != nil {
		return nil, err
	}
	return &Anthropic{c: c, model: model}, nil
}

// Complete implements Provider.
func (a *Anthropic) Complete(ctx context.Context, req Request, stream func(Delta)) (Response, error) {
	body, err := encodeAnthropic(req, a.model, a.c.maxTokens)
	if err != nil {
		return Response{}, fmt.Errorf("anthropic: %w", err)
	}
	return a.c.complete(ctx, exchange{
		path: "/v1/messages",
		body: body,
		header: func(h http.Header) {
			h.Set("x-api-key", string(a.c.key.Reveal()))
			h.Set("anthropic-version", AnthropicVersion)
		},
		decodeStream: decodeAnthropicStream,
		decodeJSON:   decodeAnthropicJSON,
	}, stream)
}

// The request body of POST /v1/messages.
type anthropicRequest struct {
	Model       string             `json:"model"`
	MaxTokens   int                `json:"max_tokens"`
	System      string             `json:"system,omitempty"`
	Messages    []anthropicMessage `json:"messages"`
	Tools       []anthropicTool    `json:"tools,omitempty"`
	Temperature *float64           `json:"temperature,omitempty"`
	Stream      bool               `json:"stream"`
}

type anthropicMessage struct {
	Role    string           `json:"role"`
	Content []anthropicBlock `json:"content"`
}

// anthropicBlock is a content block of a request: text, tool_use or
// tool_result; only the fields of its type are set.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`
	Name      string          `json:"name,omitempty"`
	Input     json.RawMessage `json:"input,omitempty"`
	ToolUseID string          `json:"tool_use_id,omitempty"`
	Content   string          `json:"content,omitempty"`
	IsError   bool            `json:"is_error,omitempty"`
}

type anthropicTool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema"`
}

// emptySchema is the schema of a tool that declares none.
var emptySchema = json.RawMessage(`{"type":"object"}`)

func encodeAnthropic(req Request, defaultModel string, defaultMax int) ([]byte, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	out := anthropicRequest{
		Model:       req.Model,
		MaxTokens:   req.MaxTokens,
		System:      req.System,
		Temperature: req.Temperature,
		Stream:      true,
	}
	if out.Model == "" {
		out.Model = defaultModel
	}
	if out.Model == "" {
		return nil, errors.New("no model named")
	}
	if out.MaxTokens <= 0 {
		out.MaxTokens = defaultMax
	}
	for _, t := range req.Tools {
		schema := t.Schema
		if len(schema) == 0 {
			schema = emptySchema
		}
		out.Tools = append(out.Tools, anthropicTool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	for _, m := range req.Messages {
		role := "user" // tool results travel in user messages
		if m.Role == RoleAssistant {
			role = "assistant"
		}
		var blocks []anthropicBlock
		for _, p := range m.Content {
			switch p.Type {
			case PartText:
				if p.Text != "" { // the API rejects empty text blocks
					blocks = append(blocks, anthropicBlock{Type: "text", Text: p.Text})
				}
			case PartToolCall:
				input := p.ToolCall.Args
				if !isJSONObject(input) {
					// tool_use input must be an object; arguments the model
					// garbled were answered with an error result anyway.
					input = json.RawMessage("{}")
				}
				blocks = append(blocks, anthropicBlock{Type: "tool_use", ID: p.ToolCall.ID, Name: p.ToolCall.Name, Input: input})
			case PartToolResult:
				r := p.ToolResult
				blocks = append(blocks, anthropicBlock{Type: "tool_result", ToolUseID: r.CallID, Content: r.Content, IsError: r.IsError})
			}
		}
		if len(blocks) == 0 {
			continue
		}
		// Consecutive turns of one role are merged into one message, with
		// tool results first, as the API requires of the user message that
		// answers a tool_use.
		if n := len(out.Messages); n > 0 && out.Messages[n-1].Role == role {
			blocks = append(out.Messages[n-1].Content, blocks...)
			out.Messages = out.Messages[:n-1]
		}
		sort.SliceStable(blocks, func(i, j int) bool {
			return blocks[i].Type == "tool_result" && blocks[j].Type != "tool_result"
		})
		out.Messages = append(out.Messages, anthropicMessage{Role: role, Content: blocks})
	}
	return json.Marshal(out)
}

func isJSONObject(b json.RawMessage) bool {
	var obj map[string]json.RawMessage
	return json.Unmarshal(b, &obj) == nil && obj != nil
}

// anthropicUsage is the usage object of message_start, message_delta and a
// whole message. Pointers tell absent fields from zeros: message_delta
// repeats only some of them.
type anthropicUsage struct {
	InputTokens   *int64 `json:"input_tokens"`
	OutputTokens  *int64 `json:"output_tokens"`
	CacheCreation *int64 `json:"cache_creation_input_tokens"`
	CacheRead     *int64 `json:"cache_read_input_tokens"`
}

// anthropicReply is a message object: the whole reply of a non-streamed
// call, or the start of a streamed one.
type anthropicReply struct {
	ID         string                `json:"id"`
	Model      string                `json:"model"`
	Content    []anthropicReplyBlock `json:"content"`
	StopReason *string               `json:"stop_reason"`
	Usage      *anthropicUsage       `json:"usage"`
}

type anthropicReplyBlock struct {
	Type  string          `json:"type"`
	Text  string          `json:"text"`
	ID    string          `json:"id"`
	Name  string          `json:"name"`
	Input json.RawMessage `json:"input"`
}

// anthropicEvent is the data of one stream event; each type uses some of
// the fields.
type anthropicEvent struct {
	Type         string               `json:"type"`
	Message      *anthropicReply      `json:"message"`
	Index        int                  `json:"index"`
	ContentBlock *anthropicReplyBlock `json:"content_block"`
	Delta        *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		PartialJSON string  `json:"partial_json"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *anthropicUsage      `json:"usage"`
	Error *providerErrorDetail `json:"error"`
}

// maxBlocks bounds the content blocks (and so the tool calls) of one reply.
const maxBlocks = 1024

// anthropicAssembly builds a Response from stream events.
type anthropicAssembly struct {
	id, model string
	stop      *string
	usage     anthropicUsage
	blocks    map[int]*anthropicBlockState
	calls     int
}

type anthropicBlockState struct {
	typ      string
	text     strings.Builder
	id, name string
	args     strings.Builder
	call     int // ordinal among the tool calls
}

func (s *anthropicAssembly) setUsage(u *anthropicUsage) {
	if u == nil {
		return
	}
	for _, f := range []struct{ dst, src **int64 }{
		{&s.usage.InputTokens, &u.InputTokens},
		{&s.usage.OutputTokens, &u.OutputTokens},
		{&s.usage.CacheCreation, &u.CacheCreation},
		{&s.usage.CacheRead, &u.CacheRead},
	} {
		if *f.src != nil {
			*f.dst = *f.src
		}
	}
}

func (s *anthropicAssembly) start(index int, b anthropicReplyBlock, emit func(Delta)) error {
	if s.blocks == nil {
		s.blocks = map[int]*anthropicBlockState{}
	}
	if len(s.blocks) >= maxBlocks {
		return fmt.Errorf("more than %d content blocks", maxBlocks)
	}
	st := &anthropicBlockState{typ: b.Type, id: b.ID, name: b.Name}
	s.blocks[index] = st
	switch b.Type {
	case "text":
		if b.Text != "" {
			st.text.WriteString(b.Text)
			emit(Delta{Kind: DeltaText, Text: b.Text})
		}
	case "tool_use":
		st.call = s.calls
		s.calls++
		emit(Delta{Kind: DeltaToolCall, Index: st.call, ID: b.ID, Name: b.Name})
	}
	return nil
}

func (s *anthropicAssembly) response() Response {
	r := Response{ID: s.id, Model: s.model}
	idx := make([]int, 0, len(s.blocks))
	for i := range s.blocks {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	var text strings.Builder
	for _, i := range idx {
		b := s.blocks[i]
		switch b.typ {
		case "text":
			text.WriteString(b.text.String())
		case "tool_use":
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: b.id, Name: b.name, Args: CanonicalArgs(b.args.String())})
		}
	}
	r.Text = text.String()
	u := s.usage
	val := func(p *int64) int64 {
		if p == nil || *p < 0 {
			return 0
		}
		return *p
	}
	// Anthropic counts cached input apart from input_tokens; Usage counts
	// it inside.
	r.Usage = Usage{
		InputTokens:      val(u.InputTokens) + val(u.CacheRead) + val(u.CacheCreation),
		OutputTokens:     val(u.OutputTokens),
		CacheReadTokens:  val(u.CacheRead),
		CacheWriteTokens: val(u.CacheCreation),
	}
	if s.stop != nil {
		r.ProviderStopReason = *s.stop
	}
	r.StopReason = anthropicStop(r.ProviderStopReason)
	return r
}

func anthropicStop(s string) StopReason {
	switch s {
	case "end_turn":
		return StopEndTurn
	case "tool_use":
		return StopToolUse
	case "max_tokens":
		return StopMaxTokens
	case "stop_sequence":
		return StopSequence
	case "refusal":
		return StopRefusal
	case "pause_turn":
		return StopPause
	case "model_context_window_exceeded":
		return StopContext
	}
	return StopOther
}

// anthropicRetryable lists the error types of a stream error event that a
// retry may cure (HTTP 429, 500, 504 and 529 in a non-streamed call).
func anthropicRetryable(typ string) bool {
	switch typ {
	case "overloaded_error", "api_error", "rate_limit_error", "timeout_error":
		return true
	}
	return false
}

// decodeAnthropicStream reads a Messages API event stream: message_start,
// content_block_start/delta/stop, message_delta, message_stop, ping, error.
// Unknown events and block types (thinking, server tools) are skipped.
func decodeAnthropicStream(r io.Reader, emit func(Delta)) (Response, error) {
	rd := sse.NewReader(r, maxEventBytes)
	var s anthropicAssembly
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Response{}, fmt.Errorf("stream ended before message_stop: %w", err)
		}
		var e anthropicEvent
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			return Response{}, fmt.Errorf("decode %s event: %w", eventName(ev.Type), err)
		}
		switch e.Type {
		case "message_start":
			if e.Message != nil {
				s.id, s.model = e.Message.ID, e.Message.Model
				s.setUsage(e.Message.Usage)
			}
		case "content_block_start":
			if e.ContentBlock != nil {
				if err := s.start(e.Index, *e.ContentBlock, emit); err != nil {
					return Response{}, err
				}
			}
		case "content_block_delta":
			b := s.blocks[e.Index]
			if b == nil || e.Delta == nil {
				continue
			}
			// A delta counts only for a block of its own kind.
			switch {
			case e.Delta.Type == "text_delta" && b.typ == "text":
				b.text.WriteString(e.Delta.Text)
				if e.Delta.Text != "" {
					emit(Delta{Kind: DeltaText, Text: e.Delta.Text})
				}
			case e.Delta.Type == "input_json_delta" && b.typ == "tool_use":
				b.args.WriteString(e.Delta.PartialJSON)
				if e.Delta.PartialJSON != "" {
					emit(Delta{Kind: DeltaToolCall, Index: b.call, Args: e.Delta.PartialJSON})
				}
			}
		case "message_delta":
			if e.Delta != nil && e.Delta.StopReason != nil {
				s.stop = e.Delta.StopReason
			}
			s.setUsage(e.Usage)
		case "message_stop":
			return finish(s.response())
		case "error":
			ae := &APIError{}
			if e.Error != nil {
				ae.Type, ae.Message = e.Error.Type, cleanMessage(e.Error.Message)
			}
			ae.Retryable = anthropicRetryable(ae.Type)
			return Response{}, ae
		}
	}
}

// decodeAnthropicJSON reads the message object of a non-streamed reply.
func decodeAnthropicJSON(b []byte) (Response, error) {
	var m anthropicReply
	if err := json.Unmarshal(b, &m); err != nil {
		return Response{}, fmt.Errorf("decode message: %w", err)
	}
	s := anthropicAssembly{id: m.ID, model: m.Model, stop: m.StopReason}
	s.setUsage(m.Usage)
	for i, blk := range m.Content {
		if err := s.start(i, blk, func(Delta) {}); err != nil {
			return Response{}, err
		}
		// A whole message carries the input itself; a stream's
		// content_block_start has {} there and sends the input in deltas.
		if blk.Type == "tool_use" {
			s.blocks[i].args.Write(blk.Input)
		}
	}
	return finish(s.response())
}

// maxEventBytes bounds one server-sent event. A Responses API
// response.completed event repeats the whole reply, so it is generous.
const maxEventBytes = 16 << 20

// eventName renders a provider-chosen event name for an error message.
func eventName(s string) string {
	if len(s) > 64 {
		s = s[:64]
	}
	return fmt.Sprintf("%q", s)
}
