package sandboxcli

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/handoff"
	"github.com/airlockrun/airlock/internal/sandbox/pool"
)

// DaemonCmd is `airlock sandbox daemon`: a long-lived sandbox host for this
// user's `airlock sandbox run`. It keeps sandboxes of the default spec (and
// of any spec asked for twice) ready and runs handed-off commands in them
// (package handoff), each in a fresh sandbox destroyed after it.
type DaemonCmd struct {
	PerSpec int `name:"per-spec" default:"2" help:"Idle sandboxes kept ready for each spec in demand."`
}

// Run serves until SIGINT or SIGTERM (or env.Ctx's end), then destroys the
// idle sandboxes and returns nil. It prepares no sandboxes: requests that
// ask for it are left to their callers.
func (c *DaemonCmd) Run(env *Env) error { return c.Serve(env, nil) }

// Serve is Run with prepare bringing sandboxes to readiness for requests
// that ask for it (handoff.Server.Prepare), from warm pools of the
// sandboxes they name.
func (c *DaemonCmd) Serve(env *Env, prepare func(ctx context.Context, sb sandbox.Sandbox, how json.RawMessage) error) error {
	if err := os.MkdirAll(env.Home, 0o700); err != nil {
		return fmt.Errorf("sandbox daemon: %w", err)
	}
	// A long-lived host process: sandboxes start from a small spawner
	// process rather than from this one (linux.Config.Spawner).
	env.Spawner = true
	b, err := env.Backend()
	if err != nil {
		return err
	}
	env.GC()
	log := slog.New(slog.NewTextHandler(env.Stderr, nil))
	p := pool.New(b, pool.Options{PerSpec: c.PerSpec, Logger: log})
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_ = p.Close(ctx)
	}()
	// What a plain `airlock sandbox run` asks for.
	spec, err := (&SpecFlags{}).Spec(BuiltinDefaults, false)
	if err != nil {
		return err
	}
	if err := p.Prime(spec); err != nil {
		return err
	}
	path := handoff.SocketPath(env.Home)
	ln, err := handoff.Listen(path)
	if err != nil {
		return err
	}
	defer os.Remove(path)
	ctx, stop := signal.NotifyContext(env.Ctx, unix.SIGINT, unix.SIGTERM)
	defer stop()
	log.Info("sandbox host listening", "socket", path)
	s := &handoff.Server{Backend: p, UID: os.Geteuid(), Logger: log, Prepare: prepare, Front: FrontWords}
	err = s.Serve(ctx, ln)
	// What it served and how: a handed-off run that found no idle
	// sandbox (a pool miss) made one while its caller waited.
	st, ps := s.Stats(), p.Stats()
	log.Info("sandbox host stopped", "served", st.Served, "in_words", st.Words, "refused", st.Refused, "pool_hits", ps.Hits, "pool_misses", ps.Misses)
	return err
}
