package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// Freezers a group can freeze with (Group.Freezer, ManagerOptions.Freezer).
const (
	// FreezerV2 is cgroup2's cgroup.freeze (Linux 5.2): the tasks stop at
	// their next return to user space, a fatal signal still ends them,
	// and cgroup.events says "frozen 1" once every task stopped. It works
	// in the controller-less cgroup2 tree of a hybrid host too.
	FreezerV2 = "v2"
	// FreezerV1 is the v1 freezer controller's freezer.state: the tasks
	// stop in the kernel's refrigerator, where even SIGKILL waits for a
	// thaw (Kill thaws after signalling).
	FreezerV1 = "v1"
)

// freezeTimeout bounds how long Freeze waits for every task to stop when
// its ctx has no deadline of its own.
const freezeTimeout = 10 * time.Second

// ErrNoFreezer reports a group that no freezer reaches: neither a cgroup2
// directory with cgroup.freeze nor a v1 freezer directory.
var ErrNoFreezer = errors.New("no cgroup freezer: neither cgroup2's cgroup.freeze nor the v1 freezer controller is available")

// Freezer returns the freezer Freeze uses for the group (FreezerV2 or
// FreezerV1), or "" when it has none.
func (g *Group) Freezer() string {
	switch {
	case g.freezer != "":
		return g.freezer
	case g.v2 != "" && exists(g.v2+"/cgroup.freeze"):
		return FreezerV2
	}
	if dir, _ := g.dirFor(ctrlFreezer); dir != "" {
		return FreezerV1
	}
	return ""
}

// Freeze stops every task of the group and waits until the kernel reports
// all of them stopped (cgroup.events "frozen 1", or freezer.state FROZEN),
// or ctx ends (by default after 10 seconds): a task in an uninterruptible
// sleep holds the freeze back. A freeze that did not complete is undone
// and its error returned. Freezing a frozen group does nothing. A task the
// group holds cannot thaw it: the freeze files are the host's, outside the
// sandbox's view and rights.
func (g *Group) Freeze(ctx context.Context) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, freezeTimeout)
		defer cancel()
	}
	deadline, _ := ctx.Deadline()
	kind := g.Freezer()
	var file, val string
	switch kind {
	case FreezerV2:
		file, val = g.v2+"/cgroup.freeze", "1"
	case FreezerV1:
		dir, _ := g.dirFor(ctrlFreezer)
		file, val = dir+"/freezer.state", "FROZEN"
	default:
		return fmt.Errorf("cgroup %s: freeze: %w", g.name, ErrNoFreezer)
	}
	if err := writeFile(file, val); err != nil {
		return fmt.Errorf("cgroup %s: freeze (%s): write %s: %w", g.name, kind, file, err)
	}
	tries := 0
	ok, err := poll(deadline, func() (bool, error) {
		if ctx.Err() != nil {
			return false, ctx.Err()
		}
		ok, err := g.frozenBy(kind)
		if ok || err != nil || kind != FreezerV1 {
			return ok, err
		}
		// The v1 freezer can stay FREEZING: it visits the group's tasks
		// once per write, so a task forked while it did is missed until
		// FROZEN is written again; now and then a thaw first lets a task
		// caught part-way in the kernel reach a point where it stops.
		if tries++; tries%8 == 0 {
			_ = writeFile(file, "THAWED")
		}
		return false, writeFile(file, val)
	})
	if err == nil && !ok {
		err = context.DeadlineExceeded
	}
	if err != nil {
		_ = g.Thaw()
		return fmt.Errorf("cgroup %s: freeze (%s): not every task stopped: %w", g.name, kind, err)
	}
	return nil
}

// Thaw lets the group's tasks run again, in both freezers (a group frozen
// by either is thawed). Thawing a group that is not frozen does nothing;
// one already removed is not an error.
func (g *Group) Thaw() error {
	var errs []error
	if g.v2 != "" {
		if err := writeFile(g.v2+"/cgroup.freeze", "0"); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("cgroup %s: thaw: %w", g.name, err))
		}
	}
	if dir, _ := g.dirFor(ctrlFreezer); dir != "" {
		if err := writeFile(dir+"/freezer.state", "THAWED"); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("cgroup %s: thaw: %w", g.name, err))
		}
	}
	return errors.Join(errs...)
}

// Frozen reports whether the kernel says the group is frozen: every task
// stopped, by either freezer.
func (g *Group) Frozen() (bool, error) {
	for _, kind := range []string{FreezerV2, FreezerV1} {
		ok, err := g.frozenBy(kind)
		if ok || err != nil {
			return ok, err
		}
	}
	return false, nil
}

// frozenBy reads whether freezer kind reports the group frozen.
func (g *Group) frozenBy(kind string) (bool, error) {
	switch kind {
	case FreezerV2:
		if g.v2 == "" {
			return false, nil
		}
		data, err := readFile(g.v2 + "/cgroup.events")
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		n, _ := keyedValue(data, "frozen")
		return n == 1, nil
	case FreezerV1:
		dir, _ := g.dirFor(ctrlFreezer)
		if dir == "" {
			return false, nil
		}
		data, err := readFile(dir + "/freezer.state")
		if errors.Is(err, unix.ENOENT) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return bytes.Equal(bytes.TrimSpace(data), []byte("FROZEN")), nil
	}
	return false, nil
}
