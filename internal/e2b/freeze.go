package e2b

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// A pause that keeps memory (the SDKs' default, pause() and onTimeout:
// 'pause') freezes the sandbox in place: its cgroup's freezer stops every
// process, the executor's too, and a resume (connect, or an auto-resume
// on a request) thaws them, the same processes with their PIDs, memory,
// open files and connections. The pause also takes the filesystem
// checkpoint a filesystem pause takes, before it freezes: when the frozen
// sandbox is gone (killed, its server restarted) or the memory policy
// degrades it, the resume boots a fresh sandbox from that checkpoint, and
// getInfo's pauseKind, the resume's Airlock-Resume-Kind header and the
// record's run.resumed say so. docs/e2b.md has the policy.

// pauseKindMemory is a pause that kept memory (pauseKindFilesystem in
// api.go is one that kept files only).
const pauseKindMemory = "memory"

// freeze freezes lv, b's running boot, for a pause that keeps memory, and
// returns "" or, when it did not, why (the pause then keeps files only).
// Preconditions: b.life and b.mu held.
func (s *Server) freeze(ctx context.Context, b *box, lv *live) string {
	if s.cfg.MemoryPauseMax < 0 {
		return "this server keeps no memory across pauses (e2b.memory_pause_max is negative)"
	}
	fz, ok := lv.sb.(sandbox.Freezer)
	if !ok {
		return fmt.Sprintf("the %s backend cannot freeze a sandbox", lv.sb.Info().Backend)
	}
	if _, err := fz.FreezeKind(); err != nil {
		return clipDetail(err.Error())
	}
	if why := s.memoryPressure(); why != "" {
		return why
	}
	fctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := fz.Freeze(fctx); err != nil {
		return clipDetail("the sandbox did not freeze: " + err.Error())
	}
	return ""
}

// resumeFrozen thaws b's frozen boot and makes it b's running one again;
// it reports false, with b's frozen boot dropped and why in b.pauseNote,
// when that boot is gone or does not thaw: then the caller resumes from
// the checkpoint. Preconditions: b.life and b.mu held, b paused with a
// frozen boot.
func (s *Server) resumeFrozen(ctx context.Context, b *box, timeout time.Duration, t0 time.Time) (bool, error) {
	lv := b.frozen
	fz := lv.sb.(sandbox.Freezer)
	var lost string
	if isDone(lv.sb.Done()) {
		lost = "the frozen sandbox ended while paused"
	} else if err := fz.Thaw(ctx); err != nil {
		lost = clipDetail("the frozen sandbox did not thaw: " + err.Error())
	}
	if lost != "" {
		b.frozen, b.pauseKind, b.pauseNote = nil, pauseKindFilesystem, lost
		s.destroy(ctx, lv)
		return false, nil
	}
	l, err := s.o.Store.AcquireLease(ctx, b.rec.runID, s.owner, s.leaseTTL())
	if err == nil {
		_, err = b.rec.commit(ctx, event.StatusPaused, event.StatusRunning,
			event.RunResumed{Reason: "resume", FromSeq: b.rec.last(), Host: s.owner, Kind: pauseKindMemory})
	}
	if err != nil {
		// Paused it stays, as its record says: frozen again.
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if ferr := fz.Freeze(fctx); ferr != nil {
			b.frozen, b.pauseKind, b.pauseNote = nil, pauseKindFilesystem, clipDetail("the sandbox did not freeze again after a failed resume: "+ferr.Error())
			s.destroy(ctx, lv)
		}
		return false, fmt.Errorf("e2b: resume %s: %w", b.id, err)
	}
	now := s.now()
	b.lease, b.status = l.Token, event.StatusRunning
	s.removePaused(b.rec.runID)
	// The CPU time it had at the pause was metered then.
	b.meter = meterState{at: now, cpu: cpuOf(lv)}
	b.state, b.live, b.frozen, b.paused, b.snapshot, b.endAt = stateRunning, lv, nil, "", "", now.Add(timeout)
	b.resumeKind, b.resumeNote, b.pauseKind, b.pauseNote = pauseKindMemory, "", "", ""
	s.watch(ctx, b, lv)
	s.log.Debug("e2b: resumed from memory", "sandbox_id", b.id, "ms", now.Sub(t0).Milliseconds())
	return true, nil
}

