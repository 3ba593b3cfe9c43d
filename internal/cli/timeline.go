package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// timeline prints a run's events as a readable live log: steps, tool calls,
// outcomes, tokens, and a progress line while a command runs.
type timeline struct {
	w io.Writer
	// prefix marks each line with the run's short id (several runs).
	prefix bool
	// tty redraws the progress line in place; else it prints every 10s.
	tty bool

	mu       sync.Mutex
	calls    map[string]string // call id -> what was called, for results
	onScreen bool              // a progress line is on screen (tty)
	lastTick map[string]time.Duration
}

func newTimeline(w io.Writer, tty, prefix bool) *timeline {
	return &timeline{w: w, tty: tty, prefix: prefix, calls: map[string]string{}, lastTick: map[string]time.Duration{}}
}

func (t *timeline) printf(runID, format string, args ...any) {
	if t.onScreen {
		fmt.Fprint(t.w, "\r\033[K")
		t.onScreen = false
	}
	line := fmt.Sprintf(format, args...)
	if t.prefix {
		pre := shortID(runID) + " "
		line = pre + strings.ReplaceAll(strings.TrimSuffix(line, "\n"), "\n", "\n"+pre) + "\n"
	}
	fmt.Fprint(t.w, line)
}

func shortID(id string) string {
	if len(id) > 10 {
		return id[len(id)-6:]
	}
	return id
}

// event prints one event.
// events prints each of a batch of events.
func (t *timeline) events(evs []event.Event) {
	for _, e := range evs {
		t.event(e)
	}
}

