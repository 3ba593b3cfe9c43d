package engine

import (
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/tools"
)

// A tool call is a model.ToolCall from the model's response on, and a
// tools.Call (Registry.Resolve: where it acts, with what arguments, what
// it may change) from the start of its step through the policy, its run
// and its record. The log keeps its own wire forms (event.ToolCall in a
// model.response, and the tool.* payloads); this file is the one place
// that converts between them.

// eventCalls is the model's calls as a model.response records them.
func eventCalls(cs []model.ToolCall) []event.ToolCall {
	out := make([]event.ToolCall, 0, len(cs))
	for _, c := range cs {
		out = append(out, event.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args})
	}
	return out
}

// modelCalls is the calls a model.response records, as the model made them.
func modelCalls(cs []event.ToolCall) []model.ToolCall {
	var out []model.ToolCall
	for _, c := range cs {
		out = append(out, model.ToolCall{ID: c.ID, Name: c.Name, Args: c.Args})
	}
	return out
}

// proposed records call c of step n as the model proposed it.
func proposed(n int, c tools.Call) event.ToolProposed {
	return event.ToolProposed{Step: n, CallID: c.ID, Tool: c.Name, Args: c.Args}
}

// started records the start of call c of step n, where it runs.
func started(n int, c tools.Call) event.ToolStarted {
	ts := event.ToolStarted{Step: n, CallID: c.ID, Tool: c.Name, Place: event.PlaceHost, External: c.External}
	if c.Place == tools.PlaceSandbox {
		ts.Place, ts.Sandbox = event.PlaceSandbox, c.Sandbox
	}
	return ts
}

// denied records that call c of step n did not run, as decision pd says.
func denied(n int, c tools.Call, pd event.PolicyDecision) event.ToolFinished {
	return event.ToolFinished{
		Step: n, CallID: c.ID, Tool: c.Name, Outcome: "denied", IsError: true,
		Output: "The policy does not allow this call (" + pd.Decision + ": " + pd.Reason + ").",
	}
}

// finished records the result res of call c of step n, which took took.
func finished(n int, c tools.Call, res tools.Result, took time.Duration) event.ToolFinished {
	fin := event.ToolFinished{
		Step: n, CallID: c.ID, Tool: c.Name, Sandbox: c.Sandbox, IsError: res.IsError, Output: res.Content,
		Outcome: res.Details.Outcome, ExitCode: res.Details.ExitCode, Signal: res.Details.Signal, OutputBytes: res.Details.Bytes,
		OutputTruncated: res.Details.Truncated > 0, DurationMS: took.Milliseconds(), WallMS: res.Details.Wall.Milliseconds(),
	}
	if fin.Outcome == "" {
		fin.Outcome = "ok"
		if res.IsError {
			fin.Outcome = "error"
		}
	}
	return fin
}
