package cli

import (
	"fmt"

	"github.com/airlockrun/airlock/internal/host"
)

// DoctorCmd is `airlock doctor`.
type DoctorCmd struct {
	Config string `name:"config" env:"AIRLOCK_SERVE_CONFIG" help:"airlock serve's configuration file: with sandboxes.backend kubernetes, the cluster is checked too." placeholder:"FILE"`
	SandboxFlags
}

// Run prints which isolation layers this machine enforces and fails when a
// required one is missing. With the kubernetes backend configured (serve's
// file or the flags) it checks the cluster instead of this machine's
// sandboxes: the API server, and each permission the backend needs and a
// few it must not have, as the API server answers for these credentials.
func (c DoctorCmd) Run(env *Env) error {
	var rep []host.Check
	serve := ServeCmd{Config: c.Config, Workers: -1, SandboxFlags: c.SandboxFlags}
	cfg, err := serve.resolve(env)
	switch {
	case cfg.Sandboxes.Backend == host.BackendKubernetes:
		if err != nil {
			return usageError{Err: err}
		}
		rep = host.DoctorKube(env.Ctx, cfg.Sandboxes.Kubernetes)
	case c.Config != "" && err != nil:
		return usageError{Err: err}
	default:
		rep = host.Doctor(env.Executor)
	}
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
