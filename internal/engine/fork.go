package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/store"
)

// ForkOptions change a forked run's configuration; zero fields keep the
// parent's.
type ForkOptions struct {
	Model   string
	BaseURL string
	// Script is the new script's content, for a "script:" model. It starts
	// at the fork point: its first turn is the model's first turn after
	// the step the fork starts from.
	Script       []byte
	Policy       []byte
	PolicySource string
	// PolicyVersion names the stored version Policy is ("NAME@vN").
	PolicyVersion string
	MaxSteps      int
}

// Fork starts a new run (queued) from run id as it was after step atStep:
// its conversation and its workspace snapshots are one checkpoint. The
// child's run.created links to the parent's event it starts from, and the
// parent's log gets a run.forked event linking to the child.
func (e *Engine) Fork(ctx context.Context, id string, atStep int, o ForkOptions) (store.Run, error) {
	parent, err := e.o.Store.GetRun(ctx, id)
	if err != nil {
		return store.Run{}, err
	}
	st, evs, err := e.load(ctx, parent)
	if err != nil {
		return store.Run{}, err
	}
	if atStep < 0 || atStep > st.steps {
		return store.Run{}, fmt.Errorf("%w: run %s has %d steps; cannot fork at step %d", ErrInvalid, id, st.steps, atStep)
	}
	// The fork point is the last event after which step atStep is
	// complete and the next step has not begun.
	at := newState(id, e.tools)
	if parent.ParentRunID != "" {
		if err := e.history(ctx, at, parent.ParentRunID, parent.ParentSeq, 0); err != nil {
			return store.Run{}, err
		}
	}
	var point event.Event
	turns := 0 // the assistant turns of the conversation at the fork point
	for _, ev := range evs {
		if err := at.apply(ev, own); err != nil {
			return store.Run{}, err
		}
		if at.steps > atStep {
			break
		}
		if at.steps == atStep && at.complete() {
			point = ev
			turns = assistantTurns(at.messages)
		}
	}
	if point.Seq == 0 {
		return store.Run{}, fmt.Errorf("%w: run %s: step %d never completed (no snapshot of its effects); fork at an earlier step", ErrInvalid, id, atStep)
	}
	cfg := st.cfg
	cfg.Script = ""
	if o.Model != "" {
		cfg.Model = o.Model
		cfg.BaseURL = o.BaseURL
		cfg.ScriptAfter = 0
	} else {
		// The parent's script goes on where it is (and after the turns
		// it did not write, when the parent is itself a fork).
		cfg.Script = st.cfg.Script
	}
	if o.Script != nil {
		// A new script starts at the fork point: its first turn is the
		// first after step atStep.
		cfg.Script, cfg.ScriptAfter = "", turns
	}
	if o.MaxSteps > 0 {
		cfg.MaxSteps = o.MaxSteps
	}
	policy, src, version := parent.Policy, "forked from "+id, ""
	if o.Policy != nil {
		policy, src, version = o.Policy, o.PolicySource, o.PolicyVersion
	}
	child, err := e.create(ctx, Request{
		Tenant: parent.Tenant, Task: parent.Task, Config: cfg, Policy: policy, PolicySource: src,
		PolicyVersion: version, Script: o.Script,
	},
		event.RunCreated{ParentRunID: id, ParentSeq: point.Seq, ParentHash: point.Hash.String()})
	if err != nil {
		return store.Run{}, err
	}
	if err := e.appendFresh(ctx, id, func(store.Run) (event.Status, event.Payload, error) {
		return "", event.RunForked{ChildRunID: child.ID, AtStep: atStep, AtSeq: point.Seq}, nil
	}); err != nil {
		return child, fmt.Errorf("engine: link fork %s in %s: %w", child.ID, id, err)
	}
	return child, nil
}

// Replay creates a run (queued) that re-drives run id from its recorded
// model turns, without calling the model, in fresh sandboxes from the
// original workspaces. Compare reports where the outcomes differ.
func (e *Engine) Replay(ctx context.Context, id string) (store.Run, error) {
	orig, err := e.o.Store.GetRun(ctx, id)
	if err != nil {
		return store.Run{}, err
	}
	st, _, err := e.load(ctx, orig)
	if err != nil {
		return store.Run{}, err
	}
	if len(st.responses) == 0 {
		return store.Run{}, fmt.Errorf("%w: run %s recorded no model turn to replay", ErrInvalid, id)
	}
	cfg := st.cfg
	cfg.Model, cfg.Script, cfg.BaseURL, cfg.ScriptAfter = "replay:"+id, "", "", 0
	if cfg.MaxSteps < len(st.responses) {
		cfg.MaxSteps = len(st.responses)
	}
	return e.create(ctx, Request{Tenant: orig.Tenant, Task: orig.Task, Config: cfg, Policy: orig.Policy, PolicySource: "replay of " + id},
		event.RunCreated{ReplayOf: id})
}

