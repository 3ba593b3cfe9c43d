package engine

import (
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
)

// ErrNotAgentRun is returned for a run record that is not an agent run:
// the record of an E2B sandbox (store.KindSandbox), which its E2B server
// keeps. The engine never drives, leases, cancels, pauses, forks or
// replays one, whatever its status says.
var ErrNotAgentRun = errors.New("engine: not an agent run")

// agentRun returns nil for an agent run and an error wrapping
// ErrNotAgentRun for any other kind of record.
func agentRun(r store.Run) error {
	if r.Kind != "" && r.Kind != store.KindAgent {
		return fmt.Errorf("%w: %s is a %s record", ErrNotAgentRun, r.ID, r.Kind)
	}
	return nil
}
