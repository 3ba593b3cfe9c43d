package cli

import (
	"fmt"

	"github.com/airlockrun/airlock/internal/host"
)

// DoctorCmd is `airlock doctor`.
type DoctorCmd struct{}

// Run prints which isolation layers this machine enforces and fails when a
// required one is missing.
func (DoctorCmd) Run(env *Env) error {
	rep := host.Doctor(env.Executor)
	missing := 0
	for _, c := range rep {
		mark := "ok  "
		switch {
		case !c.OK && c.Required:
			mark = "FAIL"
			missing++
		case !c.OK:
			mark = "warn"
		}
		fmt.Fprintf(env.Stdout, "%s %-16s %s\n", mark, c.Layer, c.Detail)
	}
	if missing > 0 {
		fmt.Fprintf(env.Stdout, "%d required layer(s) missing: sandboxes cannot be created here\n", missing)
		return exitCode(1)
	}
	return nil
}
