package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/ext"
	"github.com/google/cel-go/interpreter"
)

// EventRules is an events section's rules compiled: what DecideEvent
// reads. It is immutable and safe for concurrent use.
type EventRules struct {
	rules []compiledEventRule
}

type compiledEventRule struct {
	label  string
	kinds  []string
	action string
	reason string
	prg    cel.Program
}

// EventDecision is what a rule decided on an event.
type EventDecision struct {
	// Action is EventStop, EventAsk or EventDeny.
	Action string
	// Rule names the rule: "events.rules[0]".
	Rule string
	// Reason is the rule's reason, or why it could not decide.
	Reason string
}

// CompileEventRules compiles the events section's rules (validated
// first). A section without rules compiles to nil, which decides nothing.
func CompileEventRules(e Events) (*EventRules, error) {
	if len(e.Rules) == 0 {
		return nil, nil
	}
	p := &problems{}
	e.validate(p)
	out := compileEventRules(p, e.Rules)
	if len(p.errs) > 0 {
		return nil, joinErrors(p.errs)
	}
	return out, nil
}

func compileEventRules(p *problems, rules []EventRule) *EventRules {
	if len(rules) == 0 || len(rules) > maxRules {
		return nil
	}
	env, err := eventEnv()
	if err != nil {
		p.add("events.rules", "", "CEL environment: %v", err)
		return nil
	}
	out := &EventRules{}
	for i, r := range rules {
		label := fmt.Sprintf("events.rules[%d]", i)
		if strings.TrimSpace(r.When) == "" || len(r.Kinds) == 0 {
			continue
		}
		prg, ok := compileRule(env, p, label+".when", r.When)
		if !ok {
			continue
		}
		out.rules = append(out.rules, compiledEventRule{label: label, kinds: slices.Clone(r.Kinds), action: r.Action, reason: ruleReason(r.Reason, r.When), prg: prg})
	}
	return out
}

// DecideEvent runs the rules that name the event's kind, in order: the
// first whose condition holds decides (ok true). An event of a kind no rule
// names is evaluated by none. A rule that fails or exceeds RuleCostLimit
// decides nothing: it is reported as a decision with an empty Action and
// the error as Reason (ok true), and the rules after it are not tried.
// payload is the sandbox.event payload (JSON).
func (r *EventRules) DecideEvent(kind string, payload json.RawMessage, run RunInfo, sandbox string) (EventDecision, bool) {
	if r == nil {
		return EventDecision{}, false
	}
	var vars map[string]any
	for i := range r.rules {
		cr := &r.rules[i]
		if !slices.Contains(cr.kinds, kind) {
			continue
		}
		if vars == nil {
			vars = map[string]any{"event": argsValue(payload), "run": run, "sandbox": sandboxInfo{Name: sandbox}}
		}
		out, _, err := cr.prg.Eval(vars)
		if err != nil {
			var cancelled interpreter.EvalCancelledError
			if errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded {
				return EventDecision{Rule: cr.label, Reason: ReasonCostLimit}, true
			}
			return EventDecision{Rule: cr.label, Reason: "policy: the rule failed: " + shorten(strings.Join(strings.Fields(err.Error()), " "))}, true
		}
		if b, isBool := out.(types.Bool); isBool && bool(b) {
			return EventDecision{Action: cr.action, Rule: cr.label, Reason: cr.reason}, true
		}
	}
	return EventDecision{}, false
}

// eventEnv is the environment of the events section's rules: `event`,
// `run` and `sandbox`, and nothing of a tool call.
var eventEnv = sync.OnceValues(func() (*cel.Env, error) {
	return cel.NewEnv(
		ext.NativeTypes(reflect.TypeFor[RunInfo](), reflect.TypeFor[sandboxInfo](), ext.ParseStructTags(true)),
		cel.Variable("event", cel.MapType(cel.StringType, cel.DynType)),
		cel.Variable("run", cel.ObjectType("policy.RunInfo")),
		cel.Variable("sandbox", cel.ObjectType("policy.sandboxInfo")),
		ext.Strings(),
		cel.CrossTypeNumericComparisons(true),
		cel.DefaultUTCTimeZone(true),
		cel.ParserExpressionSizeLimit(maxExpr),
	)
})
