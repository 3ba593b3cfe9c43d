package e2b

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// The process service's messages, in proto3 JSON (lowerCamel names,
// bytes as base64, full enum names).

// u32 is a proto3 JSON uint32: a number, or a number in a string.
type u32 uint32

func (u *u32) UnmarshalJSON(b []byte) error {
	s := strings.Trim(string(b), `"`)
	if s == "null" {
		return nil
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return fmt.Errorf("want a uint32, got %s", clip(string(b)))
	}
	*u = u32(n)
	return nil
}

// b64 is a proto3 JSON bytes field: standard or URL-safe base64, padded
// or not.
type b64 []byte

func (v *b64) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("bytes: want a base64 string")
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if d, err := enc.DecodeString(s); err == nil {
			*v = d
			return nil
		}
	}
	return errors.New("bytes: malformed base64")
}

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args"`
	Envs map[string]string `json:"envs"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type ptySize struct {
	Cols u32 `json:"cols"`
	Rows u32 `json:"rows"`
}

type ptyConfig struct {
	Size *ptySize `json:"size"`
}

type startRequest struct {
	Process *processConfig `json:"process"`
	Pty     *ptyConfig     `json:"pty"`
	Tag     *string        `json:"tag"`
	Stdin   *bool          `json:"stdin"`
}

type processSelector struct {
	PID *u32    `json:"pid"`
	Tag *string `json:"tag"`
}

type selectRequest struct {
	Process *processSelector `json:"process"`
}

type processInput struct {
	Stdin b64 `json:"stdin"`
	Pty   b64 `json:"pty"`
}

type sendInputRequest struct {
	Process *processSelector `json:"process"`
	Input   *processInput    `json:"input"`
}

type sendSignalRequest struct {
	Process *processSelector `json:"process"`
	Signal  json.RawMessage  `json:"signal"`
}

type updateRequest struct {
	Process *processSelector `json:"process"`
	Pty     *ptyConfig       `json:"pty"`
}

type processInfo struct {
	Config processConfig `json:"config"`
	PID    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

type listResponse struct {
	Processes []processInfo `json:"processes"`
}

type eventMessage struct {
	Event processEvent `json:"event"`
}

type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	PID uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode,omitempty"`
	Exited   bool    `json:"exited,omitempty"`
	Status   string  `json:"status,omitempty"`
	Error    *string `json:"error,omitempty"`
}

// parseSignal reads the Signal enum: its name or its number.
func parseSignal(raw json.RawMessage) (unix.Signal, bool) {
	var name string
	if json.Unmarshal(raw, &name) == nil {
		switch name {
		case "SIGNAL_SIGKILL":
			return unix.SIGKILL, true
		case "SIGNAL_SIGTERM":
			return unix.SIGTERM, true
		}
		return 0, false
	}
	var n int
	if json.Unmarshal(raw, &n) == nil && (n == 9 || n == 15) {
		return unix.Signal(n), true
	}
	return 0, false
}

// Output kinds.
const (
	outStdout = iota
	outStderr
	outPty
)

// chunk is a piece of a process's output.
type chunk struct {
	kind int
	data []byte
}

// subscriber is one stream reading a process's output.
type subscriber struct {
	ch   chan chunk    // unbuffered: a slow stream slows the command, not the host's memory
	gone chan struct{} // closed when the stream stops reading
}

// proc is a process started through the process service.
type proc struct {
	pid  uint32
	tag  *string
	cfg  processConfig
	p    sandbox.Process
	pty  bool
	in   chan stdinWrite // nil without stdin; unbuffered: SendInput waits for the feeder
	done chan struct{}

	// inClosed is closed by CloseStdin (once, by closeIn).
	inClosed chan struct{}
	closeIn  sync.Once

	mu sync.Mutex
	// subs is guarded by mu.
	subs map[*subscriber]struct{}
	// end and endErr are set before done is closed.
	end    endEvent
	endErr *rpcError
}