func (t *timeline) event(e event.Event) {
	p, err := e.Unpack()
	if err != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	id := e.RunID
	switch p := p.(type) {
	case *event.RunCreated:
		t.printf(id, "run %s · %s\n", id, p.Model)
		if p.ParentRunID != "" {
			t.printf(id, "  forked from %s at event %d\n", p.ParentRunID, p.ParentSeq)
		}
		if p.ReplayOf != "" {
			t.printf(id, "  replays the model turns of %s\n", p.ReplayOf)
		}
		if len(p.Secrets) > 0 {
			t.printf(id, "  ! the task holds what looks like a secret (%s): redacted\n", strings.Join(p.Secrets, ", "))
		}
	case *event.PolicyResolved:
		t.printf(id, "  policy %s\n", policyLine(*p, "", false))
	case *event.RunResumed:
		t.printf(id, "resumed (%s) from event %d\n", p.Reason, p.FromSeq)
	case *event.SandboxProvisioned:
		from := "fresh"
		if p.Snapshot != "" {
			from = "restored from snapshot " + shortHash(p.Snapshot)
		}
		t.printf(id, "  sandbox %s ready in %d ms (%s)\n", p.Sandbox, p.DurationMS, from)
	case *event.WorkspaceFetched:
		ref := p.Ref
		if ref == "" {
			ref = "default branch"
		}
		t.printf(id, "  sandbox %s workspace fetched from %s (%s) at %s in %d ms\n", p.Sandbox, p.URL, ref, shortHash(p.Commit), p.DurationMS)
	case *event.SandboxLost:
		t.printf(id, "  ! sandbox %s lost: %s\n", p.Sandbox, p.Reason)
	case *event.ModelResponse:
		tok := fmt.Sprintf("%d in / %d out tokens", p.Usage.InputTokens, p.Usage.OutputTokens)
		if p.Usage.CostMicroUSD > 0 {
			tok += " · " + formatCredits(p.Usage.CostMicroUSD) + " credits"
		}
		t.printf(id, "step %d · %s · %s · %s\n", p.Step, p.Model, fmtMS(p.DurationMS), tok)
		if txt := strings.TrimSpace(p.Text); txt != "" {
			t.printf(id, "  %s\n", clip(oneLine(txt), 200))
		}
	case *event.ToolProposed:
		t.calls[p.CallID] = describeCall(p.Tool, p.Args)
		t.printf(id, "  → %s\n", t.calls[p.CallID])
	case *event.PolicyDecision:
		switch {
		case p.Input != "" && p.CallID == "":
			// An events rule's decision on what a sandbox reported.
			t.printf(id, "  policy: %s by %s on %s (%s)\n", p.Decision, p.Rule, p.Input, p.Reason)
		case p.Decision != event.DecisionAllow:
			t.printf(id, "    policy: %s (%s)\n", p.Decision, p.Reason)
		}
	case *event.Retry:
		t.printf(id, "  ↻ retry %s: %s\n", p.What, p.Reason)
	case *event.ToolFinished:
		mark := "✓"
		if p.IsError {
			mark = "✗"
		}
		what := p.Outcome
		if p.ExitCode != nil && p.Outcome == string(sandbox.OutcomeExited) {
			what = fmt.Sprintf("exit %d", *p.ExitCode)
		}
		t.printf(id, "    %s %s %s · %s\n", mark, p.Tool, what, fmtMS(p.DurationMS))
		if out := strings.TrimSpace(p.Output); out != "" && (p.Tool == "run_command" || p.IsError) {
			for _, l := range lastLines(out, 3) {
				t.printf(id, "      │ %s\n", clip(l, 160))
			}
		}
		if len(p.Secrets) > 0 {
			t.printf(id, "      ! redacted what looks like a secret (%s)\n", strings.Join(p.Secrets, ", "))
		}
	case *event.ApprovalRequested:
		t.printf(id, "  ? approval needed: %s\n", clip(oneLine(p.Action), 160))
		if p.Reason != "" {
			t.printf(id, "    why: %s\n", clip(oneLine(p.Reason), 200))
		}
		t.printf(id, "    airlock approve %s   |   airlock deny %s --reason ...\n", p.ApprovalID, p.ApprovalID)
	case *event.ApprovalDecided:
		msg := p.Decision
		if p.By != "" {
			msg += " by " + p.By
		}
		if p.Reason != "" {
			msg += ": " + p.Reason
		}
		t.printf(id, "    %s\n", clip(oneLine(msg), 200))
	case *event.ToolUncertain:
		t.printf(id, "  ! %s may or may not have run (%s)\n", p.Tool, p.Reason)
	case *event.EgressDecision:
		dest := fmt.Sprintf("%s:%d", p.Host, p.Port)
		if p.Port == 0 {
			dest = p.Host // a request the proxy serves itself (the LLM gateway)
		}
		t.printf(id, "    egress %s %s %s\n", p.Decision, dest, p.Reason)
	case *event.VerificationResult:
		if len(p.Checks) == 0 {
			t.printf(id, "verify: no checks configured: the model's claim is not verified\n")
		}
		for _, c := range p.Checks {
			mark := "✓"
			if !c.Passed {
				mark = "✗"
			}
			t.printf(id, "verify %s %s\n", mark, c.Name)
			if !c.Passed && strings.TrimSpace(c.Detail) != "" {
				for _, l := range lastLines(strings.TrimSpace(c.Detail), 5) {
					t.printf(id, "      │ %s\n", clip(l, 160))
				}
			}
		}
	case *event.ArtifactStored:
		t.printf(id, "artifact %s (%s, %d bytes)\n", p.Name, p.Kind, p.Size)
		if len(p.Secrets) > 0 {
			what := "redacted"
			if p.SecretsKept {
				what = "kept, as the policy says"
			}
			t.printf(id, "  ! it held what looks like a secret (%s): %s\n", strings.Join(p.Secrets, ", "), what)
		}
	case *event.SandboxEvent:
		t.printf(id, "sandbox [%s] %s %s\n", p.Sandbox, p.Kind, describeReported(*p))
	case *event.SandboxEventsDropped:
		t.printf(id, "sandbox [%s] events dropped: %d refused by the host, %d in the sandbox, %d artifacts not stored\n", p.Sandbox,
			p.Malformed+p.UnknownKind+p.Oversize+p.Rate+p.Invalid, p.ExecOversize+p.ExecRate+p.ExecQueue+p.ExecConns, p.Artifacts)
	case *event.BudgetExhausted:
		t.printf(id, "budget exhausted: %s (%d of %d)\n", p.Budget, p.Used, p.Limit)
	case *event.RunCompleted:
		cost := ""
		if p.Usage.CostMicroUSD > 0 {
			cost = " · " + formatCredits(p.Usage.CostMicroUSD) + " credits"
		}
		t.printf(id, "completed in %d steps · %d tokens%s · %s\n", p.Steps, p.Usage.InputTokens+p.Usage.OutputTokens, cost, clip(oneLine(p.Summary), 200))
	case *event.RunFailed:
		msg := p.Reason
		if p.Error != "" {
			msg += ": " + p.Error
		}
		t.printf(id, "%s after %d steps: %s\n", p.Status, p.Steps, clip(oneLine(msg), 300))
	case *event.RunCancelled:
		t.printf(id, "cancelled by %s %s\n", p.By, p.Reason)
	case *event.RunPaused:
		t.printf(id, "paused %s\n", p.Reason)
	}
}

