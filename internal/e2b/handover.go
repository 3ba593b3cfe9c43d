package e2b

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// A paused sandbox whose replica is gone. A pause ends its record's lease
// at once (nothing runs to renew it for) and leaves the pausing replica's
// name on the record: that replica holds the paused sandbox (its frozen
// boot, if the pause kept memory) and answers for it, relayed as for a
// running one. When it is gone for good, its lease says nothing (it
// lapsed at the pause), so another replica judges by its address: a
// request for the sandbox that reaches a replica whose connection to the
// holder's advertised address is refused (or times out) takes the paused
// sandbox over. Its resume state (the checkpoint's digest, its tokens,
// create's envs, lifecycle and template) is sealed in the pause's
// run.paused event under the replicas' shared key, and its checkpoint is
// in the shared store: the replica acquires the record's lease (fenced:
// one taker), re-reads the record (it must still name the holder it
// could not reach, at the seq it read), appends a sandbox.op
// "sandbox.takeover" under that lease (a holder that comes back finds
// its seq taken and its resume refused), holds the checkpoint under its
// own name (releasing the gone holder's hold), keeps the state in its own
// StateDir, ends the lease again with its own name on the record, and
// serves the sandbox as paused: a connect or resume boots a fresh
// sandbox with the checkpoint's tree, as after a restart (a pause that
// kept memory resumes from files: the frozen boot was the gone
// replica's). A holder that restarts skips a paused record that names
// another replica (restore).

// probeTimeout bounds the dial that asks whether a paused sandbox's
// holder answers.
const probeTimeout = 2 * time.Second

// peerAnswers reports whether a TCP connection to p's control plane
// opens: false when it is refused or times out (its replica is gone).
func (s *Server) peerAnswers(ctx context.Context, p Peer) bool {
	u, err := url.Parse(p.APIURL)
	if err != nil || u.Host == "" {
		return true // not ours to judge: the relay says what is wrong
	}
	host := u.Host
	if u.Port() == "" {
		host = net.JoinHostPort(u.Hostname(), map[bool]string{true: "443", false: "80"}[u.Scheme == "https"])
	}
	dctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(dctx, "tcp", host)
	if err != nil {
		// Unless the request went away (not the replica).
		return ctx.Err() != nil
	}
	c.Close()
	return true
}

// pausedSealID is the id a paused state's sealed blob is bound to with
// its record (sealAD): apart from sandbox.created's blob.
func pausedSealID(id string) string { return "paused/" + id }

// sealedPause is the sealed resume state of b, paused with ps, for its
// run.paused event: empty without a shared key or a checkpoint (a tar
// file in StateDir is this server's alone).
func (s *Server) sealedPause(b *box, ps pausedState) (string, error) {
	if s.keys == nil || ps.Checkpoint == "" {
		return "", nil
	}
	ps.SandboxID, ps.boxState = b.id, stateOf(b)
	return s.keys.sealJSON(b.rec.runID, pausedSealID(b.id), ps)
}

// serverOf returns the server id in lease owner name owner
// ("e2b/<server id>/<nonce>...").
func serverOf(owner string) string {
	rest, ok := strings.CutPrefix(owner, "e2b/")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, "/")
	return id
}

// takeOverPaused takes paused record rec, held by owner, over when
// owner's advertised address does not answer (see above), and reports
// whether the sandbox is this server's now (taken), or whether another
// replica changed the record meanwhile (lost: it took the sandbox over at
// the same moment, or its holder came back), when the caller must read
// the record again rather than go by owner. Two replicas taking one
// sandbox over at once: the record's lease lets one acquire it, and the
// takeover's append at the seq both read lets one write, so exactly one
// wins; the other finds the lease held or the seq taken.
func (s *Server) takeOverPaused(ctx context.Context, rec store.Run, owner string) (taken, lost bool) {
	if s.keys == nil || s.o.Checkpoints == nil {
		return false, false
	}
	peer, ok := s.peerOf(owner)
	if !ok || s.peerAnswers(ctx, peer) {
		return false, false
	}
	end := s.beginTakeover(ctx, rec.ID)
	if end == nil {
		taken = s.holdsRun(rec.ID)
		return taken, !taken
	}
	defer end()
	if s.holdsRun(rec.ID) {
		return true, false
	}
	err := s.handOver(ctx, rec.ID, owner)
	if errors.Is(err, errHandedOver) || errors.Is(err, store.ErrLeased) {
		s.log.Info("e2b: a paused sandbox was taken over by another replica first", "run_id", rec.ID, "holder", ownerLabel(owner))
		return false, true
	}
	if err != nil {
		s.log.Warn("e2b: a paused sandbox whose replica does not answer was not taken over", "run_id", rec.ID, "holder", ownerLabel(owner), "err", err)
		return false, false
	}
	return true, false
}

// holdsRun reports whether one of this server's sandboxes has record
// runID.
func (s *Server) holdsRun(runID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range s.boxes {
		if b.rec.runID == runID {
			return true
		}
	}
	return false
}

// errHandedOver is a takeover that found the record changed since it was
// read: another replica's, or its holder's.
var errHandedOver = errors.New("the record changed meanwhile")