func (p *proc) subscribe() *subscriber {
	s := &subscriber{ch: make(chan chunk), gone: make(chan struct{})}
	p.mu.Lock()
	p.subs[s] = struct{}{}
	p.mu.Unlock()
	return s
}

func (p *proc) unsubscribe(s *subscriber) {
	p.mu.Lock()
	delete(p.subs, s)
	p.mu.Unlock()
	close(s.gone)
}

// outWriter hands a process's output to every subscriber. Output nobody
// reads is dropped, as envd does.
type outWriter struct {
	p    *proc
	kind int
}

func (o outWriter) Write(b []byte) (int, error) {
	c := chunk{kind: o.kind, data: append([]byte(nil), b...)}
	o.p.mu.Lock()
	subs := slices.Collect(maps.Keys(o.p.subs))
	o.p.mu.Unlock()
	for _, s := range subs {
		select {
		case s.ch <- c:
		case <-s.gone:
		}
	}
	return len(b), nil
}

// closeStdin ends the process's stdin (EOF); idempotent.
func (p *proc) closeStdin() {
	if p.in != nil {
		p.closeIn.Do(func() { close(p.inClosed) })
	}
}

// procTable is the processes of one boot.
type procTable struct {
	mu sync.Mutex
	// next and procs are guarded by mu.
	next  uint32
	procs map[uint32]*proc
}

func newProcTable() *procTable {
	return &procTable{next: 1000, procs: map[uint32]*proc{}}
}

// find resolves a selector.
func (t *procTable) find(sel *processSelector) (*proc, *rpcError) {
	if sel == nil || (sel.PID == nil && sel.Tag == nil) {
		return nil, rpcErrorf(codeInvalidArgument, "process: give a pid or a tag")
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if sel.PID != nil {
		if p := t.procs[uint32(*sel.PID)]; p != nil {
			return p, nil
		}
		return nil, rpcErrorf(codeNotFound, "process %d not found", *sel.PID)
	}
	for _, p := range t.procs {
		if p.tag != nil && *p.tag == *sel.Tag {
			return p, nil
		}
	}
	return nil, rpcErrorf(codeNotFound, "process with tag %q not found", clip(*sel.Tag))
}

// closeAll ends every process's stdin; the sandbox's end ends the rest.
func (t *procTable) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range t.procs {
		p.closeStdin()
	}
}

