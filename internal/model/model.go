package model

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Provider sends a conversation to a language model and returns its reply.
//
// Complete makes one model turn. stream, when not nil, is called with each
// fragment of the reply as it arrives, on the calling goroutine, before
// Complete returns; a Delta of kind DeltaReset means the request is being
// retried and what was streamed so far is void. The returned Response is the
// whole turn and is what the caller records; the deltas are for display only.
// Complete returns when ctx is done, with an error wrapping ctx's error.
type Provider interface {
	Complete(ctx context.Context, req Request, stream func(Delta)) (Response, error)
}

// Role says who wrote a Message.
type Role string

// The roles of a conversation. Tool messages carry the results of the tool
// calls of the assistant message before them.
const (
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Request is one model call, in a provider-neutral form. It marshals to JSON
// so that the run engine can record it.
type Request struct {
	// Model is the provider's model name; empty means the provider's
	// default (the one named when it was built).
	Model string `json:"model,omitempty"`
	// System is the system prompt.
	System   string     `json:"system,omitempty"`
	Messages []Message  `json:"messages"`
	Tools    []ToolSpec `json:"tools,omitempty"`
	// MaxTokens caps the reply's length; zero means the provider's default.
	MaxTokens int `json:"max_tokens,omitempty"`
	// Temperature is sent only when not nil.
	Temperature *float64 `json:"temperature,omitempty"`
}

// Message is one turn of the conversation.
type Message struct {
	Role    Role   `json:"role"`
	Content []Part `json:"content"`
}

// PartType says which field of a Part is set.
type PartType string

// The kinds of content a Message holds.
const (
	PartText       PartType = "text"
	PartToolCall   PartType = "tool_call"
	PartToolResult PartType = "tool_result"
)

// Part is one piece of a message: text (any role), a tool call (assistant
// messages) or a tool result (tool messages). Exactly the field named by
// Type is set.
type Part struct {
	Type       PartType    `json:"type"`
	Text       string      `json:"text,omitempty"`
	ToolCall   *ToolCall   `json:"tool_call,omitempty"`
	ToolResult *ToolResult `json:"tool_result,omitempty"`
}

// TextPart returns a text Part.
func TextPart(s string) Part { return Part{Type: PartText, Text: s} }

// ToolCallPart returns a tool-call Part.
func ToolCallPart(c ToolCall) Part { return Part{Type: PartToolCall, ToolCall: &c} }

// ToolResultPart returns a tool-result Part.
func ToolResultPart(r ToolResult) Part { return Part{Type: PartToolResult, ToolResult: &r} }

// ToolCall is the model's request to run a tool.
type ToolCall struct {
	// ID is the provider's call ID; the result must carry it back.
	ID   string `json:"id"`
	Name string `json:"name"`
	// Args is the arguments as the model wrote them, in canonical JSON
	// (compact, as encoding/json writes it), so a recorded call marshals
	// back to the same bytes. Arguments that are not valid JSON are kept as
	// one JSON string holding the raw text, which fails any object schema;
	// empty arguments become {}.
	Args json.RawMessage `json:"args"`
}

// ToolResult is the outcome of a ToolCall, sent back to the model.
type ToolResult struct {
	CallID  string `json:"call_id"`
	Content string `json:"content"`
	IsError bool   `json:"is_error,omitempty"`
}

// ToolSpec describes a tool the model may call.
type ToolSpec struct {
	// Name must match ^[a-zA-Z0-9_-]{1,64}$, the rule of every provider.
	Name        string `json:"name"`
	Description string `json:"description,omitempty"`
	// Schema is the JSON Schema of the arguments, an object schema; empty
	// means {"type":"object"}.
	Schema json.RawMessage `json:"schema,omitempty"`
}

// StopReason says why the model stopped, normalised across providers.
type StopReason string

// The normalised stop reasons. Response.ProviderStopReason keeps the
// provider's own value.
const (
	StopEndTurn   StopReason = "end_turn"       // the model finished its turn
	StopToolUse   StopReason = "tool_use"       // the model wants its tool calls run
	StopMaxTokens StopReason = "max_tokens"     // the reply hit the token cap
	StopSequence  StopReason = "stop_sequence"  // a stop sequence matched
	StopRefusal   StopReason = "refusal"        // the provider's safety system stopped the reply
	StopContext   StopReason = "context_window" // the context window filled up
	StopPause     StopReason = "pause"          // the provider paused a long turn (Anthropic pause_turn)
	StopOther     StopReason = "other"          // anything else; see ProviderStopReason
)

// Usage is the token accounting of one model call.
type Usage struct {
	// InputTokens counts every input token, cached or not: CacheRead and
	// CacheWrite are parts of it, not additions to it.
	InputTokens  int64 `json:"input_tokens"`
	OutputTokens int64 `json:"output_tokens"`
	// CacheReadTokens are input tokens served from the provider's prompt
	// cache; CacheWriteTokens were written to it.
	CacheReadTokens  int64 `json:"cache_read_tokens,omitempty"`
	CacheWriteTokens int64 `json:"cache_write_tokens,omitempty"`
	// Estimated is true when the provider reported no usage and the numbers
	// are EstimateTokens guesses (chars/4), not counts.
	Estimated bool `json:"estimated,omitempty"`
}

// Add returns the sum of u and v; the sum is estimated if either is.
func (u Usage) Add(v Usage) Usage {
	return Usage{
		InputTokens:      u.InputTokens + v.InputTokens,
		OutputTokens:     u.OutputTokens + v.OutputTokens,
		CacheReadTokens:  u.CacheReadTokens + v.CacheReadTokens,
		CacheWriteTokens: u.CacheWriteTokens + v.CacheWriteTokens,
		Estimated:        u.Estimated || v.Estimated,
	}
}

// Response is one whole model turn. A Response marshals to JSON and
// unmarshals back to an equal value (reflect.DeepEqual), so a recorded turn
// can be replayed instead of requested again.
type Response struct {
	// ID is the provider's ID of the reply (msg_…, chatcmpl-…, resp_…).
	ID string `json:"id,omitempty"`
	// Model is the model that answered, as the provider names it;
	// "scripted" for the scripted provider.
	Model     string     `json:"model,omitempty"`
	Text      string     `json:"text,omitempty"`
	ToolCalls []ToolCall `json:"tool_calls,omitempty"`
	// StopReason is normalised; ProviderStopReason is the provider's value.
	StopReason         StopReason `json:"stop_reason"`
	ProviderStopReason string     `json:"provider_stop_reason,omitempty"`
	Usage              Usage      `json:"usage"`
	// ProviderRequestID is the provider's request ID header (request-id,
	// x-request-id), for support tickets.
	ProviderRequestID string `json:"provider_request_id,omitempty"`
}

// Message returns the assistant message that records r in the conversation.
func (r Response) Message() Message {
	m := Message{Role: RoleAssistant}
	if r.Text != "" {
		m.Content = append(m.Content, TextPart(r.Text))
	}
	for _, c := range r.ToolCalls {
		m.Content = append(m.Content, ToolCallPart(c))
	}
	return m
}

// DeltaKind says what a Delta carries.
type DeltaKind string

// The kinds of Delta.
const (
	// DeltaText carries a fragment of the reply's text in Text.
	DeltaText DeltaKind = "text"
	// DeltaToolCall carries a fragment of tool call number Index of this
	// turn (counting from 0): its ID and Name when the call starts, then
	// fragments of its argument JSON in Args.
	DeltaToolCall DeltaKind = "tool_call"
	// DeltaReset says the request is being retried: discard every delta
	// streamed so far.
	DeltaReset DeltaKind = "reset"
)

// Delta is a streamed fragment of a reply.
type Delta struct {
	Kind  DeltaKind `json:"kind"`
	Text  string    `json:"text,omitempty"`
	Index int       `json:"index,omitempty"`
	ID    string    `json:"id,omitempty"`
	Name  string    `json:"name,omitempty"`
	Args  string    `json:"args,omitempty"`
}

var toolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Validate reports every structural problem of r that a provider would
// reject: unknown roles, parts in the wrong role, tool results that answer
// no call of the preceding assistant message, bad tool names or schemas.
func (r Request) Validate() error {
	var errs []error
	seen := map[string]bool{}
	for i, t := range r.Tools {
		if !toolNameRE.MatchString(t.Name) {
			errs = append(errs, fmt.Errorf("tool %d: name %q does not match %s", i, t.Name, toolNameRE))
		}
		if seen[t.Name] {
			errs = append(errs, fmt.Errorf("tool %d: duplicate name %q", i, t.Name))
		}
		seen[t.Name] = true
		if len(t.Schema) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(t.Schema, &obj); err != nil {
				errs = append(errs, fmt.Errorf("tool %q: schema is not a JSON object: %w", t.Name, err))
			}
		}
	}
	if len(r.Messages) == 0 {
		errs = append(errs, errors.New("no messages"))
	}
	// Both APIs require the tool messages right after an assistant message
	// to answer each of its calls exactly once, and nothing else.
	calls := map[string]bool{}   // IDs of the latest assistant message's calls
	pending := map[string]bool{} // those not answered yet
	for i, m := range r.Messages {
		if len(m.Content) == 0 {
			errs = append(errs, fmt.Errorf("message %d (%s): no content", i, m.Role))
		}
		switch m.Role {
		case RoleUser, RoleAssistant, RoleTool:
		default:
			errs = append(errs, fmt.Errorf("message %d: unknown role %q", i, m.Role))
			continue
		}
		if m.Role != RoleTool && len(pending) > 0 {
			errs = append(errs, fmt.Errorf("message %d (%s): tool calls %s of the preceding assistant message have no result", i, m.Role, idList(pending)))
			clear(pending)
		}
		if m.Role == RoleTool && (i == 0 || r.Messages[i-1].Role != RoleAssistant && r.Messages[i-1].Role != RoleTool) {
			errs = append(errs, fmt.Errorf("message %d (tool): does not follow the assistant message whose calls it answers", i))
		}
		if m.Role == RoleAssistant {
			calls = map[string]bool{}
		}
		for j, p := range m.Content {
			if err := p.check(m.Role, calls, pending); err != nil {
				errs = append(errs, fmt.Errorf("message %d (%s) part %d: %w", i, m.Role, j, err))
			}
		}
	}
	if len(pending) > 0 {
		errs = append(errs, fmt.Errorf("tool calls %s of the last assistant message have no result", idList(pending)))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("model: invalid request: %w", err)
	}
	return nil
}

