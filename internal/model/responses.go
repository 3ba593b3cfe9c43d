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

// Responses speaks the OpenAI Responses API: POST {base}/responses with a
// Bearer key, streamed as typed server-sent events that end with
// response.completed, response.incomplete or response.failed. Requests are
// stateless (store: false): the whole conversation goes with every call, as
// the loop's event log, not OpenAI, is the record.
type Responses struct {
	c     *client
	model string
}

var _ Provider = (*Responses)(nil)

// NewOpenAIResponses returns a provider for OpenAI's Responses API; model is
// used when a Request names none. o.Key is required.
func NewOpenAIResponses(model string, o Options) (*Responses, error) {
	if o.Key.Len() == 0 {
		return nil, errors.New("openai-responses: no API key")
	}
	c, err := newClient("openai-responses", "https://api.openai.com/v1", "x-request-id", o)
	if err != nil {
		return nil, err
	}
	return &Responses{c: c, model: model}, nil
}

// Complete implements Provider.
func (p *Responses) Complete(ctx context.Context, req Request, stream func(Delta)) (Response, error) {
	body, err := encodeResponses(req, p.model, p.c.maxTokens)
	if err != nil {
		return Response{}, fmt.Errorf("openai-responses: %w", err)
	}
	return p.c.complete(ctx, exchange{
		path: "/responses",
		body: body,
		header: func(h http.Header) {
			h.Set("Authorization", "Bearer "+string(p.c.key.Reveal()))
		},
		decodeStream: decodeResponsesStream,
		decodeJSON:   decodeResponsesJSON,
	}, stream)
}

// The request body of POST /responses.
type responsesRequest struct {
	Model           string          `json:"model"`
	Instructions    string          `json:"instructions,omitempty"`
	Input           []any           `json:"input"`
	Tools           []responsesTool `json:"tools,omitempty"`
	MaxOutputTokens int             `json:"max_output_tokens,omitempty"`
	Temperature     *float64        `json:"temperature,omitempty"`
	Stream          bool            `json:"stream"`
	Store           bool            `json:"store"`
}

// responsesTool is a function tool. Strict is sent as false on purpose: the
// Responses API defaults it to true, which requires every schema to forbid
// additional properties and list every property as required.
type responsesTool struct {
	Type        string          `json:"type"`
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	Parameters  json.RawMessage `json:"parameters"`
	Strict      bool            `json:"strict"`
}

type responsesMessageItem struct {
	Type    string `json:"type"`
	Role    string `json:"role"`
	Content string `json:"content"`
}

// responsesCallItem replays a function call. Its output-item id (fc_…) is
// left out on purpose: with it, reasoning models demand the reasoning item
// that came before it, which a stateless request does not carry.
type responsesCallItem struct {
	Type      string `json:"type"`
	CallID    string `json:"call_id"`
	Name      string `json:"name"`
	Arguments string `json:"arguments"`
}

type responsesOutputItem struct {
	Type   string `json:"type"`
	CallID string `json:"call_id"`
	Output string `json:"output"`
}

func encodeResponses(req Request, defaultModel string, defaultMax int) ([]byte, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	out := responsesRequest{
		Model:           req.Model,
		Instructions:    req.System,
		MaxOutputTokens: req.MaxTokens,
		Temperature:     req.Temperature,
		Stream:          true,
		Input:           []any{},
	}
	if out.Model == "" {
		out.Model = defaultModel
	}
	if out.Model == "" {
		return nil, errors.New("no model named")
	}
	if out.MaxOutputTokens <= 0 {
		out.MaxOutputTokens = defaultMax
	}
	for _, t := range req.Tools {
		schema := t.Schema
		if len(schema) == 0 {
			schema = emptySchema
		}
		out.Tools = append(out.Tools, responsesTool{Type: "function", Name: t.Name, Description: t.Description, Parameters: schema})
	}
	for _, m := range req.Messages {
		if text := joinText(m.Content); text != "" {
			out.Input = append(out.Input, responsesMessageItem{Type: "message", Role: string(m.Role), Content: text})
		}
		for _, p := range m.Content {
			switch p.Type {
			case PartToolCall:
				c := p.ToolCall
				out.Input = append(out.Input, responsesCallItem{Type: "function_call", CallID: c.ID, Name: c.Name, Arguments: string(c.Args)})
			case PartToolResult:
				r := p.ToolResult
				content := r.Content
				if r.IsError {
					content = toolErrorPrefix + content
				}
				out.Input = append(out.Input, responsesOutputItem{Type: "function_call_output", CallID: r.CallID, Output: content})
			}
		}
	}
	return json.Marshal(out)
}

