package model

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/airlockrun/airlock/internal/sse"
)

// Chat speaks the OpenAI Chat Completions API: POST {base}/chat/completions
// with a Bearer key, streamed as server-sent events ending in "data: [DONE]".
// Built by NewOpenAIChat it talks to OpenAI; by NewCompatibleChat to any
// server of the same API (vLLM, Ollama, llama.cpp server), and then it
// tolerates what those servers do differently: no usage (estimated
// instead), no [DONE], a tool call streamed whole, missing indices or IDs.
type Chat struct {
	c      *client
	model  string
	compat bool
}

var _ Provider = (*Chat)(nil)

// NewOpenAIChat returns a provider for OpenAI's Chat Completions API; model
// is used when a Request names none. o.Key is required.
func NewOpenAIChat(model string, o Options) (*Chat, error) {
	if o.Key.Len() == 0 {
		return nil, errors.New("openai: no API key")
	}
	c, err := newClient("openai", "https://api.openai.com/v1", "x-request-id", o)
	if err != nil {
		return nil, err
	}
	return &Chat{c: c, model: model}, nil
}

// NewCompatibleChat returns a provider for an OpenAI-compatible Chat
// Completions server at o.BaseURL (required, including the /v1 prefix if the
// server has one). o.Key is optional: local servers usually need none.
func NewCompatibleChat(model string, o Options) (*Chat, error) {
	if o.BaseURL == "" {
		return nil, errors.New("openai-compatible: a base URL is required")
	}
	c, err := newClient("openai-compatible", "", "x-request-id", o)
	if err != nil {
		return nil, err
	}
	return &Chat{c: c, model: model, compat: true}, nil
}

// Complete implements Provider.
func (p *Chat) Complete(ctx context.Context, req Request, stream func(Delta)) (Response, error) {
	body, err := encodeChat(req, p.model, p.c.maxTokens, p.compat)
	if err != nil {
		return Response{}, fmt.Errorf("%s: %w", p.c.provider, err)
	}
	fix := func(r Response, err error) (Response, error) {
		if err == nil && r.Usage == (Usage{}) {
			r.Usage = estimateUsage(req, r)
		}
		return r, err
	}
	return p.c.complete(ctx, exchange{
		path: "/chat/completions",
		body: body,
		header: func(h http.Header) {
			if p.c.key.Len() > 0 {
				h.Set("Authorization", "Bearer "+string(p.c.key.Reveal()))
			}
		},
		decodeStream: func(r io.Reader, emit func(Delta)) (Response, error) {
			return fix(decodeChatStream(r, emit))
		},
		decodeJSON: func(b []byte) (Response, error) { return fix(decodeChatJSON(b)) },
	}, stream)
}

// The request body of POST /chat/completions.
type chatRequest struct {
	Model    string        `json:"model"`
	Messages []chatMessage `json:"messages"`
	Tools    []chatTool    `json:"tools,omitempty"`
	// OpenAI deprecated max_tokens for max_completion_tokens (its reasoning
	// models refuse max_tokens); compatible servers know max_tokens.
	MaxCompletionTokens int                `json:"max_completion_tokens,omitempty"`
	MaxTokens           int                `json:"max_tokens,omitempty"`
	Temperature         *float64           `json:"temperature,omitempty"`
	Stream              bool               `json:"stream"`
	StreamOptions       *chatStreamOptions `json:"stream_options,omitempty"`
}

type chatStreamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

type chatMessage struct {
	Role string `json:"role"`
	// Content is omitted only for an assistant message made of tool calls.
	Content    *string        `json:"content,omitempty"`
	ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
	ToolCallID string         `json:"tool_call_id,omitempty"`
}

type chatToolCall struct {
	ID       string           `json:"id"`
	Type     string           `json:"type"`
	Function chatFunctionCall `json:"function"`
}

type chatFunctionCall struct {
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type chatTool struct {
	Type     string       `json:"type"`
	Function chatFunction `json:"function"`
}

type chatFunction struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
}

// toolErrorPrefix marks a failed tool's output for APIs without an is_error
// flag.
const toolErrorPrefix = "Error: "