// cpuOf is the CPU time lv's sandbox used so far (0 when it cannot say).
func cpuOf(lv *live) time.Duration {
	if ms, ok := lv.sb.(sandbox.Measurer); ok {
		if m, err := ms.Measure(); err == nil {
			return m.CPU
		}
	}
	return 0
}

// degrade ends the memory part of b's pause: its frozen boot is
// destroyed, and b stays paused with the checkpoint its pause took, which
// a resume boots from; why goes into the record and getInfo's pauseNote.
func (s *Server) degrade(ctx context.Context, b *box, why string) {
	b.life.Lock()
	defer b.life.Unlock()
	b.mu.Lock()
	lv := b.frozen
	if b.state != statePaused || lv == nil {
		b.mu.Unlock()
		return
	}
	b.frozen, b.pauseKind, b.pauseNote = nil, pauseKindFilesystem, why
	b.mu.Unlock()
	s.destroy(ctx, lv)
	if ps, err := s.readPaused(b.rec.runID); err == nil {
		ps.Kind = pauseKindFilesystem
		if err := s.writePaused(b, ps); err != nil {
			s.log.Warn("e2b: rewrite a degraded pause's state", "sandbox_id", b.id, "err", err)
		}
	}
	b.rec.add(event.SandboxOp{Op: "sandbox.pause", Outcome: "degraded", Detail: clipDetail("memory not kept: " + why)}, s.now())
	s.audit.line(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.pause", Outcome: "degraded", Detail: clipDetail("memory not kept: " + why)})
}

// reapFrozen applies the memory policy to the frozen sandboxes: one whose
// sandbox ended, or frozen longer than MemoryPauseMax, degrades to its
// filesystem pause; under memory pressure the oldest one does (one a
// call: reap runs every second).
func (s *Server) reapFrozen(ctx context.Context, boxes []*box) {
	now := s.now()
	var oldest *box
	var oldestAt time.Time
	for _, b := range boxes {
		b.mu.Lock()
		lv, at := b.frozen, b.frozenAt
		b.mu.Unlock()
		switch {
		case lv == nil:
		case isDone(lv.sb.Done()):
			s.degrade(ctx, b, "the frozen sandbox ended while paused")
		case now.Sub(at) >= s.cfg.MemoryPauseMax:
			s.degrade(ctx, b, fmt.Sprintf("frozen for %s, the most this server holds a sandbox's memory (e2b.memory_pause_max)", s.cfg.MemoryPauseMax))
		case oldest == nil || at.Before(oldestAt):
			oldest, oldestAt = b, at
		}
	}
	if oldest != nil {
		if why := s.memoryPressure(); why != "" {
			s.degrade(ctx, oldest, why)
		}
	}
}

// memoryPressure says why the host's memory is too short to hold a frozen
// sandbox, or "".
func (s *Server) memoryPressure() string {
	if s.cfg.MemoryPauseMinAvailable <= 0 {
		return ""
	}
	read := s.memInfo
	if read == nil {
		read = hostMemInfo
	}
	avail, total, err := read()
	if err != nil || total <= 0 {
		return ""
	}
	if float64(avail) < s.cfg.MemoryPauseMinAvailable*float64(total) {
		return fmt.Sprintf("host memory pressure: %d MiB of %d MiB available, under e2b.memory_pause_min_available %v", avail>>20, total>>20, s.cfg.MemoryPauseMinAvailable)
	}
	return ""
}

// hostMemInfo reads MemAvailable and MemTotal from /proc/meminfo, in
// bytes.
func hostMemInfo() (avail, total int64, err error) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, err
	}
	return parseMemInfo(b)
}

// parseMemInfo reads MemAvailable and MemTotal of a /proc/meminfo.
func parseMemInfo(b []byte) (avail, total int64, err error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	found := 0
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		var dst *int64
		switch string(f[0]) {
		case "MemAvailable:":
			dst = &avail
		case "MemTotal:":
			dst = &total
		default:
			continue
		}
		n, perr := strconv.ParseInt(string(f[1]), 10, 64)
		if perr != nil || n < 0 || n > 1<<50 {
			return 0, 0, fmt.Errorf("meminfo: %s %q", f[0], f[1])
		}
		*dst = n << 10
		found++
	}
	if found < 2 {
		return 0, 0, errors.New("meminfo: no MemAvailable or MemTotal")
	}
	return avail, total, nil
}
