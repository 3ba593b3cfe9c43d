package cli

import (
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/host"
)

// GcCmd is `airlock gc`.
type GcCmd struct {
	Grace time.Duration `name:"grace" default:"1h" help:"Keep chunks a checkpoint stored or found within this long (a checkpoint being written is safe if it takes less; at least 10m)." placeholder:"DURATION"`
}

// Run removes the checkpoint chunks nothing refers to.
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
	st, err := h.h.CollectCheckpoints(env.Ctx, c.Grace)
	if err != nil {
		return hostError(err)
	}
	fmt.Fprintf(env.Stdout, "checkpoints: %d live (%d manifests, %d chunks); removed %d of %d stored chunks\n",
		st.Roots, st.Manifests, st.Live, st.Expired, st.Chunks)
	return nil
}
