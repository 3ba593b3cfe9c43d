package cli

import (
	"errors"

	"github.com/airlockrun/airlock/internal/host"
)

// local is this machine's host as the run commands use it.
type local struct {
	env *Env
	h   *host.Host
}

// hostOptions tune openLocal.
type hostOptions struct {
	// timeline receives the run's events and progress; nil prints nothing.
	timeline *timeline
	// keyFile is the secret store's key file for policy credentials.
	keyFile string
	// readOnly opens no sandbox backend.
	readOnly bool
}

// hostConfig is the host.Config of env and o.
func hostConfig(env *Env, o hostOptions) host.Config {
	cfg := host.Config{Home: env.Home, Store: env.Store, KeyFile: o.keyFile, Getenv: env.Getenv, Version: Version}
	if !o.readOnly {
		cfg.Sandboxes = &env.Env
	}
	if o.timeline != nil {
		cfg.OnEvents, cfg.OnProgress = o.timeline.events, o.timeline.progress
	}
	return cfg
}

// openLocal builds the host of env and o.
func openLocal(env *Env, o hostOptions) (*local, error) {
	h, err := host.New(hostConfig(env, o))
	if err != nil {
		return nil, err
	}
	return &local{env: env, h: h}, nil
}

func (l *local) close() { l.h.Close() }

// hostError gives the host's errors the command line's statuses: bad
// input exits 2.
func hostError(err error) error {
	var in *host.InputError
	if errors.As(err, &in) {
		return usageError{Err: in.Err}
	}
	return err
}