func encodeChat(req Request, defaultModel string, defaultMax int, compat bool) ([]byte, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	out := chatRequest{
		Model:         req.Model,
		Temperature:   req.Temperature,
		Stream:        true,
		StreamOptions: &chatStreamOptions{IncludeUsage: true},
	}
	if out.Model == "" {
		out.Model = defaultModel
	}
	if out.Model == "" {
		return nil, errors.New("no model named")
	}
	limit := req.MaxTokens
	if limit <= 0 {
		limit = defaultMax
	}
	if compat {
		out.MaxTokens = limit
	} else {
		out.MaxCompletionTokens = limit
	}
	for _, t := range req.Tools {
		schema := t.Schema
		if len(schema) == 0 {
			schema = emptySchema
		}
		out.Tools = append(out.Tools, chatTool{Type: "function", Function: chatFunction{
			Name: t.Name, Description: t.Description, Parameters: schema,
		}})
	}
	if req.System != "" {
		out.Messages = append(out.Messages, chatMessage{Role: "system", Content: &req.System})
	}
	for _, m := range req.Messages {
		switch m.Role {
		case RoleUser:
			text := joinText(m.Content)
			out.Messages = append(out.Messages, chatMessage{Role: "user", Content: &text})
		case RoleAssistant:
			msg := chatMessage{Role: "assistant"}
			if text := joinText(m.Content); text != "" {
				msg.Content = &text
			}
			for _, p := range m.Content {
				if p.Type == PartToolCall {
					msg.ToolCalls = append(msg.ToolCalls, chatToolCall{
						ID: p.ToolCall.ID, Type: "function",
						Function: chatFunctionCall{Name: p.ToolCall.Name, Arguments: string(p.ToolCall.Args)},
					})
				}
			}
			if msg.Content == nil && len(msg.ToolCalls) == 0 {
				empty := ""
				msg.Content = &empty
			}
			out.Messages = append(out.Messages, msg)
		case RoleTool:
			for _, p := range m.Content {
				r := p.ToolResult
				content := r.Content
				if r.IsError {
					content = toolErrorPrefix + content
				}
				out.Messages = append(out.Messages, chatMessage{Role: "tool", ToolCallID: r.CallID, Content: &content})
			}
		}
	}
	return json.Marshal(out)
}

