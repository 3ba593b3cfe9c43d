package cli

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandboxcli"
)

// SandboxEventsCmd is `airlock sandbox events ID`.
type SandboxEventsCmd struct {
	ID     string `arg:"" help:"The sandbox (airlock sandbox ls)."`
	Follow bool   `short:"f" help:"Print events as they come, until the sandbox ends (rm, its TTL) or an interrupt."`
	JSON   bool   `name:"json" help:"Each line as kept: {seq, time, event}, {dropped} when the drop counts change, and {ended, dropped, omitted} last."`

	dropped *event.SandboxEventsDropped // the last counts read
}

// sandboxEventsPoll is how often --follow looks for more.
const sandboxEventsPoll = 100 * time.Millisecond

// Run prints the events the sandbox's supervisor kept.
func (c *SandboxEventsCmd) Run(env *Env) error {
	if err := sandboxcli.CheckID(c.ID); err != nil {
		return usageError{Err: err}
	}
	dir := env.StateDir(c.ID)
	f, err := os.Open(filepath.Join(dir, host.SandboxEventsFile))
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(dir); serr == nil {
			return fmt.Errorf("sandbox %s keeps no events (created by an airlock without them)", c.ID)
		}
		return usageError{Err: fmt.Errorf("no sandbox named %s (airlock sandbox ls lists the live ones)", c.ID)}
	}
	if err != nil {
		return err
	}
	// The open file is read to its end even once the sandbox is gone and
	// its directory removed.
	defer f.Close()
	rd := bufio.NewReader(f)
	var partial []byte
	for {
		line, err := rd.ReadBytes('\n')
		partial = append(partial, line...)
		if err == nil {
			if ended := c.print(env, bytes.TrimSpace(partial)); ended {
				return nil
			}
			partial = partial[:0]
			continue
		}
		if !errors.Is(err, io.EOF) {
			return err
		}
		if !c.Follow {
			c.printDropped(env)
			return nil
		}
		// No more now: the supervisor may write more, unless it is gone
		// without its last line (killed).
		if _, serr := os.Stat(dir); serr != nil {
			if _, err := rd.Peek(1); err != nil {
				fmt.Fprintf(env.Stderr, "sandbox %s is gone\n", c.ID)
				return nil
			}
			continue
		}
		select {
		case <-env.Ctx.Done():
			return nil
		case <-time.After(sandboxEventsPoll):
		}
	}
}

// print writes one line of the file; it reports the last one.
func (c *SandboxEventsCmd) print(env *Env, line []byte) (ended bool) {
	if len(line) == 0 {
		return false
	}
	var l host.SandboxEventLine
	if err := json.Unmarshal(line, &l); err != nil {
		fmt.Fprintf(env.Stderr, "airlock: sandbox %s: a line of its events is not JSON: %v\n", c.ID, err)
		return false
	}
	if c.JSON {
		fmt.Fprintf(env.Stdout, "%s\n", line)
		return l.Ended
	}
	switch {
	case l.SandboxEvent != nil:
		e := l.SandboxEvent
		fmt.Fprintf(env.Stdout, "%d  %s  %s %s\n", e.Seq, e.Time.Local().Format("15:04:05.000"), e.Event.Kind, describeReported(e.Event))
	case l.Ended:
		c.dropped = l.Dropped
		c.printDropped(env)
		if l.Omitted > 0 {
			fmt.Fprintf(env.Stdout, "omitted  %d events: the sandbox's event file was full\n", l.Omitted)
		}
		fmt.Fprintln(env.Stdout, "ended")
	case l.Dropped != nil:
		c.dropped = l.Dropped
		if c.Follow {
			c.printDropped(env)
		}
	}
	return l.Ended
}

// printDropped says what of the sandbox's events was not kept, if any.
func (c *SandboxEventsCmd) printDropped(env *Env) {
	if d := c.dropped; d != nil && *d != (event.SandboxEventsDropped{Sandbox: d.Sandbox}) {
		fmt.Fprintf(env.Stdout, "dropped  %s\n", describeDropped(*d))
	}
}
