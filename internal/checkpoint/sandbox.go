package checkpoint

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// This file is the checkpoints of a live sandbox (sandbox.Checkpointer),
// one way for every host component that keeps them (the run engine, the
// E2B API): take one into the store, restore one into a fresh sandbox.

// TakeAttempts bounds how often Take takes a checkpoint again after it
// failed while its sandbox lived (a file changed while it was read).
const TakeAttempts = 3

// TakeRequest is what Take stores.
type TakeRequest struct {
	Tenant string
	// Parent is the sandbox's latest checkpoint and Since the sandbox's
	// baseline as of it; when either is "", Take stores the whole tree.
	Parent, Since string
	// Limit, when above 0, bounds the bytes of the sandbox's stream.
	Limit int64
}

// Take stores what changed in sb's workspace since q.Since as a change to
// q.Parent, or the whole tree when there is no baseline or the sandbox no
// longer knows it (it keeps the last two). It tries again, up to
// TakeAttempts, while the sandbox lives. A stream with no entry is not
// stored: the result is q.Parent again, with no stats (the caller knows
// its tree). It returns the sandbox's record of the workspace too, whose
// Baseline names it for the next Take.
func (s *Store) Take(ctx context.Context, sb sandbox.Sandbox, q TakeRequest) (Result, sandbox.CheckpointResult, error) {
	cp, ok := sb.(sandbox.Checkpointer)
	if !ok {
		return Result{}, sandbox.CheckpointResult{}, fmt.Errorf("checkpoint: sandbox %s takes no checkpoints", sb.ID())
	}
	if q.Parent == "" || q.Since == "" {
		q.Parent, q.Since = "", ""
	}
	for attempt := 1; ; attempt++ {
		res, cr, err := s.takeOnce(ctx, cp, q)
		if err == nil && cr.Full && q.Since != "" {
			// The sandbox no longer knows the baseline: what it sent is
			// the whole tree, taken again as such.
			q.Parent, q.Since = "", ""
			continue
		}
		if err == nil || errors.Is(err, ErrOverLimit) || attempt == TakeAttempts || ctx.Err() != nil || gone(sb) {
			return res, cr, err
		}
	}
}

func gone(sb sandbox.Sandbox) bool {
	select {
	case <-sb.Done():
		return true
	default:
		return false
	}
}

// takeOnce streams cp's delta since q.Since into s as a change to
// q.Parent.
func (s *Store) takeOnce(ctx context.Context, cp sandbox.Checkpointer, q TakeRequest) (Result, sandbox.CheckpointResult, error) {
	pr, pw := io.Pipe()
	var cr sandbox.CheckpointResult
	done := make(chan error, 1)
	go func() {
		var err error
		cr, err = cp.Checkpoint(ctx, sandbox.CheckpointRequest{Since: q.Since}, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	var r io.Reader = pr
	capped := &capReader{r: pr, left: q.Limit}
	if q.Limit > 0 {
		r = capped
	}
	br := bufio.NewReaderSize(r, 64<<10)
	if q.Since != "" && emptyStream(br) {
		// Nothing changed: the parent stands for the tree.
		_, _ = io.Copy(io.Discard, br)
		if err := <-done; err != nil {
			return Result{}, cr, fmt.Errorf("checkpoint: %w", err)
		}
		return Result{Digest: q.Parent, Parent: q.Parent}, cr, nil
	}
	res, werr := s.Write(ctx, q.Tenant, q.Parent, q.Since == "", br)
	// A write that stopped early leaves the sandbox's stream unread: end
	// it.
	pr.CloseWithError(errors.New("the checkpoint's store stopped reading"))
	err := <-done
	switch {
	case capped.over:
		return res, cr, ErrOverLimit
	case err != nil:
		return res, cr, fmt.Errorf("checkpoint: %w", err)
	case werr != nil:
		return res, cr, werr
	case q.Since == "" && !cr.Full:
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
		return 0, ErrOverLimit
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

// RestoreInto unpacks the tree of checkpoint digest, tenant's, into sb's
// empty workspace, inside the sandbox (the host never writes what a
// sandbox produced), and records it as the sandbox's baseline. It returns
// the baseline's name, for the next Take, and the tree's bytes of content.
func (s *Store) RestoreInto(ctx context.Context, tenant, digest string, sb sandbox.Sandbox) (string, int64, error) {
	cp, ok := sb.(sandbox.Checkpointer)
	if !ok {
		return "", 0, fmt.Errorf("checkpoint: sandbox %s takes no checkpoints", sb.ID())
	}
	t, err := s.Resolve(ctx, tenant, digest)
	if err != nil {
		return "", 0, err
	}
	src := t.TarStream(ctx)
	defer src.Close()
	if err := Untar(ctx, sb, src, false); err != nil {
		return "", 0, err
	}
	// The sandbox unpacked what it was sent; a stream that stopped at an
	// entry's end (a chunk that failed its check) reads as a whole one.
	if err := src.Err(); err != nil {
		return "", 0, err
	}
	cr, err := cp.Checkpoint(ctx, sandbox.CheckpointRequest{MarkOnly: true}, io.Discard)
	if err != nil {
		return "", 0, fmt.Errorf("checkpoint: mark the restored tree: %w", err)
	}
	return cr.Baseline, t.Bytes(), nil
}

// Untar unpacks the tar stream r (gzipped when gz) into sb's /workspace as
// the sandbox user: modes and times kept, owners the user's. A sandbox
// whose executor imports (sandbox.Importer) parses the stream itself, and
// the sandbox needs no tar; otherwise the sandbox's own tar runs: GNU tar
// with --delay-directory-restore (a read-only directory's entries still
// go in), another (busybox's, in small images) with the options both know.
func Untar(ctx context.Context, sb sandbox.Sandbox, r io.Reader, gz bool) error {
	if im, ok := sb.(sandbox.Importer); ok {
		if gz {
			zr, err := gzip.NewReader(r)
			if err != nil {
				return fmt.Errorf("untar: %w", err)
			}
			defer zr.Close()
			r = zr
		}
		return im.Import(ctx, "/workspace", r)
	}
	var ver bytes.Buffer
	_, _ = sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"tar", "--version"}, Stdout: &ver, Stderr: io.Discard, Timeout: time.Minute, MaxOutput: 4 << 10})
	argv := []string{"tar", "-x", "-o", "-f", "-", "-C", "/workspace"}
	if strings.Contains(ver.String(), "GNU tar") {
		argv = append(argv, "-p", "--delay-directory-restore")
	}
	if gz {
		argv = append(argv, "-z")
	}
	var out bytes.Buffer
	res, err := sandbox.Run(ctx, sb, sandbox.Command{
		Argv: argv, Stdin: r, Stdout: &out, Stderr: &out, Timeout: 10 * time.Minute, MaxOutput: 64 << 10,
		Bulk: true,
	})
	if err != nil {
		return err
	}
	if res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0 {
		return fmt.Errorf("tar: %s %d: %s", res.Outcome, res.ExitCode, strings.TrimSpace(out.String()))
	}
	return nil
}