// joinText joins the text parts of a message with blank lines.
func joinText(parts []Part) string {
	var texts []string
	for _, p := range parts {
		if p.Type == PartText && p.Text != "" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n\n")
}

// chatUsage is the usage object of a completion or of the last chunk.
type chatUsage struct {
	PromptTokens        int64 `json:"prompt_tokens"`
	CompletionTokens    int64 `json:"completion_tokens"`
	PromptTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

func (u *chatUsage) usage() Usage {
	out := Usage{InputTokens: max(u.PromptTokens, 0), OutputTokens: max(u.CompletionTokens, 0)}
	if u.PromptTokensDetails != nil {
		out.CacheReadTokens = max(u.PromptTokensDetails.CachedTokens, 0)
	}
	return out
}

// chatToolCallDelta is a tool call in a streamed delta or a whole message.
// Index and ID may be missing on compatible servers.
type chatToolCallDelta struct {
	Index    *int   `json:"index"`
	ID       string `json:"id"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

// chatChoiceMessage is choices[].delta of a chunk or choices[].message of a
// completion.
type chatChoiceMessage struct {
	Content   *string             `json:"content"`
	Refusal   *string             `json:"refusal"`
	ToolCalls []chatToolCallDelta `json:"tool_calls"`
}

// chatChunk is a chat.completion.chunk, or a chat.completion, or an error
// object some servers send in place of a chunk.
type chatChunk struct {
	ID      string `json:"id"`
	Model   string `json:"model"`
	Choices []struct {
		Index        int                `json:"index"`
		Delta        *chatChoiceMessage `json:"delta"`
		Message      *chatChoiceMessage `json:"message"`
		FinishReason *string            `json:"finish_reason"`
	} `json:"choices"`
	Usage *chatUsage      `json:"usage"`
	Error json.RawMessage `json:"error"`
}

// chatAssembly builds a Response from chunks.
type chatAssembly struct {
	id, model string
	text      strings.Builder
	refused   bool
	calls     []*chatCallState
	finish    *string
	usage     *chatUsage
}

type chatCallState struct {
	index    int
	id, name string
	args     strings.Builder
}

// maxToolCalls bounds the tool calls of one reply.
const maxToolCalls = 256

func (s *chatAssembly) add(c *chatChunk, streamed bool, emit func(Delta)) error {
	if s.id == "" {
		s.id = c.ID
	}
	if s.model == "" {
		s.model = c.Model
	}
	if c.Usage != nil {
		s.usage = c.Usage
	}
	for _, ch := range c.Choices {
		if ch.Index != 0 { // only one choice is asked for
			continue
		}
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			s.finish = ch.FinishReason
		}
		m := ch.Delta
		if !streamed || m == nil {
			m = ch.Message
		}
		if m == nil {
			continue
		}
		if m.Content != nil && *m.Content != "" {
			s.text.WriteString(*m.Content)
			emit(Delta{Kind: DeltaText, Text: *m.Content})
		}
		if m.Refusal != nil && *m.Refusal != "" {
			s.refused = true
			s.text.WriteString(*m.Refusal)
			emit(Delta{Kind: DeltaText, Text: *m.Refusal})
		}
		for i := range m.ToolCalls {
			if err := s.addCall(&m.ToolCalls[i], streamed, emit); err != nil {
				return err
			}
		}
	}
	return nil
}

// addCall merges one tool-call delta: by index when given; else as a new
// call when it brings a new ID (or, for a whole message, always); else into
// the latest call.
func (s *chatAssembly) addCall(d *chatToolCallDelta, streamed bool, emit func(Delta)) error {
	var st *chatCallState
	switch {
	case d.Index != nil:
		for _, c := range s.calls {
			if c.index == *d.Index {
				st = c
				break
			}
		}
	case streamed && len(s.calls) > 0 && (d.ID == "" || d.ID == s.calls[len(s.calls)-1].id):
		st = s.calls[len(s.calls)-1]
	}
	if st == nil {
		if len(s.calls) >= maxToolCalls {
			return fmt.Errorf("more than %d tool calls", maxToolCalls)
		}
		st = &chatCallState{index: len(s.calls)}
		if d.Index != nil {
			st.index = *d.Index
		}
		s.calls = append(s.calls, st)
	}
	ord := 0
	for i, c := range s.calls {
		if c == st {
			ord = i
		}
	}
	start := Delta{Kind: DeltaToolCall, Index: ord}
	if d.ID != "" && st.id == "" {
		st.id, start.ID = d.ID, d.ID
	}
	// OpenAI sends the name once; some servers repeat it in every delta,
	// others might split it: repeats are ignored, fragments appended.
	if n := d.Function.Name; n != "" && n != st.name {
		st.name += n
		start.Name = n
	}
	if start.ID != "" || start.Name != "" {
		emit(start)
	}
	if a := d.Function.Arguments; a != "" {
		st.args.WriteString(a)
		emit(Delta{Kind: DeltaToolCall, Index: ord, Args: a})
	}
	return nil
}

func (s *chatAssembly) response() Response {
	r := Response{ID: s.id, Model: s.model, Text: s.text.String()}
	for _, c := range s.calls {
		r.ToolCalls = append(r.ToolCalls, ToolCall{ID: c.id, Name: c.name, Args: CanonicalArgs(c.args.String())})
	}
	if s.finish != nil {
		r.ProviderStopReason = *s.finish
	}
	switch r.ProviderStopReason {
	case "stop", "":
		r.StopReason = StopEndTurn
	case "length":
		r.StopReason = StopMaxTokens
	case "tool_calls", "function_call":
		r.StopReason = StopToolUse
	case "content_filter":
		r.StopReason = StopRefusal
	default:
		r.StopReason = StopOther
	}
	// Some servers say "stop" after tool calls.
	if r.StopReason == StopEndTurn && len(r.ToolCalls) > 0 {
		r.StopReason = StopToolUse
	}
	if s.refused && r.StopReason == StopEndTurn {
		r.StopReason = StopRefusal
	}
	if s.usage != nil {
		r.Usage = s.usage.usage()
	}
	return r
}

// chatStreamError turns an error sent in place of a chunk (an "error"
// member, or the data of an "error" event) into an APIError.
func chatStreamError(raw []byte) *APIError {
	e := &APIError{}
	if json.Valid(raw) {
		e.parseErrorBody(raw)
	} else {
		e.Message = string(raw)
	}
	e.Message = cleanMessage(e.Message)
	e.Type = cleanMessage(e.Type)
	e.Code = cleanMessage(e.Code)
	switch {
	case e.Type == "server_error", e.Type == "api_error", e.Type == "rate_limit_error",
		e.Type == "overloaded_error", e.Type == "timeout",
		e.Code == "server_error", e.Code == "rate_limit_exceeded",
		strings.HasPrefix(e.Code, "5") && len(e.Code) == 3:
		e.Retryable = true
	}
	return e
}

// decodeChatStream reads a Chat Completions event stream: chunks, an
// optional usage chunk with no choices, then [DONE]. A stream that ends
// without [DONE] after a finish_reason is accepted (compatible servers).
func decodeChatStream(r io.Reader, emit func(Delta)) (Response, error) {
	rd := sse.NewReader(r, maxEventBytes)
	var s chatAssembly
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				if s.finish != nil {
					return finish(s.response())
				}
				err = io.ErrUnexpectedEOF
			}
			return Response{}, fmt.Errorf("stream ended before [DONE]: %w", err)
		}
		data := strings.TrimSpace(ev.Data)
		if data == "[DONE]" {
			return finish(s.response())
		}
		if data == "" {
			continue
		}
		if ev.Type == "error" {
			return Response{}, chatStreamError([]byte(data))
		}
		var c chatChunk
		if err := json.Unmarshal([]byte(data), &c); err != nil {
			return Response{}, fmt.Errorf("decode chunk: %w", err)
		}
		if len(c.Error) > 0 && string(c.Error) != "null" {
			return Response{}, chatStreamError([]byte(data))
		}
		if err := s.add(&c, true, emit); err != nil {
			return Response{}, err
		}
	}
}

// decodeChatJSON reads a non-streamed chat.completion.
func decodeChatJSON(b []byte) (Response, error) {
	var c chatChunk
	if err := json.Unmarshal(b, &c); err != nil {
		return Response{}, fmt.Errorf("decode completion: %w", err)
	}
	if len(c.Error) > 0 && string(c.Error) != "null" {
		return Response{}, chatStreamError(b)
	}
	var s chatAssembly
	if err := s.add(&c, false, func(Delta) {}); err != nil {
		return Response{}, err
	}
	return finish(s.response())
}
