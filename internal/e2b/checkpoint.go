package e2b

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// A sandbox's workspace is kept as checkpoints (package checkpoint, the
// host's one store, shared with the run engine): a pause and a snapshot
// store what changed since the sandbox's last checkpoint (the whole tree
// the first time), which the sandbox computes itself; a resume and a
// create from a snapshot boot a fresh sandbox with an empty workspace and
// unpack the checkpoint's tree into it. Sandboxes paused before
// checkpoints (a tar file in StateDir) still resume from their file.

// checkpointAttempts bounds how often one checkpoint is taken again after
// it failed while its sandbox lived (a file changed while it was read).
const checkpointAttempts = 3

// errNoCheckpoints answers a snapshot on a server whose sandboxes cannot
// be checkpointed.
var errNoCheckpoints = &publicError{status: 501, msg: "snapshots: this server keeps no checkpoints of its sandboxes' workspaces"}

// checkpointer returns lv's sandbox as a Checkpointer, if s keeps
// checkpoints and the sandbox can take them.
func (s *Server) checkpointer(lv *live) (sandbox.Checkpointer, bool) {
	if s.o.Checkpoints == nil {
		return nil, false
	}
	cp, ok := lv.sb.(sandbox.Checkpointer)
	return cp, ok
}

// errOverCap is a checkpoint that read more than the cap allows.
var errOverCap = errors.New("the workspace is over its limit")

// checkpoint stores the workspace of b's running boot lv: the change since
// b's last checkpoint when the sandbox still knows it, else the whole
// tree. Over Config.MaxSnapshot bytes (the delta's stream, or the tree it
// makes) it answers 507 and keeps nothing. It returns the checkpoint's
// digest. Preconditions: b.life held, lv running.
func (s *Server) checkpoint(ctx context.Context, b *box, lv *live) (string, error) {
	cp, ok := s.checkpointer(lv)
	if !ok {
		return "", errNoCheckpoints
	}
	parent, since := b.ckpt, lv.baseline
	if parent == "" || since == "" {
		parent, since = "", ""
	}
	var (
		res checkpoint.Result
		cr  sandbox.CheckpointResult
		err error
	)
	for attempt := 1; ; attempt++ {
		res, cr, err = s.writeCheckpoint(ctx, b.tenant, cp, parent, since)
		if err == nil && cr.Full && since != "" {
			// The sandbox no longer knows the baseline: what it sent is
			// the whole tree, taken again as such.
			parent, since = "", ""
			continue
		}
		if err == nil || errors.Is(err, errOverCap) || attempt == checkpointAttempts || ctx.Err() != nil || isDone(lv.sb.Done()) {
			break
		}
	}
	tree := res.Stats.TreeBytes
	if err == nil && res.Digest == parent && parent != "" {
		tree = b.ckptBytes // nothing changed
	}
	if errors.Is(err, errOverCap) || err == nil && tree > s.cfg.MaxSnapshot {
		return "", &publicError{status: 507, msg: fmt.Sprintf("the workspace is over %d bytes, the most a pause or snapshot keeps", s.cfg.MaxSnapshot)}
	}
	if err != nil {
		return "", fmt.Errorf("e2b: checkpoint %s: %w", b.id, err)
	}
	b.ckpt, b.ckptBytes, lv.baseline = res.Digest, tree, cr.Baseline
	return res.Digest, nil
}

// writeCheckpoint streams cp's delta since the baseline since (the whole
// tree when "") into the checkpoint store, as a change to parent; the
// stream may be at most MaxSnapshot bytes.
func (s *Server) writeCheckpoint(ctx context.Context, tenant string, cp sandbox.Checkpointer, parent, since string) (checkpoint.Result, sandbox.CheckpointResult, error) {
	pr, pw := io.Pipe()
	var cr sandbox.CheckpointResult
	done := make(chan error, 1)
	go func() {
		var err error
		cr, err = cp.Checkpoint(ctx, sandbox.CheckpointRequest{Since: since}, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	capped := &capReader{r: pr, left: s.cfg.MaxSnapshot}
	br := bufio.NewReaderSize(capped, 64<<10)
	if since != "" && emptyStream(br) {
		// Nothing changed: the parent stands for the tree.
		_, _ = io.Copy(io.Discard, br)
		if err := <-done; err != nil {
			return checkpoint.Result{}, cr, fmt.Errorf("checkpoint: %w", err)
		}
		return checkpoint.Result{Digest: parent, Parent: parent}, cr, nil
	}
	res, werr := s.o.Checkpoints.Write(ctx, tenant, parent, since == "", br)
	// A write that stopped early leaves the sandbox's stream unread: end
	// it.
	pr.CloseWithError(errors.New("the checkpoint's store stopped reading"))
	err := <-done
	switch {
	case capped.over:
		return res, cr, errOverCap
	case err != nil:
		return res, cr, fmt.Errorf("checkpoint: %w", err)
	case werr != nil:
		return res, cr, werr
	case since == "" && !cr.Full:
		return res, cr, errors.New("checkpoint: the sandbox sent a change where the whole tree was asked for")
	}
	return res, cr, nil
}

// capReader fails reads past its budget.
type capReader struct {
	r    io.Reader
	left int64
	over bool
}

func (c *capReader) Read(p []byte) (int, error) {
	// One byte past the budget tells a stream at the cap from one over it.
	if int64(len(p)) > c.left+1 {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if c.left -= int64(n); c.left < 0 {
		c.over = true
		return 0, errOverCap
	}
	return n, err
}

// emptyStream reports whether the tar stream br holds no entry: only the
// zero blocks that end a tar (and at most a record of padding).
func emptyStream(br *bufio.Reader) bool {
	b, err := br.Peek(10<<10 + 1)
	if !errors.Is(err, io.EOF) || len(b) < 1024 {
		return false
	}
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// restoreCheckpoint unpacks the tree of checkpoint digest, b's tenant's,
// into the empty workspace of b's fresh boot lv, inside the sandbox (the
// host never writes what a sandbox produced), and makes it the baseline
// of b's next checkpoint. Preconditions: b.life held.
func (s *Server) restoreCheckpoint(ctx context.Context, b *box, lv *live, digest string) error {
	cp, ok := s.checkpointer(lv)
	if !ok {
		return errors.New("this server keeps no checkpoints, or its sandboxes take none")
	}
	t, err := s.o.Checkpoints.Resolve(ctx, b.tenant, digest)
	if err != nil {
		return err
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(t.WriteTar(ctx, pw)) }()
	defer pr.CloseWithError(errors.New("done"))
	if err := untar(ctx, lv.sb, pr); err != nil {
		return err
	}
	cr, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{MarkOnly: true}, io.Discard)
	if err != nil {
		return fmt.Errorf("checkpoint: mark the restored tree: %w", err)
	}
	b.ckpt, b.ckptBytes, lv.baseline = digest, t.Bytes(), cr.Baseline
	return nil
}

// untar unpacks the tar stream r into sb's /workspace with the sandbox's
// own tar, as the sandbox user: modes and times kept.
func untar(ctx context.Context, sb sandbox.Sandbox, r io.Reader) error {
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.Command{
		Argv:  []string{"tar", "-xpf", "-", "-C", "/workspace", "--no-same-owner", "--delay-directory-restore"},
		Stdin: r, Stdout: &out, Stderr: &out, Timeout: 10 * time.Minute, MaxOutput: 64 << 10,
	})
	if err != nil {
		return err
	}
	if res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0 {
		return fmt.Errorf("tar: %s %d: %s", res.Outcome, res.ExitCode, strings.TrimSpace(out.String()))
	}
	return nil
}