// serveProcess dispatches the process service's methods.
func (s *Server) serveProcess(w http.ResponseWriter, r *http.Request, c envdCall, method string) {
	switch method {
	case "Start":
		s.streamCall(w, r, func(ctx context.Context, msg []byte, st *stream) *rpcError { return s.processStart(ctx, r, c, msg, st) })
	case "Connect":
		s.streamCall(w, r, func(ctx context.Context, msg []byte, st *stream) *rpcError {
			return s.processConnect(ctx, r, c, msg, st)
		})
	case "List":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			c.lv.procs.mu.Lock()
			out := listResponse{Processes: []processInfo{}}
			for _, p := range c.lv.procs.procs {
				out.Processes = append(out.Processes, processInfo{Config: p.cfg, PID: p.pid, Tag: p.tag})
			}
			c.lv.procs.mu.Unlock()
			slices.SortFunc(out.Processes, func(a, b processInfo) int { return int(a.PID) - int(b.PID) })
			return out, nil
		})
	case "SendInput":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req sendInputRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			p, err := c.lv.procs.find(req.Process)
			if err != nil {
				return nil, err
			}
			if req.Input == nil {
				return nil, rpcErrorf(codeInvalidArgument, "input: required")
			}
			data := []byte(req.Input.Stdin)
			if p.pty {
				data = append(data, req.Input.Pty...)
			}
			if p.in == nil {
				return nil, rpcErrorf(codeFailedPrecond, "process %d was started without stdin", p.pid)
			}
			if len(data) == 0 {
				return struct{}{}, nil
			}
			// The size, never the bytes: input may be a password typed
			// into a terminal.
			rec := Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "process.input", Outcome: "ok", Detail: fmt.Sprintf("pid %d: %d bytes", p.pid, len(data))}
			// Input that reaches the command is recorded by the feeder
			// as it takes it, before the command can read it (input can
			// end the process, exit typed into a shell, and the end must
			// not land in the log before its cause), and before this
			// call answers (the caller's next call must not land before
			// it either). Input that never reached it is recorded here.
			recorded := make(chan struct{})
			taken := func() {
				s.audit.record(rec)
				close(recorded)
			}
			if err := sendInput(ctx, p, stdinWrite{data: data, taken: taken}); err != nil {
				rec.Outcome = err.Code
				s.audit.record(rec)
				return nil, err
			}
			<-recorded // the feeder runs taken as soon as it has the input
			return struct{}{}, nil
		})
	case "CloseStdin":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req selectRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			p, err := c.lv.procs.find(req.Process)
			if err != nil {
				return nil, err
			}
			// Recorded before it acts (it cannot fail): closing stdin can
			// end the process, and the end must not land in the log
			// before its cause.
			s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "process.close_stdin", Outcome: "ok", Detail: fmt.Sprintf("pid %d", p.pid)})
			p.closeStdin()
			return struct{}{}, nil
		})
	case "SendSignal":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req sendSignalRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			sig, ok := parseSignal(req.Signal)
			if !ok {
				return nil, rpcErrorf(codeInvalidArgument, "signal: want SIGNAL_SIGKILL or SIGNAL_SIGTERM")
			}
			p, err := c.lv.procs.find(req.Process)
			if err != nil {
				return nil, err
			}
			s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "process.signal", Outcome: "ok", Detail: fmt.Sprintf("pid %d %s", p.pid, unix.SignalName(sig))})
			if err := p.p.Signal(sig); err != nil {
				return nil, rpcErrorf(codeNotFound, "process %d: the signal was not delivered", p.pid)
			}
			return struct{}{}, nil
		})
	case "Update":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req updateRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			p, err := c.lv.procs.find(req.Process)
			if err != nil {
				return nil, err
			}
			if req.Pty == nil || req.Pty.Size == nil {
				return struct{}{}, nil
			}
			if !p.pty {
				return nil, rpcErrorf(codeFailedPrecond, "process %d has no terminal", p.pid)
			}
			if err := p.p.Resize(uint16(min(req.Pty.Size.Rows, 1000)), uint16(min(req.Pty.Size.Cols, 1000))); err != nil {
				return nil, rpcErrorf(codeUnavailable, "resize: the sandbox did not take it")
			}
			return struct{}{}, nil
		})
	default:
		writeUnaryError(w, http.StatusNotFound, rpcErrorf(codeUnimplemented, "process.Process/%s is not implemented", clip(method)))
	}
}

// sendInput hands w to the feeder of the process's stdin.
func sendInput(ctx context.Context, p *proc, w stdinWrite) *rpcError {
	select {
	case p.in <- w:
		return nil
	case <-p.inClosed:
		return rpcErrorf(codeFailedPrecond, "process %d: stdin is closed", p.pid)
	case <-p.done:
		return rpcErrorf(codeNotFound, "process %d has ended", p.pid)
	case <-ctx.Done():
		return rpcErrorf(codeDeadlineExceeded, "process %d does not read its stdin", p.pid)
	}
}