// handOver takes paused record runID, which gone holder owner held, over.
func (s *Server) handOver(ctx context.Context, runID, owner string) error {
	r, err := s.o.Store.GetRun(ctx, runID)
	if err != nil {
		return err
	}
	if r.Status != event.StatusPaused || r.LeaseOwner != owner {
		return errHandedOver
	}
	l, err := s.o.Store.AcquireLease(ctx, runID, s.owner, s.leaseTTL())
	if err != nil {
		return fmt.Errorf("lease: %w", err)
	}
	endLease := func() {
		if _, err := s.o.Store.RenewLease(context.WithoutCancel(ctx), runID, s.owner, l.Token, time.Nanosecond); err != nil {
			s.log.Warn("e2b: end the lease of a paused sandbox taken over", "run_id", runID, "err", err)
		}
	}
	defer endLease()
	c, err := s.createdOf(ctx, r)
	if err != nil {
		return err
	}
	ps, err := s.pausedOf(ctx, r, c)
	if err != nil {
		return err
	}
	// The takeover in the log, under the lease and at the seq read with
	// the holder's name: a write of anyone else since fails it.
	d, err := event.New(event.SandboxOp{
		Op: "sandbox.takeover", Outcome: "ok",
		Detail: clipDetail(fmt.Sprintf("paused; its replica %s does not answer; held by %s from now on", ownerLabel(owner), ownerLabel(s.owner))),
	})
	if err != nil {
		return err
	}
	stored, err := s.o.Store.Append(store.WithFence(ctx, l.Token), runID, r.LastSeq+1, []event.Event{d})
	if err != nil {
		if errors.Is(err, store.ErrConflict) {
			return errHandedOver
		}
		return err
	}
	r.LastSeq = stored[len(stored)-1].Seq
	if err := s.restoreBox(ctx, r, ps); err != nil {
		return err
	}
	s.mu.Lock()
	b := s.boxes[c.SandboxID]
	s.mu.Unlock()
	if err := s.writePaused(b, ps); err != nil {
		s.mu.Lock()
		delete(s.boxes, c.SandboxID)
		s.mu.Unlock()
		return err
	}
	if old := serverOf(owner); old != "" && old != s.serverID {
		s.release(ctx, "e2b/"+old+"/paused/"+runID)
	}
	s.log.Info("e2b: took over a paused sandbox whose replica does not answer", "sandbox_id", c.SandboxID, "run_id", runID, "holder", ownerLabel(owner))
	s.audit.line(Record{Tenant: r.Tenant, Sandbox: c.SandboxID, Op: "sandbox.takeover", Outcome: "ok", Run: runID, Detail: "paused"})
	return nil
}

// pausedOf opens the resume state sealed in paused record r's last
// run.paused event (c is its sandbox.created).
func (s *Server) pausedOf(ctx context.Context, r store.Run, c *event.SandboxCreated) (pausedState, error) {
	var sealed string
	err := s.eachEventOf(ctx, r.ID, func(e event.Event) {
		if e.Type != event.TypeRunPaused {
			return
		}
		if p, err := e.Unpack(); err == nil {
			sealed = p.(*event.RunPaused).Sealed
		}
	})
	if err != nil {
		return pausedState{}, err
	}
	if sealed == "" {
		return pausedState{}, errors.New("its pause sealed no resume state (no shared key, or no checkpoint)")
	}
	var raw json.RawMessage
	if err := s.keys.openJSON(r.ID, pausedSealID(c.SandboxID), sealed, &raw); err != nil {
		return pausedState{}, err
	}
	ps, err := parsePaused(raw)
	if err != nil {
		return ps, fmt.Errorf("its sealed state: %w", err)
	}
	switch {
	case ps.SandboxID != c.SandboxID:
		return ps, errors.New("its sealed state names another sandbox")
	case ps.Checkpoint == "":
		return ps, errors.New("its sealed state names no checkpoint")
	case !hashOK(ps.Token, c.TokenSHA256):
		return ps, errors.New("its sealed token does not match the record's verifier")
	}
	return ps, nil
}

// eachEventOf calls f with each event of record runID, in order.
func (s *Server) eachEventOf(ctx context.Context, runID string, f func(event.Event)) error {
	for from := int64(1); ; {
		evs, err := s.o.Store.Events(ctx, runID, from, store.MaxPage)
		if err != nil {
			return err
		}
		for _, e := range evs {
			f(e)
		}
		if len(evs) < store.MaxPage {
			return nil
		}
		from = evs[len(evs)-1].Seq + 1
	}
}

// movedAway reports whether paused b's record names another replica now
// (it took b over while this one did not answer); b is then forgotten
// here: its frozen boot destroyed, its state and hold removed.
// Preconditions: b.life and b.mu held.
func (s *Server) movedAway(ctx context.Context, b *box) bool {
	if s.keys == nil {
		return false
	}
	r, err := s.o.Store.GetRun(ctx, b.rec.runID)
	if err != nil || r.LeaseOwner == "" || s.ours(r.LeaseOwner) {
		return false
	}
	if b.frozen != nil {
		s.destroy(ctx, b.frozen)
		b.frozen = nil
	}
	b.state, b.paused = stateKilled, ""
	s.mu.Lock()
	if s.boxes[b.id] == b {
		delete(s.boxes, b.id)
	}
	s.mu.Unlock()
	s.removePaused(b.rec.runID)
	s.invalidateIndex()
	s.log.Info("e2b: a paused sandbox of this replica was taken over by another", "sandbox_id", b.id, "holder", ownerLabel(r.LeaseOwner))
	return true
}
