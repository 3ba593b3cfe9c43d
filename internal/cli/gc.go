package cli

import (
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/host"
)

// GcCmd is `airlock gc`.
type GcCmd struct {
	Grace time.Duration `name:"grace" default:"1h" help:"Keep chunks and blobs a writer stored or found within this long (a checkpoint being written is safe if it takes less; at least 10m)." placeholder:"DURATION"`
	retentionFlags
}

// Run applies the retention flags and the runs' policies' retention,
// then removes the checkpoint chunks and the blobs nothing refers to.
func (c *GcCmd) Run(env *Env) error {
	if c.Grace < host.MinCheckpointGrace {
		return usageError{Err: fmt.Errorf("--grace %s: at least %s", c.Grace, host.MinCheckpointGrace)}
	}
	b, err := openBackend(env, hostOptions{readOnly: true})
	if err != nil {
		return err
	}
	defer b.close()
	h, err := b.localHost("airlock gc")
	if err != nil {
		return err
	}
	if c.Checkpoints < 0 || c.Artifacts < 0 {
		return usageError{Err: fmt.Errorf("--checkpoints-older-than %s, --artifacts-older-than %s: must not be negative", c.Checkpoints, c.Artifacts)}
	}
	if c.Events < 0 || c.Runs < 0 || c.Uploads < 0 || c.Audit < 0 {
		return usageError{Err: fmt.Errorf("--events-older-than %s, --runs-older-than %s, --uploads-older-than %s, --audit-older-than %s: must not be negative", c.Events, c.Runs, c.Uploads, c.Audit)}
	}
	// First, so the checkpoints only the expired runs used go in the
	// collection below. Without flags it applies the runs' policies'
	// retention sections only.
	sw, err := h.h.Sweep(env.Ctx, c.rules(), time.Now())
	if err != nil {
		return hostError(err)
	}
	if c.Events > 0 || c.Runs > 0 || c.Uploads > 0 || c.Audit > 0 || sw != (host.SweepStats{}) {
		fmt.Fprintf(env.Stdout, "retention: %d payloads of %d runs replaced by tombstones (%d sealed before digests kept); %d runs purged; %d audit log lines removed; %d sandbox events deleted; %d uploads deleted; %d deletion records deleted\n",
			sw.Payloads, sw.Runs, sw.Kept, sw.Purged, sw.Audit, sw.SandboxEvents, sw.Uploads, sw.Deletions)
	}
	if c.Checkpoints > 0 || sw.Checkpoints > 0 || c.Artifacts > 0 || sw.Artifacts > 0 {
		fmt.Fprintf(env.Stdout, "retention: %d checkpoints deleted (snapshot.taken payloads replaced by tombstones); %d artifacts deleted\n", sw.Checkpoints, sw.Artifacts)
	}
	st, err := h.h.CollectCheckpoints(env.Ctx, c.Grace)
	if err != nil {
		return hostError(err)
	}
	fmt.Fprintf(env.Stdout, "checkpoints: %d live (%d manifests, %d chunks); removed %d of %d stored chunks\n",
		st.Roots, st.Manifests, st.Live, st.Expired, st.Chunks)
	// Then the other blobs: what nothing names any more (a deletion kept
	// one a writer found, an upload refused for its budget...).
	bs, err := h.h.CollectBlobs(env.Ctx, c.Grace)
	if err != nil {
		return hostError(err)
	}
	fmt.Fprintf(env.Stdout, "blobs: %d named; removed %d of %d stored (%d checkpoint manifests left to the checkpoints)\n",
		bs.Named, bs.Expired, bs.Blobs, bs.Manifests)
	return nil
}
