package interp

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/template"
)

// clientScript is a one-request HTTP client the sandbox runs (Call): the
// method and path are its arguments, the body its stdin; it copies the
// answer's body to stdout as it comes. It exits 0 for a 2xx answer, 3
// for another (the status on stderr's first line, the body on stdout),
// 4 when nothing listens on the port.
const clientScript = `import sys, urllib.request, urllib.error
body = sys.stdin.buffer.read()
req = urllib.request.Request("http://127.0.0.1:49999" + sys.argv[2], data=body or None, method=sys.argv[1], headers={"Content-Type": "application/json"})
try:
    r = urllib.request.urlopen(req)
except urllib.error.HTTPError as e:
    sys.stderr.write("status %d\n" % e.code)
    sys.stdout.buffer.write(e.read(65536))
    sys.exit(3)
except urllib.error.URLError as e:
    sys.stderr.write("%s\n" % e.reason)
    sys.exit(4)
out = sys.stdout.buffer
while True:
    b = r.read1(65536)
    if not b:
        break
    out.write(b)
    out.flush()
`

// ErrNotRunning is returned (wrapped) by Call when no server listens in
// the sandbox.
var ErrNotRunning = errors.New("interp: no code interpreter server runs in the sandbox")

// StatusError is a server's answer that is not a 2xx: its status and
// (the head of) its body, which the server in the sandbox wrote.
type StatusError struct {
	Status int
	Body   string
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("interp: the server answered %d: %s", e.Status, e.Body)
}

// maxErrorBody is the most of an error answer's body kept.
const maxErrorBody = 4 << 10

// Call sends one request to the server in sb by running the small client
// inside the sandbox (the host reaches the sandbox's loopback no other
// way without sandbox.Connector), with body as the request's body; the
// answer's body is written to out. timeout bounds the whole call (0:
// none); when it ends the client dies, the server sees its connection
// close and interrupts the kernel. maxOut caps what the sandbox may
// write (0: none).
func Call(ctx context.Context, sb sandbox.Sandbox, method, path string, body []byte, out io.Writer, timeout time.Duration, maxOut int64) error {
	var errb headBuffer
	p, err := sb.Start(ctx, sandbox.Command{
		Argv:  []string{"python3", "-c", clientScript, method, path},
		Stdin: bytes.NewReader(body), Stdout: out, Stderr: &errb,
		Timeout: timeout, MaxOutput: maxOut, Dir: "/",
	})
	if err != nil {
		return fmt.Errorf("interp: start the client: %w", err)
	}
	r, err := p.Wait(ctx)
	if err != nil {
		return fmt.Errorf("interp: the client: %w", err)
	}
	switch {
	case r.NotStarted != "":
		return fmt.Errorf("interp: the client did not start (is python3 in the sandbox?): %s", r.Message)
	case r.Outcome == sandbox.OutcomeTimeout:
		return fmt.Errorf("interp: %s %s: %w", method, path, context.DeadlineExceeded)
	case r.Outcome != sandbox.OutcomeExited:
		return fmt.Errorf("interp: %s %s: the client ended: %s", method, path, r.Outcome)
	case r.ExitCode == 0:
		return nil
	case r.ExitCode == 4:
		return fmt.Errorf("%w (%s)", ErrNotRunning, strings.TrimSpace(errb.String()))
	case r.ExitCode == 3:
		first, _, _ := strings.Cut(errb.String(), "\n")
		n, err := strconv.Atoi(strings.TrimPrefix(first, "status "))
		if err != nil {
			return fmt.Errorf("interp: %s %s: the client's answer is garbled", method, path)
		}
		b := ""
		if bb, ok := out.(*bytes.Buffer); ok {
			b = bb.String()
		}
		return &StatusError{Status: n, Body: clipString(b, maxErrorBody)}
	default:
		return fmt.Errorf("interp: %s %s: the client exited %d: %s", method, path, r.ExitCode, clipString(errb.String(), maxErrorBody))
	}
}

// Request is an /execute request.
type Request struct {
	Code      string            `json:"code"`
	ContextID string            `json:"context_id,omitempty"`
	Language  string            `json:"language,omitempty"`
	EnvVars   map[string]string `json:"env_vars,omitempty"`
}

