package engine_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
	"github.com/airlockrun/airlock/internal/store/sqlite"
)

// The MCP holder helper: when the test binary runs with
// AIRLOCK_MCP_HOLDER set to a directory, it opens the MCP records of two
// sandboxes on that directory's SQLite store, holds one ask in each,
// prints their approval ids, and waits to be killed, as an `airlock mcp`
// does while a person decides.
func init() {
	dir := os.Getenv("AIRLOCK_MCP_HOLDER")
	if dir == "" {
		return
	}
	if err := mcpHolder(dir); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(3)
	}
	select {}
}

func mcpHolder(dir string) error {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(dir, "airlock.db"), sqlite.Options{Redactor: store.NoRedaction})
	if err != nil {
		return err
	}
	eng, err := leaseEngine(st, dir, "run-helper", os.Getenv("AIRLOCK_ENGINE_EXEC"))
	if err != nil {
		return err
	}
	for _, sb := range []string{"sb-1", "sb-2"} {
		h, err := eng.OpenMCPRecord(ctx, engine.MCPRecord{Tenant: "acme", Session: "s1", Sandbox: sb, PolicyName: "default"})
		if err != nil {
			return err
		}
		req, err := h.Request(ctx, engine.MCPAsk{Action: "run_command {\"command\":\"ask\"}", Timeout: time.Hour})
		if err != nil {
			return err
		}
		// The parent test reads the ids from this process's stdout.
		if _, err := os.Stdout.WriteString(req.ApprovalID + "\n"); err != nil {
			return err
		}
	}
	return nil
}

// leaseEngine is an engine on st with a lease of a second.
func leaseEngine(st store.Store, dir, state, executor string) (*engine.Engine, error) {
	bl, err := blob.New(filepath.Join(dir, "blobs"), blob.Options{})
	if err != nil {
		return nil, err
	}
	b, err := linux.New(linux.Config{Executor: executor, StateDir: filepath.Join(dir, state)})
	if err != nil {
		return nil, err
	}
	return engine.New(engine.Options{Store: st, Blobs: bl, Backend: b, Poll: 10 * time.Millisecond, LeaseTTL: time.Second})
}

// TestMCPRecordLease: the asks of an `airlock mcp` process that is
// killed -9 wait only as long as its record's lease. While it lives its
// lease is renewed and its asks are listed; once it is dead and the lease
// has lapsed, another process deciding one of them finds the session gone
// (the record closed as failed, the ask withdrawn), and listing approvals
// closes the other record the same way.
func TestMCPRecordLease(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for the engine's sandbox backend")
	}
	dir := t.TempDir()
	t.Cleanup(func() { _ = linux.Forget(filepath.Join(dir, "run-helper")) })
	st, _, _ := openStack(t, dir)
	decider, err := leaseEngine(st, dir, "run-decider", executorPath)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 2*time.Minute)

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "AIRLOCK_MCP_HOLDER="+dir, "AIRLOCK_ENGINE_EXEC="+executorPath)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	sc := bufio.NewScanner(out)
	var ids []string
	for len(ids) < 2 && sc.Scan() {
		ids = append(ids, strings.TrimSpace(sc.Text()))
	}
	if len(ids) != 2 {
		t.Fatalf("the holder printed %q, want two approval ids (%v)", ids, sc.Err())
	}
	recs := make([]string, 2)
	for i, id := range ids {
		recs[i], _ = engine.ApprovalRunID(id)
	}

	listed := func() map[string]bool {
		t.Helper()
		as, err := decider.Approvals(ctx, "acme")
		if err != nil {
			t.Fatalf("Approvals = %v", err)
		}
		m := map[string]bool{}
		for _, a := range as {
			m[a.ID] = true
		}
		return m
	}
	// waitFor polls cond until it holds or a minute has passed.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s: not within a minute", what)
			}
		}
	}
	leaseOf := func(id string) store.Run {
		t.Helper()
		r, err := st.GetRun(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}

	// Alive: its lease is renewed past its first expiry, and a listing
	// after that leaves its asks pending.
	first := leaseOf(recs[0])
	if first.LeaseOwner == "" || first.LeaseToken == 0 {
		t.Fatalf("the record's lease = %q %d, want the holder's", first.LeaseOwner, first.LeaseToken)
	}
	waitFor("the holder renews its lease", func() bool { return leaseOf(recs[0]).LeaseExpires.After(first.LeaseExpires) })
	waitFor("the first lease's time has passed", func() bool { return time.Now().After(first.LeaseExpires) })
	if m := listed(); !m[ids[0]] || !m[ids[1]] {
		t.Fatalf("Approvals while the holder lives = %v, want both asks %v", m, ids)
	}

	// Killed: nothing renews the lease any more.
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed = true
	last := leaseOf(recs[0]).LeaseExpires
	if l := leaseOf(recs[1]).LeaseExpires; l.After(last) {
		last = l
	}
	waitFor("the dead holder's leases lapse", func() bool { return time.Now().After(last) })

	// A decision finds the session gone, and closes its record.
	err = decider.Decide(ctx, ids[1], "acme", "alice", true, "")
	if !errors.Is(err, engine.ErrFinal) && !errors.Is(err, engine.ErrDecided) {
		t.Errorf("Decide of a dead session's ask = %v, want ErrFinal or ErrDecided", err)
	}
	// A listing closes the other one.
	if m := listed(); len(m) != 0 {
		t.Errorf("Approvals after the holder died = %v, want none", m)
	}
	for i, rec := range recs {
		r := leaseOf(rec)
		if r.Status != event.StatusFailed {
			t.Errorf("record %d after its holder died: %s, want failed", i, r.Status)
		}
		evs, err := st.Events(ctx, rec, 1, 0)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, string(ev.Type))
			if p, _ := ev.Unpack(); p != nil {
				if d, ok := p.(*event.ApprovalDecided); ok && (d.Decision != "withdrawn" || d.By != "airlock" || !strings.Contains(d.Reason, "lease expired")) {
					t.Errorf("record %d: decision %+v, want withdrawn by airlock as its lease expired", i, d)
				}
			}
		}
		want := "sandbox.created approval.requested approval.decided sandbox.lost"
		if strings.Join(got, " ") != want {
			t.Errorf("record %d's log = %v, want %s", i, got, want)
		}
		if _, err := store.VerifyRun(ctx, st, rec); err != nil {
			t.Errorf("VerifyRun(%s) = %v", rec, err)
		}
	}
}