// processStart runs a command and streams its events.
func (s *Server) processStart(ctx context.Context, r *http.Request, c envdCall, msg []byte, st *stream) *rpcError {
	var req startRequest
	if err := decodeMessage(msg, &req); err != nil {
		return err
	}
	if req.Process == nil || req.Process.Cmd == "" {
		return rpcErrorf(codeInvalidArgument, "process.cmd: required")
	}
	cfg := *req.Process
	dir, _ := c.resolve("~") // envd's default: the user's home
	if t := c.b.template.env; t != nil && t.Workdir != "" {
		dir = t.Workdir // a stored template's working directory
	}
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		d, err := c.resolve(*cfg.Cwd)
		if err != nil {
			return rpcErrorf(codeInvalidArgument, "cwd: %s", err.Error())
		}
		dir = d
	}
	// The sandbox's envs (its create request's), then the command's own
	// over them.
	vars := maps.Clone(c.b.envs)
	if vars == nil {
		vars = map[string]string{}
	}
	for k, v := range cfg.Envs {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return rpcErrorf(codeInvalidArgument, "envs: %q is not a variable name", clip(k))
		}
		vars[k] = v
	}
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	headerTimeout, rerr := connectTimeout(r)
	if rerr != nil {
		return rerr
	}
	// The command's own limit kills it at the client's deadline (as envd
	// does), or at the policy's, whichever is first.
	timeout, policyTimeout := headerTimeout, time.Duration(c.b.template.doc.Sandbox.Limits.CommandTimeout)
	if policyTimeout > 0 && (timeout == 0 || policyTimeout < timeout) {
		timeout = policyTimeout
	}
	cmd := sandbox.Command{
		Argv: append([]string{cfg.Cmd}, cfg.Args...), Env: env, Dir: dir, User: c.user, Timeout: timeout,
		MaxOutput: int64(c.b.template.doc.Sandbox.Limits.Output),
	}
	p := &proc{tag: req.Tag, cfg: cfg, done: make(chan struct{}), subs: map[*subscriber]struct{}{}}
	if p.cfg.Envs == nil {
		p.cfg.Envs = map[string]string{}
	}
	if p.cfg.Args == nil {
		p.cfg.Args = []string{}
	}
	if req.Pty != nil {
		p.pty, cmd.TTY = true, true
		if req.Pty.Size != nil {
			cmd.Rows, cmd.Cols = uint16(min(req.Pty.Size.Rows, 1000)), uint16(min(req.Pty.Size.Cols, 1000))
		}
		cmd.Stdout = outWriter{p, outPty}
		cmd.Stderr = outWriter{p, outPty}
	} else {
		cmd.Stdout = outWriter{p, outStdout}
		cmd.Stderr = outWriter{p, outStderr}
	}
	var pr *io.PipeReader
	var pw *io.PipeWriter
	if p.pty || req.Stdin == nil || *req.Stdin {
		pr, pw = io.Pipe()
		p.in, p.inClosed = make(chan stdinWrite), make(chan struct{})
		cmd.Stdin = pr
	}
	sub := p.subscribe()
	defer p.unsubscribe(sub)

	t := c.lv.procs
	started, err := c.lv.sb.Start(context.WithoutCancel(ctx), cmd)
	rec := Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "process.start", Detail: clipDetail(commandLine(cfg))}
	if err != nil {
		rec.Outcome = "error"
		s.audit.record(rec)
		if pw != nil {
			pw.Close()
		}
		if errors.Is(err, context.Canceled) {
			return rpcErrorf(codeCanceled, "the request ended")
		}
		return rpcErrorf(codeUnavailable, "the sandbox did not start the command")
	}
	p.p = started
	t.mu.Lock()
	p.pid = t.next
	t.next++
	t.procs[p.pid] = p
	t.mu.Unlock()
	rec.Outcome, rec.Detail = "ok", clipDetail(fmt.Sprintf("pid %d: %s", p.pid, rec.Detail))
	s.audit.record(rec)

	if pw != nil {
		s.work.Add(1)
		go func() {
			defer s.work.Done()
			feedStdin(p, pw)
		}()
	}
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		res, err := started.Wait(context.WithoutCancel(ctx))
		p.end, p.endErr = endOf(res, err, headerTimeout > 0 && headerTimeout <= timeout)
		if pr != nil {
			// Unblocks a feeder stuck on a command that no longer reads.
			pr.CloseWithError(io.ErrClosedPipe)
		}
		outcome := "exit:" + strconv.Itoa(int(p.end.ExitCode))
		if p.endErr != nil {
			outcome = p.endErr.Code
		}
		s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "process.end", Outcome: outcome, Detail: fmt.Sprintf("pid %d %s", p.pid, p.end.Status)})
		t.mu.Lock()
		delete(t.procs, p.pid)
		t.mu.Unlock()
		close(p.done)
	}()
	return s.pump(ctx, r, c, p, sub, st)
}