// Execute runs req in sb's server and decodes the answer within l.
// timeout bounds the execution (0: none); an execution that times out
// comes back with what it printed so far, Ended false, and an error
// matching context.DeadlineExceeded.
func Execute(ctx context.Context, sb sandbox.Sandbox, req Request, timeout time.Duration, l Limits) (Execution, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Execution{}, fmt.Errorf("interp: encode the request: %w", err)
	}
	l = l.withDefaults()
	pr, pw := io.Pipe()
	done := make(chan struct{})
	var ex Execution
	var derr error
	go func() {
		defer close(done)
		ex, derr = Decode(pr, l)
		_, _ = io.Copy(io.Discard, pr)
	}()
	// The sandbox may write at most what Decode keeps, and some slack for
	// JSON's escapes, keepalives and lines it skips.
	maxOut := int64(l.Line) + 4*int64(l.Text) + int64(l.Images)*4/3 + 1<<20
	var ebuf bytes.Buffer
	cerr := Call(ctx, sb, "POST", "/execute", body, &errWriter{pw: pw, buf: &ebuf}, timeout, maxOut)
	pw.Close()
	<-done
	if cerr != nil {
		var se *StatusError
		if errors.As(cerr, &se) {
			se.Body = clipString(ebuf.String(), maxErrorBody)
		}
		return ex, cerr
	}
	return ex, derr
}

// errWriter writes to the decoder and keeps the head of what it wrote,
// the body of an error answer.
type errWriter struct {
	pw  *io.PipeWriter
	buf *bytes.Buffer
}

func (w *errWriter) Write(p []byte) (int, error) {
	if room := maxErrorBody - w.buf.Len(); room > 0 {
		w.buf.Write(p[:min(room, len(p))])
	}
	return w.pw.Write(p)
}

// Start writes the server's program into sb and starts it, as the
// template does, and waits until it answers /health. A sandbox whose
// python3 lacks the kernel's packages is a *template.ReadyError saying
// so.
func Start(ctx context.Context, sb sandbox.Sandbox) error {
	// Without the kernel's packages the server cannot start: say so now
	// rather than after the readiness check's timeout.
	var out headBuffer
	p, err := sb.Start(ctx, sandbox.Command{Argv: []string{"python3", "-c", "import ipykernel, jupyter_client"}, Stdout: &out, Stderr: &out, Timeout: time.Minute, Dir: "/"})
	if err != nil {
		return fmt.Errorf("interp: probe the sandbox's python3: %w", err)
	}
	r, err := p.Wait(ctx)
	if err != nil {
		return fmt.Errorf("interp: probe the sandbox's python3: %w", err)
	}
	if r.NotStarted != "" || r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
		why := strings.TrimSpace(out.String())
		if r.NotStarted != "" {
			why = r.Message
		}
		if i := strings.LastIndexByte(why, '\n'); i >= 0 {
			why = why[i+1:]
		}
		return &template.ReadyError{Start: "the sandbox's python3 cannot run Jupyter kernels (it needs ipykernel and jupyter_client, Debian's python3-ipykernel and python3-jupyter-client): " + why}
	}
	if err := template.Prepare(ctx, sb, Template()); err != nil {
		return fmt.Errorf("interp: start the server: %w", err)
	}
	return nil
}

// headBuffer keeps the first 4 KiB written to it.
type headBuffer struct{ b []byte }

func (t *headBuffer) Write(p []byte) (int, error) {
	if room := maxErrorBody - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *headBuffer) String() string { return string(t.b) }

func clipString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ExecuteConn runs req in the server of the sandbox c connects to, over
// a connection into the sandbox (sandbox.Connector) rather than a client
// run inside it, and decodes the answer within l, as Execute does. No
// server listening is ErrNotRunning.
func ExecuteConn(ctx context.Context, c sandbox.Connector, req Request, timeout time.Duration, l Limits) (Execution, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return Execution{}, fmt.Errorf("interp: encode the request: %w", err)
	}
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	hc := &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			conn, err := c.Connect(ctx, Port)
			if errors.Is(err, sandbox.ErrPortClosed) {
				return nil, fmt.Errorf("%w: %w", ErrNotRunning, err)
			}
			return conn, err
		},
		// One request per connection: when it ends (or its context does),
		// the connection closes and the server interrupts the kernel.
		DisableKeepAlives:  true,
		DisableCompression: true,
	}}
	defer hc.CloseIdleConnections()
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://sandbox/execute", bytes.NewReader(body))
	if err != nil {
		return Execution{}, fmt.Errorf("interp: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(hreq)
	if err != nil {
		if errors.Is(err, ErrNotRunning) {
			return Execution{}, ErrNotRunning
		}
		return Execution{}, fmt.Errorf("interp: POST /execute: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return Execution{}, &StatusError{Status: resp.StatusCode, Body: string(b)}
	}
	ex, err := Decode(resp.Body, l)
	if err != nil && ctx.Err() != nil {
		return ex, fmt.Errorf("interp: POST /execute: %w", ctx.Err())
	}
	return ex, err
}
