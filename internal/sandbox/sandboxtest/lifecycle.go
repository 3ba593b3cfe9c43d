package sandboxtest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// hangBound is a generous bound on how long an operation that should end
// promptly may take. It only keeps a broken backend from hanging the suite;
// no case asserts tight timings.
const hangBound = 10 * time.Second

func (s *suite) testLimits(t *testing.T) {
	sb := s.create(t, sandbox.Spec{})

	t.Run("Timeout", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		_, _, r := runCmd(t, sb, sandbox.Command{Argv: []string{"sleep", "30"}, Timeout: 500 * time.Millisecond})
		if d := time.Since(start); d > hangBound {
			t.Errorf("sleep 30 with a 500ms timeout returned after %v, want well under %v", d, hangBound)
		}
		if r.Outcome != sandbox.OutcomeTimeout {
			t.Errorf("sleep 30 with a 500ms timeout: Outcome = %q (result %+v), want %q", r.Outcome, r, sandbox.OutcomeTimeout)
		}
		if r.ExitStatus() != 124 || r.Message == "" {
			t.Errorf("timeout: ExitStatus() = %d, Message = %q; want 124 and an explanation", r.ExitStatus(), r.Message)
		}
		// The whole tree goes, not only the main process.
		start = time.Now()
		_, _, r = runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", "sleep 30 & sleep 30 & wait"}, Timeout: 500 * time.Millisecond})
		if d := time.Since(start); d > hangBound || r.Outcome != sandbox.OutcomeTimeout {
			t.Errorf("a tree of sleeps with a 500ms timeout: result %+v after %v, want %q promptly", r, d, sandbox.OutcomeTimeout)
		}
	})

	t.Run("CancelWait", func(t *testing.T) {
		t.Parallel()
		p, err := sb.Start(opCtx(t), sandbox.Command{Argv: []string{"sleep", "30"}})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		start := time.Now()
		r, _ := p.Wait(ctx)
		if d := time.Since(start); d > hangBound {
			t.Errorf("Wait with a cancelled context returned after %v (result %+v), want promptly", d, r)
		}
		if r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 {
			t.Errorf("Wait with a cancelled context: result %+v, want the command killed", r)
		}
	})

	t.Run("OutputLimit", func(t *testing.T) {
		t.Parallel()
		const limit = 1 << 20
		var w countWriter
		start := time.Now()
		_, _, r := runCmd(t, sb, sandbox.Command{Argv: []string{"yes"}, Stdout: &w, MaxOutput: limit, Timeout: 60 * time.Second})
		if d := time.Since(start); d > hangBound {
			t.Errorf("yes with MaxOutput 1 MiB returned after %v, want well under %v", d, hangBound)
		}
		if r.Outcome != sandbox.OutcomeOutputLimit {
			t.Errorf("yes with MaxOutput 1 MiB: Outcome = %q (result %+v), want %q", r.Outcome, r, sandbox.OutcomeOutputLimit)
		}
		if r.Message == "" {
			t.Errorf("output limit: Message is empty, want an explanation")
		}
		if n := w.count(); n == 0 || n > limit+64<<10 {
			t.Errorf("yes with MaxOutput %d delivered %d bytes, want at most about %d", limit, n, limit)
		}
		// stderr counts too.
		var we countWriter
		_, _, r = runCmd(t, sb, sandbox.Command{Argv: []string{"sh", "-c", "yes >&2"}, Stderr: &we, MaxOutput: limit, Timeout: 60 * time.Second})
		if r.Outcome != sandbox.OutcomeOutputLimit || we.count() > limit+64<<10 {
			t.Errorf("yes >&2 with MaxOutput 1 MiB: result %+v with %d bytes, want %q and at most about %d bytes", r, we.count(), sandbox.OutcomeOutputLimit, limit)
		}
	})
}