// stdinWrite is input SendInput hands the feeder; taken runs when the
// feeder takes it, before the command can read it.
type stdinWrite struct {
	data  []byte
	taken func()
}

// feedStdin copies what SendInput queues to the command's stdin until
// CloseStdin or the process's end.
func feedStdin(p *proc, pw *io.PipeWriter) {
	defer pw.Close()
	for {
		select {
		case w := <-p.in:
			w.taken()
			if _, err := pw.Write(w.data); err != nil {
				return
			}
		case <-p.inClosed:
			return
		case <-p.done:
			return
		}
	}
}

// commandLine is a command for the audit log: bash -c's script, or the
// argv joined.
func commandLine(cfg processConfig) string {
	if path.Base(cfg.Cmd) == "bash" || path.Base(cfg.Cmd) == "sh" {
		for i, a := range cfg.Args {
			if a == "-c" && i+1 < len(cfg.Args) {
				return cfg.Args[i+1]
			}
		}
	}
	return strings.Join(append([]string{cfg.Cmd}, cfg.Args...), " ")
}

// endOf is the end event of a command's result. A command killed at the
// client's deadline ends the stream with deadline_exceeded instead.
func endOf(res sandbox.Result, err error, clientDeadline bool) (endEvent, *rpcError) {
	if err != nil {
		return endEvent{}, rpcErrorf(codeUnavailable, "the sandbox was lost while the command ran")
	}
	switch res.Outcome {
	// As envd (Go's os/exec): a failed command's error is its status,
	// which the SDK's CommandExitError takes as its message.
	case sandbox.OutcomeExited:
		e := endEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: "exit status " + strconv.Itoa(res.ExitCode)}
		if res.ExitCode != 0 {
			e.Error = &e.Status
		}
		return e, nil
	case sandbox.OutcomeSignaled:
		e := endEvent{ExitCode: -1, Status: "signal: " + unix.Signal(res.Signal).String()}
		e.Error = &e.Status
		return e, nil
	case sandbox.OutcomeTimeout:
		if clientDeadline {
			return endEvent{}, rpcErrorf(codeDeadlineExceeded, "the command ran past the request's timeout and was killed")
		}
	case sandbox.OutcomeLost:
		return endEvent{}, rpcErrorf(codeUnavailable, "the sandbox was lost while the command ran")
	}
	msg := res.Message
	if msg == "" {
		msg = string(res.Outcome)
	}
	return endEvent{ExitCode: int32(res.ExitStatus()), Status: string(res.Outcome), Error: &msg}, nil
}

// processConnect streams the events of a running process from now on.
// Its deadline ends the stream, not the process.
func (s *Server) processConnect(ctx context.Context, r *http.Request, c envdCall, msg []byte, st *stream) *rpcError {
	var req selectRequest
	if err := decodeMessage(msg, &req); err != nil {
		return err
	}
	p, err := c.lv.procs.find(req.Process)
	if err != nil {
		return err
	}
	sub := p.subscribe()
	defer p.unsubscribe(sub)
	s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "process.connect", Outcome: "ok", Detail: fmt.Sprintf("pid %d", p.pid)})
	return s.pump(ctx, r, c, p, sub, st)
}

