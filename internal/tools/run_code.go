package tools

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/interp"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/template"
)

// File is a file a tool call produced that the run keeps as an artifact
// (run_code's images). The data came from the sandbox: it is bounded, and
// its media type is the one the tool decoded it as.
type File struct {
	MediaType string
	Data      []byte
}

type codeArgs struct {
	Code           string `json:"code"`
	TimeoutSeconds int64  `json:"timeout_seconds"`
}

// maxCodeImages bounds the images one run_code call keeps.
const maxCodeImages = 8

// RunCode returns the run_code tool: Python in a persistent IPython kernel
// inside the sandbox, through airlock's code interpreter server
// (package interp), which the first call starts. Variables and imports
// persist between calls in the same sandbox. It returns the labelled
// stdout, stderr, the cell's value and displays as text, and the
// exception (a tool error); PNG images (matplotlib's charts) go into
// Result.Files, which the run keeps as artifacts. A call that times out
// interrupts the kernel and is a tool error; the kernel's state stays.
// Like run_command, it is mutating (code may write anywhere the sandbox
// lets it) and not external.
func RunCode(l Limits) Tool {
	l = l.withDefaults()
	maxSec := int64(l.MaxTimeout / time.Second)
	rc := &codeRunner{l: l}
	return &spec[codeArgs]{
		name:    "run_code",
		place:   PlaceSandbox,
		effects: sandboxFiles,
		desc: fmt.Sprintf("Run Python code in a persistent IPython (Jupyter) kernel inside the sandbox, working directory /workspace: variables and imports persist between calls. Returns stdout, stderr, the value of the last expression, and the exception with its traceback; matplotlib charts (plt.show()) are kept as PNG artifacts of the run. numpy, pandas and matplotlib are there when the sandbox's Python has them. Default timeout %v, at most %v; a timeout interrupts the code (KeyboardInterrupt) and keeps the kernel's state.",
			l.DefaultTimeout, l.MaxTimeout),
		params: []param{
			{Name: "code", Type: typeString, Required: true, Desc: "Python code, one notebook cell."},
			{Name: "timeout_seconds", Type: typeInteger, Min: 1, Max: maxSec, Desc: "Wall-clock timeout in seconds."},
		},
		validate: func(a *codeArgs) error {
			if strings.TrimSpace(a.Code) == "" {
				return errors.New("code is empty")
			}
			return nil
		},
		run: rc.run,
	}
}

// codeRunner starts the server in a sandbox once.
type codeRunner struct {
	l Limits
	// mu serializes starting the server, so two calls of one step do not
	// start two.
	mu sync.Mutex
}

func (rc *codeRunner) run(ctx context.Context, env Env, a codeArgs) (Result, error) {
	timeout := rc.l.DefaultTimeout
	if a.TimeoutSeconds > 0 {
		timeout = time.Duration(a.TimeoutSeconds) * time.Second
	}
	limits := interp.Limits{Text: rc.l.MaxContent, Images: 16 << 20, Results: 32}
	req := interp.Request{Code: a.Code}
	start := time.Now()
	ex, err := rc.execute(ctx, env.Sandbox, req, timeout, limits)
	if errors.Is(err, interp.ErrNotRunning) {
		if serr := rc.start(ctx, env.Sandbox); serr != nil {
			var re *template.ReadyError
			if errors.As(serr, &re) && ctx.Err() == nil && !isLost(env.Sandbox) {
				return errResult("run_code: the code interpreter did not start in the sandbox: %v", serr), nil
			}
			return infraFailure(ctx, env, "run_code", serr)
		}
		ex, err = rc.execute(ctx, env.Sandbox, req, timeout, limits)
	}
	res := codeResult(ex, rc.l.MaxContent)
	res.Details.Wall = time.Since(start)
	var se *interp.StatusError
	switch {
	case err == nil:
	case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
		res.IsError = true
		res.Details.Outcome = string(sandbox.OutcomeTimeout)
		res.Content = fmt.Sprintf("error: timed out after %v; the code was interrupted (the kernel's state is kept)\n", timeout) + res.Content
	case errors.As(err, &se):
		return errResult("run_code: the code interpreter answered %d: %s", se.Status, clipText(se.Body, 512)), nil
	default:
		return infraFailure(ctx, env, "run_code", err)
	}
	return res, nil
}

// execute runs req through a connection into the sandbox when it has
// them, else through a client run inside it.
func (rc *codeRunner) execute(ctx context.Context, sb sandbox.Sandbox, req interp.Request, timeout time.Duration, l interp.Limits) (interp.Execution, error) {
	if c, ok := sb.(sandbox.Connector); ok {
		return interp.ExecuteConn(ctx, c, req, timeout, l)
	}
	return interp.Execute(ctx, sb, req, timeout, l)
}

// start starts the server in sb unless a call that held mu before did.
func (rc *codeRunner) start(ctx context.Context, sb sandbox.Sandbox) error {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, err := rc.execute(ctx, sb, interp.Request{Code: "None"}, time.Minute, interp.Limits{}); err == nil {
		return nil // started by another call
	}
	return interp.Start(ctx, sb)
}

func isLost(sb sandbox.Sandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
		return false
	}
}

// ansi matches the terminal escapes of IPython's tracebacks.
var ansi = regexp.MustCompile(`\x1b\[[0-9;]*[A-Za-z]`)

// codeResult is the model's view of ex: labelled sections, each within
// half of limit bytes and all of them within limit, and the PNG images
// (at most maxCodeImages) as files.
func codeResult(ex interp.Execution, limit int) Result {
	var b strings.Builder
	var cut int64 // bytes left out
	section := func(label, s string) {
		if s == "" {
			return
		}
		var n int64
		s, n = Truncate(s, limit/2)
		cut += n
		fmt.Fprintf(&b, "[%s]\n%s", label, s)
		if !strings.HasSuffix(s, "\n") {
			b.WriteByte('\n')
		}
	}
	section("stdout", ex.Stdout)
	section("stderr", ex.Stderr)
	var res Result
	for _, r := range ex.Results {
		label := "display"
		if r.Main {
			label = "result"
		}
		if len(r.PNG) > 0 && len(res.Files) < maxCodeImages {
			res.Files = append(res.Files, File{MediaType: "image/png", Data: r.PNG})
			fmt.Fprintf(&b, "[%s: PNG image, %d bytes, kept as an artifact of the run]\n", label, len(r.PNG))
			continue
		}
		text := r.Text
		if text == "" {
			text = "(no text form; formats: " + strings.Join(r.Formats, ", ") + ")"
		}
		section(label, text)
	}
	if e := ex.Error; e != nil {
		res.IsError = true
		section("error", fmt.Sprintf("%s: %s\n%s", e.Name, e.Value, ansi.ReplaceAllString(e.Traceback, "")))
	}
	if b.Len() == 0 {
		b.WriteString("(no output)\n")
	}
	// Each section is within half the limit, and the whole too: many
	// results of a call (display() in a loop) would add up past it. The
	// head and the tail stay, so does an error's end.
	content, n := Truncate(b.String(), limit)
	res.Content = content
	cut += n
	res.Details.Bytes = int64(len(ex.Stdout) + len(ex.Stderr))
	res.Details.Truncated = ex.Dropped + cut
	return res
}

func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}
