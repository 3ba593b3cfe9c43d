package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/airlockrun/airlock/internal/checkpoint"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// A sandbox's workspace is kept as checkpoints (package checkpoint): the
// first, its start, is the whole tree as the sandbox was made (a host
// directory, an uploaded tar, a git source's tree, or nothing), before any
// command; each step that may have changed it adds the change since the
// one before, which the sandbox computes (sandbox.Checkpointer: in a
// copy-on-write workspace, from the overlay's upper layer alone), so a
// step costs what it changed, not what the workspace holds. A replacement
// sandbox gets the latest checkpoint's tree; the run's patch is the change
// from the start to the latest, read from the manifests.
//
// Runs recorded before checkpoints have gzipped tars of the whole
// workspace instead (SnapshotTaken.Format ""): they are restored as such,
// and their next snapshot starts a chain of checkpoints with a whole tree.

// checkpointsOf returns what the run's log says of sandbox name's
// checkpoints, and whether its latest snapshot is one.
func (d *driver) checkpointsOf(name string) (ckptRef, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.shared.checkpoints[name]
	return r, ok
}

// checkpointable reports whether sandbox name's workspace is kept as
// checkpoints by sb: a read-only workspace never changes.
func (d *driver) checkpointable(name string, sb sandbox.Sandbox) bool {
	sc, _ := d.cfg.sandbox(name)
	_, ok := sb.(sandbox.Checkpointer)
	return ok && sc.mode() != sandbox.WorkspaceRO
}

// checkpoint stores what changed in the workspace of l's sandbox since its latest checkpoint, or the whole tree when it has none or the
// sandbox no longer knows it, and returns the event that records it for
// step n (start: the sandbox's first). The caller holds l.mu.
func (d *driver) checkpoint(ctx context.Context, name string, l *live, n int, start bool) (event.SnapshotTaken, error) {
	ref, _ := d.checkpointsOf(name)
	parent := ref.latest
	begin := time.Now()
	res, cr, err := d.e.o.Checkpoints.Take(ctx, l.sb, checkpoint.TakeRequest{Tenant: d.run.Tenant, Parent: parent, Since: l.baseline})
	if err != nil {
		return event.SnapshotTaken{}, err
	}
	l.baseline = cr.Baseline
	if res.Digest == parent && res.Stats.TreeBytes == 0 {
		res.Stats.TreeBytes = d.treeBytes(name, parent)
	}
	if res.Digest != parent {
		d.mu.Lock()
		seq := d.seq
		d.mu.Unlock()
		_, err := d.e.o.Store.PutArtifact(ctx, store.Artifact{
			RunID: d.run.ID, Digest: res.Digest, Size: res.ManifestBytes, MediaType: checkpointMedia,
			Name: fmt.Sprintf("%s%s/%06d-step%d.checkpoint", snapshotPrefix, name, seq, n),
		})
		if err != nil && !errors.Is(err, store.ErrExists) {
			return event.SnapshotTaken{}, err
		}
	}
	return event.SnapshotTaken{
		Step: n, Sandbox: name, Digest: res.Digest, Size: res.Stats.NewBytes + res.ManifestBytes, Base: res.Parent,
		DurationMS: time.Since(begin).Milliseconds(), SandboxID: l.sb.ID(), CPUMS: measure(l.sb),
		Format: event.FormatCheckpoint, Start: start, Full: res.Full,
		TreeBytes: res.Stats.TreeBytes, DeltaBytes: res.Stats.DeltaBytes, SharedBytes: res.Stats.SharedBytes,
	}, nil
}

// treeBytes is the tree size the last snapshot of sandbox name this
// process took says, when that was digest (0 when unknown).
func (d *driver) treeBytes(name, digest string) int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if last, ok := d.snaps[name]; ok && last.digest == digest {
		return last.treeBytes
	}
	return 0
}

// checkpointMedia is the media type of a checkpoint's manifest artifact.
const checkpointMedia = "application/vnd.airlock.checkpoint.v1"

// restoreCheckpoint unpacks the tree of checkpoint digest into sb's
// empty workspace and makes it the sandbox's baseline for l's next
// checkpoint.
func (d *driver) restoreCheckpoint(ctx context.Context, sb sandbox.Sandbox, l *live, digest string) error {
	baseline, _, err := d.e.o.Checkpoints.RestoreInto(ctx, d.run.Tenant, digest, sb)
	if err != nil {
		return err
	}
	l.baseline = baseline
	return nil
}

// diffCheckpoints writes the unified diff of the regular files that differ
// between the trees of checkpoints from and to, from their manifests and
// the chunks of what changed: nothing else of the trees is read.
func (d *driver) diffCheckpoints(ctx context.Context, w io.Writer, from, to string) error {
	cps, tenant := d.e.o.Checkpoints, d.run.Tenant
	a, err := cps.Resolve(ctx, tenant, from)
	if err != nil {
		return err
	}
	b, err := cps.Resolve(ctx, tenant, to)
	if err != nil {
		return err
	}
	changes, err := cps.ChangedTrees(ctx, tenant, a, b)
	if err != nil {
		return err
	}
	for _, c := range changes {
		if !c.Content || sandbox.InGitDir(c.Name) {
			continue
		}
		old, nu := regular(a, c.From), regular(b, c.To)
		if old == nil && nu == nil {
			continue // directories, symlinks, FIFOs: a patch is of files
		}
		if err := d.diffFile(ctx, w, c.Name, old, nu); err != nil {
			return err
		}
	}
	return nil
}

// diffFile writes the diff of one file between entries old and nu (nil:
// absent).
func (d *driver) diffFile(ctx context.Context, w io.Writer, name string, old, nu *checkpoint.Entry) error {
	cps, tenant := d.e.o.Checkpoints, d.run.Tenant
	var or, nr io.Reader
	var osz, nsz int64
	if old != nil {
		rc, err := cps.Open(ctx, tenant, old)
		if err != nil {
			return err
		}
		defer rc.Close()
		or, osz = rc, old.Size
	}
	if nu != nil {
		rc, err := cps.Open(ctx, tenant, nu)
		if err != nil {
			return err
		}
		defer rc.Close()
		nr, nsz = rc, nu.Size
	}
	return sandbox.WriteFileDiff(w, name, or, osz, nr, nsz)
}

// regular returns the file entry e stands for in t (a hard link's file),
// or nil when e is nil or not a file.
func regular(t *checkpoint.Tree, e *checkpoint.Entry) *checkpoint.Entry {
	if e != nil && e.Kind == checkpoint.Hardlink {
		e = t.Lookup(e.Link)
	}
	if e == nil || e.Kind != checkpoint.File {
		return nil
	}
	return e
}