func (s *suite) testLifetime(t *testing.T) {
	t.Run("ChosenID", func(t *testing.T) {
		t.Parallel()
		id := sandbox.NewID()
		b := s.newBackend(t)
		sb := Create(t, b, sandbox.Spec{ID: id})
		if sb.ID() != id {
			t.Errorf("ID() = %q, want the chosen %q", sb.ID(), id)
		}
		ctx := opCtx(t)
		if dup, err := b.Create(ctx, sandbox.Spec{ID: id, Limits: sandbox.DefaultLimits}); err == nil {
			_ = dup.Destroy(ctx)
			t.Errorf("a second sandbox with the live id %s was created", id)
		}
		if bad, err := b.Create(ctx, sandbox.Spec{ID: "../../etc", Limits: sandbox.DefaultLimits}); err == nil {
			_ = bad.Destroy(ctx)
			t.Errorf("a sandbox with id ../../etc was created")
		}
	})

	t.Run("TTL", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{TTL: time.Second})
		select {
		case <-sb.Done():
		case <-time.After(hangBound):
			t.Fatalf("Done() not closed %v after a 1s TTL", hangBound)
		}
		if _, err := sb.Start(opCtx(t), sandbox.Command{Argv: []string{"true"}}); err == nil {
			t.Errorf("Start after the TTL ended the sandbox = nil error, want one")
		}
		if _, err := sb.ReadFile(opCtx(t), "/etc/hostname", 0); err == nil {
			t.Errorf("ReadFile after the TTL ended the sandbox = nil error, want one")
		}
	})

	t.Run("TTLKillsRunning", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{TTL: time.Second})
		start := time.Now()
		r, err := sandbox.Run(opCtx(t), sb, sandbox.Command{Argv: []string{"sleep", "30"}})
		if d := time.Since(start); d > hangBound {
			t.Errorf("a command running when the TTL passed returned after %v, want promptly", d)
		}
		if err == nil && r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 {
			t.Errorf("sleep 30 in a sandbox with a 1s TTL: result %+v, want it ended by the TTL", r)
		}
	})

	t.Run("Destroy", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		marker := uniqueSleep(1001)
		mustSh(t, sb, "sleep "+marker+" >/dev/null 2>&1 &")
		visible := waitFor(5*time.Second, func() bool { return len(hostProcesses(marker)) > 0 })
		ctx := opCtx(t)
		if err := sb.Destroy(ctx); err != nil {
			t.Fatalf("Destroy = %v", err)
		}
		if err := sb.Destroy(ctx); err != nil {
			t.Errorf("second Destroy = %v, want nil (Destroy is idempotent)", err)
		}
		select {
		case <-sb.Done():
		default:
			t.Errorf("Done() is not closed after Destroy returned")
		}
		if _, err := sb.Start(ctx, sandbox.Command{Argv: []string{"true"}}); err == nil {
			t.Errorf("Start after Destroy = nil error, want one")
		}
		if err := sb.WriteFile(ctx, "/tmp/x", strings.NewReader("x"), 0o644); err == nil {
			t.Errorf("WriteFile after Destroy = nil error, want one")
		}
		if !visible {
			t.Skipf("the background process (sleep %s) is not visible on the host: this backend's processes cannot be checked from here", marker)
		}
		if pids := hostProcesses(marker); len(pids) > 0 {
			late := waitFor(2*time.Second, func() bool { return len(hostProcesses(marker)) == 0 })
			t.Errorf("background process sleep %s (pids %v) still ran on the host after Destroy returned (gone 2s later: %v)", marker, pids, late)
		}
	})

	t.Run("DestroyWhileRunning", func(t *testing.T) {
		t.Parallel()
		sb := s.create(t, sandbox.Spec{})
		w := newFirstWriter()
		p, err := sb.Start(opCtx(t), sandbox.Command{Argv: []string{"sh", "-c", "echo ready; exec sleep 30"}, Stdout: w})
		if err != nil {
			t.Fatalf("Start = %v", err)
		}
		select {
		case <-w.first:
		case <-time.After(hangBound):
			t.Fatal("command did not start")
		}
		if err := sb.Destroy(opCtx(t)); err != nil {
			t.Fatalf("Destroy = %v", err)
		}
		done := make(chan sandbox.Result, 1)
		ctx := opCtx(t)
		go func() {
			r, _ := p.Wait(ctx)
			done <- r
		}()
		select {
		case r := <-done:
			if r.Outcome == sandbox.OutcomeExited && r.ExitCode == 0 {
				t.Errorf("Wait of a command whose sandbox was destroyed: result %+v, want it not to look like success", r)
			}
		case <-time.After(hangBound):
			t.Errorf("Wait of a command whose sandbox was destroyed did not return within %v", hangBound)
		}
	})
}

// testMany runs 50 sandboxes at once.
func (s *suite) testMany(t *testing.T) {
	if testing.Short() {
		t.Skip("50 sandboxes take a while; skipped in -short mode")
	}
	const n = 50
	const inFlight = 8
	b := s.newBackend(t)
	sbs := make([]sandbox.Sandbox, n)
	errs := make([]error, n)
	sem := make(chan struct{}, inFlight)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			sbs[i], errs[i] = b.Create(ctx, sandbox.Spec{Env: []string{"ID=" + strconv.Itoa(i)}, Limits: sandbox.DefaultLimits})
		})
	}
	wg.Wait()
	// Destroy whatever was created, even if the test fails below.
	t.Cleanup(func() {
		var wg sync.WaitGroup
		for _, sb := range sbs {
			if sb == nil {
				continue
			}
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
				defer cancel()
				if err := sb.Destroy(ctx); err != nil {
					t.Errorf("Destroy(%s) = %v", sb.ID(), err)
				}
			})
		}
		wg.Wait()
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("creating %d sandboxes (%d at a time): %v", n, inFlight, err)
	}
	ids := map[string]bool{}
	for _, sb := range sbs {
		if ids[sb.ID()] {
			t.Errorf("two sandboxes share the id %s", sb.ID())
		}
		ids[sb.ID()] = true
	}
	outs := make([]string, n)
	results := make([]sandbox.Result, n)
	for i, sb := range sbs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			var out SyncBuffer
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			results[i], errs[i] = sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", "echo $ID"}, Stdout: &out})
			outs[i] = out.String()
		})
	}
	wg.Wait()
	for i := range n {
		if errs[i] != nil {
			t.Errorf("sandbox %d: Run = %v", i, errs[i])
			continue
		}
		wantExit(t, fmt.Sprintf("sandbox %d: echo $ID", i), results[i], 0, "")
		if want := strconv.Itoa(i) + "\n"; outs[i] != want {
			t.Errorf("sandbox %d: echo $ID = %q, want %q", i, outs[i], want)
		}
	}
}
