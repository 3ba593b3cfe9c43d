package template

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// readyInterval is the pause between two runs of a readiness check that
// did not pass.
const readyInterval = 200 * time.Millisecond

// maxReadyOutput is how much of a readiness check's output a ReadyError
// quotes.
const maxReadyOutput = 2 << 10

// ReadyError says why a sandbox of a template did not become ready: its
// start command did not start, or its readiness check did not pass in
// time.
type ReadyError struct {
	// Start is set when the start command could not be started.
	Start string
	// Timeout is the readiness check's; Runs how many times it ran, and
	// Last how its last run ended, Output that run's output (its tail).
	Timeout time.Duration
	Runs    int
	Last    sandbox.Result
	Output  string
}

func (e *ReadyError) Error() string {
	if e.Start != "" {
		return "template start command: " + e.Start
	}
	msg := fmt.Sprintf("template readiness check did not pass within %s (%d runs", e.Timeout, e.Runs)
	switch {
	case e.Runs == 0:
	case e.Last.NotStarted != "":
		msg += "; the last did not start: " + e.Last.Message
	case e.Last.Outcome == sandbox.OutcomeExited:
		msg += fmt.Sprintf("; the last exited %d", e.Last.ExitCode)
	default:
		msg += fmt.Sprintf("; the last ended: %s", e.Last.Outcome)
	}
	msg += ")"
	if out := strings.TrimSpace(e.Output); out != "" {
		msg += ": " + out
	}
	return msg
}

// Prepare brings sb, a sandbox made from t, to readiness: it writes t's
// files (a built-in template's), starts t's start command in the
// background (it lives as long as the sandbox, which kills it when
// destroyed), then runs t's readiness check until it exits
// 0, within its timeout. A template with neither is ready at once. The
// error is a *ReadyError, or ctx's; the caller destroys the sandbox.
func Prepare(ctx context.Context, sb sandbox.Sandbox, t *Template) error {
	for _, f := range t.Files {
		if err := sb.WriteFile(ctx, f.Path, bytes.NewReader(f.Data), f.Mode); err != nil {
			return &ReadyError{Start: fmt.Sprintf("write %s: %v", f.Path, err)}
		}
	}
	if len(t.Start) > 0 {
		// The start command outlives this call: its context is not
		// ctx's, and it ends with the sandbox.
		p, err := sb.Start(context.WithoutCancel(ctx), sandbox.Command{Argv: t.Start, Stdout: discard{}, Stderr: discard{}})
		if err != nil {
			return &ReadyError{Start: err.Error()}
		}
		_ = p // never waited: the sandbox's destruction ends it
	}
	if t.Ready == nil {
		return nil
	}
	timeout := time.Duration(t.Ready.Timeout)
	parent := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	re := &ReadyError{Timeout: timeout}
	for {
		var out tail
		p, err := sb.Start(ctx, sandbox.Command{Argv: t.Ready.Command, Stdout: &out, Stderr: &out, MaxOutput: 1 << 20})
		var r sandbox.Result
		if err == nil {
			r, err = p.Wait(ctx)
		}
		if ctx.Err() != nil {
			if err := parent.Err(); err != nil {
				return fmt.Errorf("template readiness check: %w", err)
			}
			return re
		}
		if err != nil {
			return fmt.Errorf("template readiness check: %w", err)
		}
		re.Runs++
		re.Last, re.Output = r, out.String()
		if r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 && r.NotStarted == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			if err := parent.Err(); err != nil {
				return fmt.Errorf("template readiness check: %w", err)
			}
			return re
		case <-time.After(readyInterval):
		}
	}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// tail keeps the last maxReadyOutput bytes written to it.
type tail struct {
	mu sync.Mutex
	// b is guarded by mu.
	b []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > maxReadyOutput {
		t.b = bytes.Clone(t.b[len(t.b)-maxReadyOutput:])
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
