package cli

import (
	"context"
	"errors"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// local is this machine's host as the run commands use it: the host and
// the parts of it they call.
type local struct {
	env   *Env
	h     *host.Host
	store store.Store
	blobs *blob.Store
	eng   *engine.Engine
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
		cfg.OnEvents, cfg.OnProgress = engine.EachEvent(o.timeline.event), o.timeline.progress
	}
	return cfg
}

// openLocal builds the host of env and o, with its run side.
func openLocal(env *Env, o hostOptions) (*local, error) {
	h, err := host.New(hostConfig(env, o))
	if err != nil {
		return nil, err
	}
	l := &local{env: env, h: h}
	if l.store, err = h.Store(); err == nil {
		if l.blobs, err = h.Blobs(); err == nil {
			l.eng, err = h.Engine()
		}
	}
	if err != nil {
		h.Close()
		return nil, hostError(err)
	}
	return l, nil
}

func (l *local) close() { l.h.Close() }

// resolve finds a run id argument: a full id, or a unique suffix or
// prefix of one.
func (l *local) resolve(ctx context.Context, id string) (store.Run, error) {
	r, err := l.h.ResolveRun(ctx, id)
	return r, hostError(err)
}

// hostError gives the host's input errors their exit status (2).
func hostError(err error) error {
	var in *host.InputError
	if errors.As(err, &in) {
		return usageError{Err: in.Err}
	}
	return err
}