// pump sends a process's events to one stream: start, output as it
// comes, keepalives when idle, then end.
func (s *Server) pump(ctx context.Context, r *http.Request, c envdCall, p *proc, sub *subscriber, st *stream) *rpcError {
	if d, rerr := connectTimeout(r); rerr != nil {
		return rerr
	} else if d > 0 {
		var cancel context.CancelFunc
		// A little past the command's own limit, so that a killed
		// command's end is reported rather than cut.
		ctx, cancel = context.WithTimeout(ctx, d+2*time.Second)
		defer cancel()
	}
	if err := st.send(eventMessage{Event: processEvent{Start: &startEvent{PID: p.pid}}}); err != nil {
		return nil
	}
	every := s.keepaliveOf(r)
	tick := time.NewTicker(every)
	defer tick.Stop()
	gone := c.lv.sb.Done()
	for {
		var err error
		select {
		case ch := <-sub.ch:
			d := &dataEvent{}
			switch ch.kind {
			case outStdout:
				d.Stdout = ch.data
			case outStderr:
				d.Stderr = ch.data
			default:
				d.Pty = ch.data
			}
			err = st.send(eventMessage{Event: processEvent{Data: d}})
			tick.Reset(every)
		case <-p.done:
			if isDone(c.lv.ending) {
				return errSandboxGone // ended by the sandbox's end
			}
			if p.endErr != nil {
				return p.endErr
			}
			end := p.end
			if err := st.send(eventMessage{Event: processEvent{End: &end}}); err != nil {
				return nil
			}
			return nil
		case <-tick.C:
			err = st.send(eventMessage{Event: processEvent{Keepalive: &struct{}{}}})
		case <-gone:
			return errSandboxGone
		case <-c.lv.ending:
			return errSandboxGone
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return rpcErrorf(codeDeadlineExceeded, "the stream reached its timeout")
			}
			return rpcErrorf(codeCanceled, "the request ended")
		}
		if err != nil {
			return nil // the client is gone; nothing to tell it
		}
	}
}

// keepaliveOf is the keepalive interval the client asked for
// (Keepalive-Ping-Interval, seconds), else the configured one.
func (s *Server) keepaliveOf(r *http.Request) time.Duration {
	if v := r.Header.Get("Keepalive-Ping-Interval"); v != "" {
		if n, err := strconv.Atoi(v); err == nil && n >= 1 && n <= 600 {
			return time.Duration(n) * time.Second
		}
	}
	return s.cfg.Keepalive
}

// unaryCall runs a unary Connect call: checks, bounded body, answer.
func (s *Server) unaryCall(w http.ResponseWriter, r *http.Request, f func(ctx context.Context, body []byte) (any, *rpcError)) {
	if status, err := checkRequest(r, "application/json"); err != nil {
		writeUnaryError(w, status, err)
		return
	}
	b, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxMessage+1))
	if err != nil {
		writeUnaryError(w, 0, rpcErrorf(codeInvalidArgument, "reading the request failed"))
		return
	}
	if int64(len(b)) > s.cfg.MaxMessage {
		writeUnaryError(w, 0, rpcErrorf(codeResourceExhaust, "request message is over the limit of %d bytes", s.cfg.MaxMessage))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Minute)
	defer cancel()
	if d, rerr := connectTimeout(r); rerr != nil {
		writeUnaryError(w, 0, rerr)
		return
	} else if d > 0 {
		var c2 context.CancelFunc
		ctx, c2 = context.WithTimeout(ctx, d)
		defer c2()
	}
	out, rerr := f(ctx, b)
	if rerr != nil {
		writeUnaryError(w, 0, rerr)
		return
	}
	writeUnary(w, out)
}

// streamCall runs a server-streaming Connect call: checks, the one
// request envelope, then f's messages and the end-stream envelope with
// f's error.
func (s *Server) streamCall(w http.ResponseWriter, r *http.Request, f func(ctx context.Context, msg []byte, st *stream) *rpcError) {
	if status, err := checkRequest(r, "application/connect+json"); err != nil {
		writeUnaryError(w, status, err)
		return
	}
	st := newStream(w, 30*time.Second)
	msg, err := decodeStreamRequest(r.Body, s.cfg.MaxMessage)
	if err != nil {
		_ = st.end(requestError(err))
		return
	}
	rerr := f(r.Context(), msg, st)
	if rerr == errSandboxGone {
		// As envd's stream ends when its VM does: the connection drops
		// mid-stream, and the SDK, finding the sandbox gone (/health is
		// 502), says it was killed or reached its end of life.
		panic(http.ErrAbortHandler)
	}
	_ = st.end(rerr)
}

// errSandboxGone ends a stream whose sandbox ended under it: streamCall
// drops its connection rather than ending it.
var errSandboxGone = &rpcError{Code: codeUnavailable, Message: "the sandbox is gone"}
