package kube

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/execconn"
)

// ID names the sandbox (and its pod).
func (s *Sandbox) ID() string { return s.id }

// Done is closed when the sandbox is gone: destroyed, its pod deleted or
// ended, or its executor connection broken.
func (s *Sandbox) Done() <-chan struct{} { return s.done }

// Info describes the sandbox.
func (s *Sandbox) Info() sandbox.Info {
	return sandbox.Info{ID: s.id, Backend: "kubernetes", Created: s.created, Layers: append([]string(nil), s.layers...)}
}

// Destroy ends the executor connection and deletes the pod, and returns
// once the pod is gone: its containers, and so every process of the
// sandbox, stopped (or ctx's end, or 30 s).
func (s *Sandbox) Destroy(ctx context.Context) error {
	s.end(nil)
	s.stopWatch()
	s.watching.Wait()
	_ = s.conn.Close()
	s.deletePod()
	s.waitGone(ctx)
	return nil
}

// Detach ends this host's connection to the sandbox and leaves the sandbox
// running: its commands started here end, others' go on, and the sandbox
// lives while another host is attached, or for Config.DetachedGrace (none:
// it ends now, unless another host is attached). The Sandbox is unusable
// afterwards (ErrLost), as after Destroy.
func (s *Sandbox) Detach() {
	s.end(errors.New("detached"))
	s.stopWatch()
	s.watching.Wait()
	_ = s.conn.Close()
}

// alive fails with sandbox.ErrLost once the sandbox is gone.
func (s *Sandbox) alive() error {
	select {
	case <-s.done:
		s.mu.Lock()
		why := s.lost
		s.mu.Unlock()
		return fmt.Errorf("sandbox %s: %w: %w", s.id, sandbox.ErrLost, why)
	default:
		return nil
	}
}

// Start runs a command.
func (s *Sandbox) Start(ctx context.Context, c sandbox.Command) (sandbox.Process, error) {
	if err := s.alive(); err != nil {
		return nil, err
	}
	req := execproto.Request{
		Argv: c.Argv, Env: append(append([]string{}, s.spec.Env...), c.Env...), Dir: c.Dir,
		User: c.User, TTY: c.TTY, Rows: c.Rows, Cols: c.Cols,
		TimeoutMS: c.Timeout.Milliseconds(), MaxOutput: c.MaxOutput, Fingerprint: c.Fingerprint,
	}
	if req.User == "" {
		req.User = s.spec.User
	}
	if req.Dir == "" {
		req.Dir = s.spec.Dir
	}
	if c.Timeout > 0 && req.TimeoutMS == 0 {
		req.TimeoutMS = 1
	}
	if c.Bulk {
		req.Window, req.ChunkSize = execproto.BulkWindow, execproto.BulkChunkSize
	}
	p, err := s.conn.Start(req, c.Stdin, c.Stdout, c.Stderr)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	return &process{s: s, p: p, argv0: c.Argv[0]}, nil
}

// process is a running command.
type process struct {
	s     *Sandbox
	p     *execconn.Process
	argv0 string
}

func (p *process) Signal(sig unix.Signal) error { return p.p.Signal(sig) }

func (p *process) Resize(rows, cols uint16) error { return p.p.Resize(rows, cols) }

func (p *process) Wait(ctx context.Context) (sandbox.Result, error) {
	r, err := p.p.Wait(ctx)
	res := sandbox.Result{
		Outcome: sandbox.Outcome(r.Outcome), ExitCode: r.ExitCode, Signal: r.Signal, Fingerprint: r.Fingerprint, NotStarted: r.NotStarted,
		Usage: sandbox.Usage{
			Wall:   time.Duration(r.WallMS) * time.Millisecond,
			CPU:    time.Duration(r.UserMS+r.SystemMS) * time.Millisecond,
			MaxRSS: r.MaxRSSKB << 10,
		},
	}
	if err != nil {
		if errors.Is(err, sandbox.ErrLost) {
			res.Outcome, res.Message = sandbox.OutcomeLost, "sandbox lost: "+err.Error()
			return res, nil
		}
		return res, err
	}
	if r.Outcome == "" && r.Error != "" {
		return res, fmt.Errorf("sandbox %s: start %.40q: %s", p.s.id, p.argv0, r.Error)
	}
	switch {
	case res.Outcome == sandbox.OutcomeTimeout:
		res.Message = "killed: command timeout exceeded"
	case res.Outcome == sandbox.OutcomeOutputLimit:
		res.Message = "killed: output limit exceeded"
	case res.NotStarted != "":
		res.Message = execconn.NotStartedMessage(p.argv0, res.NotStarted, r.Errno)
	}
	return res, nil
}

// Checkpoint implements sandbox.Checkpointer (of /workspace; a pod has no
// root checkpoint).
func (s *Sandbox) Checkpoint(ctx context.Context, req sandbox.CheckpointRequest, w io.Writer) (sandbox.CheckpointResult, error) {
	if err := s.alive(); err != nil {
		return sandbox.CheckpointResult{}, err
	}
	if req.Root {
		return sandbox.CheckpointResult{}, fmt.Errorf("sandbox %s: root checkpoints: not supported on the kubernetes backend", s.id)
	}
	r, err := s.conn.Checkpoint(ctx, execproto.TreeWorkspace, req.Since, req.MarkOnly, w)
	if err != nil {
		return sandbox.CheckpointResult{}, fmt.Errorf("sandbox %s: %w", s.id, err)
	}
	return sandbox.CheckpointResult{Baseline: r.Baseline, Full: r.Full, Entries: r.Entries, Bytes: r.Bytes, Walked: r.Walked}, nil
}