// progress shows that a call is still running.
func (t *timeline) progress(p host.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	what := t.calls[p.CallID]
	if what == "" {
		what = p.Tool
	}
	if t.tty && !t.prefix {
		fmt.Fprintf(t.w, "\r\033[K    … %s running %s", clip(what, 60), p.Elapsed.Round(time.Second))
		t.onScreen = true
		return
	}
	if p.Elapsed-t.lastTick[p.CallID] >= 10*time.Second {
		t.lastTick[p.CallID] = p.Elapsed
		t.printf(p.RunID, "    … %s still running (%s)\n", clip(what, 60), p.Elapsed.Round(time.Second))
	}
}

// describeCall renders a tool call's main argument.
func describeCall(tool string, args json.RawMessage) string {
	var a map[string]any
	_ = json.Unmarshal(args, &a)
	str := func(k string) string {
		s, _ := a[k].(string)
		return s
	}
	var main string
	switch tool {
	case "run_command":
		main = str("command")
	case "search":
		main = str("pattern")
		if p := str("path"); p != "" {
			main += " in " + p
		}
	case "finish":
		main = str("summary")
	default:
		main = str("path")
	}
	if sb := str("sandbox"); sb != "" {
		main = "[" + sb + "] " + main
	}
	return strings.TrimSpace(tool + " " + clip(oneLine(main), 120))
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}

func lastLines(s string, n int) []string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines
}

func fmtMS(ms int64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.1f s", float64(ms)/1000)
}

// policyLine says which policy a run is held to: the stored version or
// the source, its policy hash, and, when the run's own settings changed
// it, "+ flags →" and the hash of the policy as they changed it. In full,
// "prod@v2 sha256:abc… + flags → sha256:def…"; else, with short hashes,
// "prod@v2 (abc) + flags → def". runHash stands in for an event that
// records no hash.
func policyLine(p event.PolicyResolved, runHash string, full bool) string {
	label := p.Version
	if label == "" {
		label = p.Source
	}
	h := p.PolicyHash
	if h == "" {
		h = runHash
	}
	base, hash := "("+shortHash(p.BaseHash)+")", shortHash(h)
	if full {
		base, hash = p.BaseHash, h
	}
	switch {
	case p.BaseHash != "":
		return fmt.Sprintf("%s %s + flags → %s", label, base, hash)
	case full:
		return fmt.Sprintf("%s %s", label, hash)
	}
	return fmt.Sprintf("%s (%s)", label, hash)
}

func shortHash(h string) string {
	h = strings.TrimPrefix(h, "sha256:")
	if len(h) > 12 {
		return h[:12]
	}
	return h
}
