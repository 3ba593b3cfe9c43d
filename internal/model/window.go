package model

import (
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"
)

// Token estimation.
//
// The providers tokenize differently and ship no offline tokenizer, so
// EstimateTokens counts bytes and divides by four, rounding up: about right
// for English prose and code under the BPE tokenizers in use, and high for
// other scripts (their UTF-8 bytes outnumber their characters), which errs on
// the safe side for a budget. Framing that no text shows costs a fixed
// amount: 4 tokens per message and 8 per tool call or tool result (IDs and
// wrapper JSON). Tool specs count their name, description and schema bytes.
// The estimate is for budgets and for providers that report no usage; a
// provider's own count always wins when there is one.
const (
	bytesPerToken      = 4
	messageTokens      = 4
	toolPartTokens     = 8
	defaultKeepTurns   = 2
	defaultKeepBytes   = 512
	truncationMarkerAt = "[airlock: tool output truncated"
)

// EstimateTokens estimates the input tokens of req; see "Token estimation".
func EstimateTokens(req Request) int {
	fixed, bytes := requestSize(req)
	return fixed + ceilDiv(bytes, bytesPerToken)
}

// requestSize splits req's size into fixed framing tokens and text bytes.
func requestSize(req Request) (fixed, bytes int) {
	bytes = len(req.System)
	for _, t := range req.Tools {
		bytes += len(t.Name) + len(t.Description) + len(t.Schema)
	}
	for _, m := range req.Messages {
		fixed += messageTokens
		for _, p := range m.Content {
			bytes += len(p.Text)
			if c := p.ToolCall; c != nil {
				fixed += toolPartTokens
				bytes += len(c.ID) + len(c.Name) + len(c.Args)
			}
			if r := p.ToolResult; r != nil {
				fixed += toolPartTokens
				bytes += len(r.CallID) + len(r.Content)
			}
		}
	}
	return fixed, bytes
}

// estimateUsage stands in for the usage a provider did not report.
func estimateUsage(req Request, r Response) Usage {
	out := len(r.Text)
	fixed := 0
	for _, c := range r.ToolCalls {
		fixed += toolPartTokens
		out += len(c.ID) + len(c.Name) + len(c.Args)
	}
	return Usage{
		InputTokens:  int64(EstimateTokens(req)),
		OutputTokens: int64(fixed + ceilDiv(out, bytesPerToken)),
		Estimated:    true,
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

// FitOptions says how far Fit may shrink a conversation.
type FitOptions struct {
	// Budget is the input tokens the request may use, as EstimateTokens
	// counts them: the model's context window less the reply's MaxTokens
	// and a safety margin.
	Budget int
	// KeepTurns is how many of the latest assistant turns, with the tool
	// results that answer them, stay whole (2 when zero or less).
	KeepTurns int
	// KeepBytes is how much of the start of a shortened tool result is kept
	// (512 when zero or less).
	KeepBytes int
}

// FitResult reports what Fit did.
type FitResult struct {
	// Before and After are EstimateTokens of the request given and returned.
	Before, After int
	// Truncated counts the tool results shortened.
	Truncated int
	// Fits reports whether After is within the budget. When it is not, every
	// tool result that Fit may shorten has been shortened, and the caller
	// decides: send anyway, keep fewer turns, or stop the run.
	Fits bool
}

// Fit returns req shrunk to fit opts.Budget, never failing: it shortens the
// content of tool results, oldest first, to their first KeepBytes bytes plus
// a marker saying how much was cut, and stops as soon as the estimate fits.
// The system prompt, the tools, every text and tool call, and the latest
// KeepTurns turns are left alone, so the conversation keeps its shape and
// every call keeps its result. req itself is not modified.
func Fit(req Request, opts FitOptions) (Request, FitResult) {
	keepTurns, keepBytes := opts.KeepTurns, opts.KeepBytes
	if keepTurns <= 0 {
		keepTurns = defaultKeepTurns
	}
	if keepBytes <= 0 {
		keepBytes = defaultKeepBytes
	}
	fixed, bytes := requestSize(req)
	est := fixed + ceilDiv(bytes, bytesPerToken)
	res := FitResult{Before: est, After: est, Fits: est <= opts.Budget}
	if res.Fits {
		return req, res
	}
	// Messages from the keepTurns-th assistant message from the end on are
	// protected; with fewer assistant messages, all are.
	boundary, seen := 0, 0
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == RoleAssistant {
			if seen++; seen == keepTurns {
				boundary = i
				break
			}
		}
	}
	out := req
	out.Messages = slices.Clone(req.Messages)
	for i := 0; i < boundary && est > opts.Budget; i++ {
		m := &out.Messages[i]
		if m.Role != RoleTool {
			continue
		}
		cloned := false
		for j, p := range m.Content {
			if est <= opts.Budget {
				break
			}
			if p.ToolResult == nil {
				continue
			}
			short, ok := shorten(p.ToolResult.Content, keepBytes)
			if !ok {
				continue
			}
			if !cloned {
				m.Content = slices.Clone(m.Content)
				cloned = true
			}
			r := *p.ToolResult
			bytes -= len(r.Content) - len(short)
			r.Content = short
			m.Content[j] = ToolResultPart(r)
			est = fixed + ceilDiv(bytes, bytesPerToken)
			res.Truncated++
		}
	}
	res.After, res.Fits = est, est <= opts.Budget
	return out, res
}

// shorten cuts s to its first keep bytes (on a rune boundary) plus a marker;
// ok is false when that would not make s shorter or s was cut before.
func shorten(s string, keep int) (string, bool) {
	if len(s) <= keep || strings.Contains(s, truncationMarkerAt) {
		return s, false
	}
	cut := keep
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	short := fmt.Sprintf("%s\n%s to fit the context window: kept the first %d of %d bytes]",
		s[:cut], truncationMarkerAt, cut, len(s))
	if len(short) >= len(s) {
		return s, false
	}
	return short, true
}
