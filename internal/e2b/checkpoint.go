package e2b

import (
	"context"
	"errors"
	"fmt"

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

// errNoCheckpoints answers a snapshot on a server whose sandboxes cannot
// be checkpointed.
var errNoCheckpoints = &publicError{status: 501, msg: "snapshots: this server keeps no checkpoints of its sandboxes' workspaces"}

// checkpoints reports whether s keeps checkpoints and lv's sandbox can
// take them.
func (s *Server) checkpoints(lv *live) bool {
	_, ok := lv.sb.(sandbox.Checkpointer)
	return ok && s.o.Checkpoints != nil
}

// checkpoint stores the workspace of b's running boot lv: the change since
// b's last checkpoint when the sandbox still knows it, else the whole
// tree. Over Config.MaxSnapshot bytes (the delta's stream, or the tree it
// makes) it answers 507 and keeps nothing. It returns the checkpoint's
// digest. Preconditions: b.life held, lv running.
func (s *Server) checkpoint(ctx context.Context, b *box, lv *live) (string, error) {
	if !s.checkpoints(lv) {
		return "", errNoCheckpoints
	}
	parent := b.ckpt
	res, cr, err := s.o.Checkpoints.Take(ctx, lv.sb, checkpoint.TakeRequest{Tenant: b.tenant, Parent: parent, Since: lv.baseline, Limit: s.cfg.MaxSnapshot})
	tree := res.Stats.TreeBytes
	if err == nil && res.Digest == parent && parent != "" {
		tree = b.ckptBytes // nothing changed
	}
	if errors.Is(err, checkpoint.ErrOverLimit) || err == nil && tree > s.cfg.MaxSnapshot {
		return "", &publicError{status: 507, msg: fmt.Sprintf("the workspace is over %d bytes, the most a pause or snapshot keeps", s.cfg.MaxSnapshot)}
	}
	if err != nil {
		return "", fmt.Errorf("e2b: checkpoint %s: %w", b.id, err)
	}
	b.ckpt, b.ckptBytes, lv.baseline = res.Digest, tree, cr.Baseline
	return res.Digest, nil
}

// restoreCheckpoint unpacks the tree of checkpoint digest, b's tenant's,
// into the empty workspace of b's fresh boot lv and makes it the baseline
// of b's next checkpoint. Preconditions: b.life held.
func (s *Server) restoreCheckpoint(ctx context.Context, b *box, lv *live, digest string) error {
	if !s.checkpoints(lv) {
		return errors.New("this server keeps no checkpoints, or its sandboxes take none")
	}
	baseline, tree, err := s.o.Checkpoints.RestoreInto(ctx, b.tenant, digest, lv.sb)
	if err != nil {
		return err
	}
	b.ckpt, b.ckptBytes, lv.baseline = digest, tree, baseline
	return nil
}