// responsesObject is a response object: the body of a non-streamed call and
// the payload of the lifecycle events.
type responsesObject struct {
	ID                string          `json:"id"`
	Model             string          `json:"model"`
	Status            string          `json:"status"`
	Output            []responsesItem `json:"output"`
	Usage             *responsesUsage `json:"usage"`
	IncompleteDetails *struct {
		Reason string `json:"reason"`
	} `json:"incomplete_details"`
	Error *providerErrorDetail `json:"error"`
}

// responsesItem is an output item; message and function_call are used,
// the rest (reasoning, built-in tools) skipped.
type responsesItem struct {
	Type      string             `json:"type"`
	ID        string             `json:"id"`
	CallID    string             `json:"call_id"`
	Name      string             `json:"name"`
	Arguments string             `json:"arguments"`
	Content   []responsesContent `json:"content"`
}

// responsesContent is a content part of a message item.
type responsesContent struct {
	Type    string `json:"type"`
	Text    string `json:"text"`
	Refusal string `json:"refusal"`
}

type responsesUsage struct {
	InputTokens        int64 `json:"input_tokens"`
	OutputTokens       int64 `json:"output_tokens"`
	InputTokensDetails *struct {
		CachedTokens int64 `json:"cached_tokens"`
	} `json:"input_tokens_details"`
}

// responsesEvent is the data of one stream event. Delta stays raw: only the
// text and argument deltas, both strings, are read.
type responsesEvent struct {
	Type        string               `json:"type"`
	Response    *responsesObject     `json:"response"`
	OutputIndex int                  `json:"output_index"`
	Item        *responsesItem       `json:"item"`
	Delta       json.RawMessage      `json:"delta"`
	Arguments   *string              `json:"arguments"`
	Code        json.RawMessage      `json:"code"`
	Message     string               `json:"message"`
	Error       *providerErrorDetail `json:"error"`
}

func (e *responsesEvent) deltaText() string {
	var s string
	_ = json.Unmarshal(e.Delta, &s)
	return s
}

// responsesAssembly builds a Response from stream events.
type responsesAssembly struct {
	id, model string
	items     map[int]*responsesItemState
	calls     int
}

type responsesItemState struct {
	typ          string
	callID, name string
	args, text   strings.Builder
	refused      bool
	call         int            // ordinal among the tool calls
	final        *responsesItem // from response.output_item.done
}

func (s *responsesAssembly) item(index int, typ string) (*responsesItemState, error) {
	if st := s.items[index]; st != nil {
		return st, nil
	}
	if s.items == nil {
		s.items = map[int]*responsesItemState{}
	}
	if len(s.items) >= maxBlocks {
		return nil, fmt.Errorf("more than %d output items", maxBlocks)
	}
	st := &responsesItemState{typ: typ}
	if typ == "function_call" {
		st.call = s.calls
		s.calls++
	}
	s.items[index] = st
	return st, nil
}

// response assembles the reply. The final response object's output is
// authoritative when it has one; the streamed items serve otherwise.
func (s *responsesAssembly) response(obj *responsesObject) Response {
	var items []responsesItem
	var refused bool
	if obj != nil && len(obj.Output) > 0 {
		items = obj.Output
	} else {
		idx := make([]int, 0, len(s.items))
		for i := range s.items {
			idx = append(idx, i)
		}
		sort.Ints(idx)
		for _, i := range idx {
			st := s.items[i]
			if st.final != nil {
				items = append(items, *st.final)
				continue
			}
			refused = refused || st.refused
			it := responsesItem{Type: st.typ, CallID: st.callID, Name: st.name, Arguments: st.args.String()}
			if st.typ == "message" {
				it.Content = append(it.Content, responsesContent{Type: "output_text", Text: st.text.String()})
			}
			items = append(items, it)
		}
	}
	r := Response{ID: s.id, Model: s.model}
	var text strings.Builder
	for _, it := range items {
		switch it.Type {
		case "message":
			for _, c := range it.Content {
				switch c.Type {
				case "output_text":
					text.WriteString(c.Text)
				case "refusal":
					refused = true
					text.WriteString(c.Refusal)
				}
			}
		case "function_call":
			r.ToolCalls = append(r.ToolCalls, ToolCall{ID: it.CallID, Name: it.Name, Args: CanonicalArgs(it.Arguments)})
		}
	}
	r.Text = text.String()
	status, reason := "", ""
	if obj != nil {
		if obj.ID != "" {
			r.ID = obj.ID
		}
		if obj.Model != "" {
			r.Model = obj.Model
		}
		status = obj.Status
		if obj.IncompleteDetails != nil {
			reason = obj.IncompleteDetails.Reason
		}
		if u := obj.Usage; u != nil {
			r.Usage = Usage{InputTokens: max(u.InputTokens, 0), OutputTokens: max(u.OutputTokens, 0)}
			if u.InputTokensDetails != nil {
				r.Usage.CacheReadTokens = max(u.InputTokensDetails.CachedTokens, 0)
			}
		}
	}
	r.ProviderStopReason = status
	if reason != "" {
		r.ProviderStopReason = status + ":" + reason
	}
	switch {
	case status == "incomplete" && reason == "max_output_tokens":
		r.StopReason = StopMaxTokens
	case status == "incomplete" && reason == "content_filter", refused:
		r.StopReason = StopRefusal
	case status == "completed" && len(r.ToolCalls) > 0:
		r.StopReason = StopToolUse
	case status == "completed":
		r.StopReason = StopEndTurn
	default:
		r.StopReason = StopOther
	}
	return r
}