// check validates one part of a message of role. calls holds the IDs of the
// latest assistant message's tool calls, pending those still unanswered; a
// call part adds its ID to both, a result part takes its ID from pending.
func (p Part) check(role Role, calls, pending map[string]bool) error {
	set := 0
	if p.ToolCall != nil {
		set++
	}
	if p.ToolResult != nil {
		set++
	}
	switch p.Type {
	case PartText:
		if set != 0 {
			return errors.New("text part with a tool field set")
		}
		if role == RoleTool {
			return errors.New("text in a tool message")
		}
	case PartToolCall:
		if set != 1 || p.ToolCall == nil || p.Text != "" {
			return errors.New("tool_call part must set only ToolCall")
		}
		if role != RoleAssistant {
			return errors.New("tool call outside an assistant message")
		}
		// A call's name is checked only for presence: it is the model's
		// word, sent back as it came, and a name outside the tools was
		// answered with an error result already.
		c := p.ToolCall
		if c.ID == "" || c.Name == "" {
			return fmt.Errorf("tool call %q/%q: need an ID and a name", c.ID, c.Name)
		}
		if !json.Valid(c.Args) {
			return fmt.Errorf("tool call %s: args are not valid JSON", c.ID)
		}
		if calls[c.ID] {
			return fmt.Errorf("tool call %s: duplicate ID", c.ID)
		}
		calls[c.ID] = true
		pending[c.ID] = true
	case PartToolResult:
		if set != 1 || p.ToolResult == nil || p.Text != "" {
			return errors.New("tool_result part must set only ToolResult")
		}
		if role != RoleTool {
			return errors.New("tool result outside a tool message")
		}
		id := p.ToolResult.CallID
		if !calls[id] {
			return fmt.Errorf("tool result for %q answers no call of the preceding assistant message", id)
		}
		if !pending[id] {
			return fmt.Errorf("tool call %q answered twice", id)
		}
		delete(pending, id)
	default:
		return fmt.Errorf("unknown part type %q", p.Type)
	}
	return nil
}