// Difference is one place where a replay's outcome differs from the run's.
type Difference struct {
	Step   int    `json:"step,omitempty"`
	CallID string `json:"call_id,omitempty"`
	Tool   string `json:"tool,omitempty"`
	Field  string `json:"field"`
	Run    string `json:"run"`
	Replay string `json:"replay"`
}

// Compare lists the differences between two runs' tool results (the last
// result of each call), verification and final status.
func (e *Engine) Compare(ctx context.Context, runID, replayID string) ([]Difference, error) {
	a, err := e.summary(ctx, runID)
	if err != nil {
		return nil, err
	}
	b, err := e.summary(ctx, replayID)
	if err != nil {
		return nil, err
	}
	var out []Difference
	keys := make([]string, 0, len(a.results))
	for k := range a.results {
		keys = append(keys, k)
	}
	for k := range b.results {
		if _, ok := a.results[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, func(x, y string) int {
		rx, ry := a.results[x], a.results[y]
		if rx == nil {
			rx = b.results[x]
		}
		if ry == nil {
			ry = b.results[y]
		}
		if rx.Step != ry.Step {
			return rx.Step - ry.Step
		}
		if x < y {
			return -1
		}
		return 1
	})
	for _, k := range keys {
		ra, rb := a.results[k], b.results[k]
		if ra == nil || rb == nil {
			r := ra
			if r == nil {
				r = rb
			}
			out = append(out, Difference{Step: r.Step, CallID: r.CallID, Tool: r.Tool, Field: "ran", Run: yes(ra != nil), Replay: yes(rb != nil)})
			continue
		}
		d := func(field, x, y string) {
			if x != y {
				out = append(out, Difference{Step: ra.Step, CallID: ra.CallID, Tool: ra.Tool, Field: field, Run: x, Replay: y})
			}
		}
		d("outcome", ra.Outcome, rb.Outcome)
		d("exit_code", exitString(ra.ExitCode), exitString(rb.ExitCode))
		d("output", ra.Output, rb.Output)
	}
	va, vb := verdict(a.verified), verdict(b.verified)
	if va != vb {
		out = append(out, Difference{Field: "verification", Run: va, Replay: vb})
	}
	if a.status != b.status {
		out = append(out, Difference{Field: "status", Run: string(a.status), Replay: string(b.status)})
	}
	return out, nil
}

type runSummary struct {
	results  map[string]*event.ToolFinished
	verified *event.VerificationResult
	status   event.Status
}

func (e *Engine) summary(ctx context.Context, id string) (runSummary, error) {
	r, err := e.o.Store.GetRun(ctx, id)
	if err != nil {
		return runSummary{}, err
	}
	evs, err := e.lineage(ctx, r, 0)
	if err != nil {
		return runSummary{}, err
	}
	s := runSummary{results: map[string]*event.ToolFinished{}, status: r.Status}
	for _, ev := range evs {
		switch ev.Type {
		case event.TypeToolFinished:
			var f event.ToolFinished
			if err := json.Unmarshal(ev.Payload, &f); err != nil {
				return s, err
			}
			s.results[fmt.Sprintf("%d/%s", f.Step, f.CallID)] = &f
		case event.TypeVerificationResult:
			var v event.VerificationResult
			if err := json.Unmarshal(ev.Payload, &v); err != nil {
				return s, err
			}
			s.verified = &v
		}
	}
	return s, nil
}

// lineage returns the events of run r's ancestors up to the fork points,
// then r's own (up to seq upto when upto > 0): everything a fork inherited.
func (e *Engine) lineage(ctx context.Context, r store.Run, upto int64) ([]event.Event, error) {
	var out []event.Event
	if r.ParentRunID != "" {
		p, err := e.o.Store.GetRun(ctx, r.ParentRunID)
		if err != nil {
			return nil, err
		}
		if out, err = e.lineage(ctx, p, r.ParentSeq); err != nil {
			return nil, err
		}
	}
	own, err := e.events(ctx, r.ID, upto)
	return append(out, own...), err
}

// assistantTurns counts the assistant messages of a conversation: where a
// scripted model is in it.
func assistantTurns(msgs []model.Message) int {
	n := 0
	for _, m := range msgs {
		if m.Role == model.RoleAssistant {
			n++
		}
	}
	return n
}

func yes(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func exitString(p *int) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

func verdict(v *event.VerificationResult) string {
	switch {
	case v == nil:
		return "not run"
	case v.Passed:
		return "passed"
	}
	return "failed"
}

var _ model.Provider = (*replayProvider)(nil)