// responsesError turns a failed response or an error event into an APIError.
func responsesError(code, message, typ string) *APIError {
	e := &APIError{Code: cleanMessage(code), Message: cleanMessage(message), Type: cleanMessage(typ)}
	switch e.Code {
	case "server_error", "rate_limit_exceeded", "overloaded", "timeout":
		e.Retryable = true
	}
	if e.Type == "server_error" {
		e.Retryable = true
	}
	return e
}

// decodeResponsesStream reads a Responses API event stream.
func decodeResponsesStream(r io.Reader, emit func(Delta)) (Response, error) {
	rd := sse.NewReader(r, maxEventBytes)
	var s responsesAssembly
	for {
		ev, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return Response{}, fmt.Errorf("stream ended before response.completed: %w", err)
		}
		var e responsesEvent
		if err := json.Unmarshal([]byte(ev.Data), &e); err != nil {
			return Response{}, fmt.Errorf("decode %s event: %w", eventName(ev.Type), err)
		}
		switch e.Type {
		case "response.created", "response.in_progress":
			if e.Response != nil {
				s.id, s.model = e.Response.ID, e.Response.Model
			}
		case "response.output_item.added":
			if e.Item == nil {
				continue
			}
			st, err := s.item(e.OutputIndex, e.Item.Type)
			if err != nil {
				return Response{}, err
			}
			st.callID, st.name = e.Item.CallID, e.Item.Name
			if st.typ == "function_call" {
				emit(Delta{Kind: DeltaToolCall, Index: st.call, ID: st.callID, Name: st.name})
				if e.Item.Arguments != "" {
					st.args.WriteString(e.Item.Arguments)
					emit(Delta{Kind: DeltaToolCall, Index: st.call, Args: e.Item.Arguments})
				}
			}
		case "response.output_text.delta", "response.refusal.delta":
			st, err := s.item(e.OutputIndex, "message")
			if err != nil {
				return Response{}, err
			}
			d := e.deltaText()
			st.text.WriteString(d)
			st.refused = st.refused || e.Type == "response.refusal.delta"
			if d != "" {
				emit(Delta{Kind: DeltaText, Text: d})
			}
		case "response.function_call_arguments.delta":
			st, err := s.item(e.OutputIndex, "function_call")
			if err != nil {
				return Response{}, err
			}
			if d := e.deltaText(); d != "" {
				st.args.WriteString(d)
				emit(Delta{Kind: DeltaToolCall, Index: st.call, Args: d})
			}
		case "response.function_call_arguments.done":
			if st := s.items[e.OutputIndex]; st != nil && e.Arguments != nil {
				st.args.Reset()
				st.args.WriteString(*e.Arguments)
			}
		case "response.output_item.done":
			if e.Item == nil {
				continue
			}
			st, err := s.item(e.OutputIndex, e.Item.Type)
			if err != nil {
				return Response{}, err
			}
			st.final = e.Item
		case "response.completed", "response.incomplete":
			return finish(s.response(e.Response))
		case "response.failed":
			code, msg := "", "response failed"
			if e.Response != nil && e.Response.Error != nil {
				code, msg = rawCode(e.Response.Error.Code), e.Response.Error.Message
			}
			return Response{}, responsesError(code, msg, "")
		case "error":
			code, msg, typ := rawCode(e.Code), e.Message, ""
			if e.Error != nil {
				code, msg, typ = rawCode(e.Error.Code), e.Error.Message, e.Error.Type
			}
			return Response{}, responsesError(code, msg, typ)
		}
	}
}

// decodeResponsesJSON reads a non-streamed response object.
func decodeResponsesJSON(b []byte) (Response, error) {
	var obj responsesObject
	if err := json.Unmarshal(b, &obj); err != nil {
		return Response{}, fmt.Errorf("decode response: %w", err)
	}
	if obj.Status == "failed" {
		code, msg := "", "response failed"
		if obj.Error != nil {
			code, msg = rawCode(obj.Error.Code), obj.Error.Message
		}
		return Response{}, responsesError(code, msg, "")
	}
	var s responsesAssembly
	return finish(s.response(&obj))
}