// finish checks the tool calls of a decoded reply: a call without a name is
// a broken reply; a call without an ID (some compatible servers) gets a
// random one, unique across the turns of a run and its restarts, since the
// result must name the call it answers.
func finish(r Response) (Response, error) {
	for i := range r.ToolCalls {
		c := &r.ToolCalls[i]
		if c.Name == "" {
			return Response{}, fmt.Errorf("reply has a tool call without a name (id %q)", cleanMessage(c.ID))
		}
		if c.ID == "" {
			var b [12]byte
			_, _ = rand.Read(b[:])
			c.ID = "call_" + hex.EncodeToString(b[:])
		}
	}
	return r, nil
}

func idList(ids map[string]bool) string {
	list := make([]string, 0, len(ids))
	for id := range ids {
		list = append(list, strconv.Quote(id))
	}
	sort.Strings(list)
	return strings.Join(list, ", ")
}

// CanonicalArgs returns raw tool-call arguments in the form ToolCall.Args
// keeps: compact JSON as encoding/json writes it, {} for empty input, and a
// JSON string holding the raw text when raw is not valid JSON.
func CanonicalArgs(raw string) json.RawMessage {
	if isBlank(raw) {
		return json.RawMessage("{}")
	}
	b, err := json.Marshal(json.RawMessage(raw))
	if err != nil {
		b, _ = json.Marshal(raw) // a Go string always marshals
	}
	return b
}

func isBlank(s string) bool {
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case ' ', '\t', '\r', '\n':
		default:
			return false
		}
	}
	return true
}
