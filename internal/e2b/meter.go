package e2b

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"time"

	"github.com/airlockrun/airlock/internal/credit"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
)

// Sandboxes are metered by package credit's rule, as the run engine's
// model calls are: a tenant whose credit ledger has entries is metered;
// every MeterInterval and at the end of each boot, a sandbox.usage event
// records what each running sandbox used since the last one (its host's
// measure: wall time, the cgroup's CPU time, its memory limit) and what
// that costs by the host's prices, and a ledger debit names that event's
// seq, so a retry (or a restarted server settling what its predecessor
// recorded) never charges twice. A metered tenant whose balance is spent
// may not create sandboxes, and its running ones are killed at the next
// meter tick.

// meterState is where a boot's metering stands. Guarded by the box's
// life lock.
type meterState struct {
	// at is the end of the last usage recorded, cpu the CPU time the
	// sandbox had then.
	at  time.Time
	cpu time.Duration
	// carry is the fraction of a micro-credit the last usage did not
	// charge, in nano-credits.
	carry int64
}

// usage measures what lv used since m.at, up to now, and returns it
// priced, with the meter state to keep once it is recorded.
func (s *Server) usage(b *box, lv *live, m meterState, now time.Time, final bool) (event.SandboxUsage, meterState) {
	cpu := m.cpu
	if ms, ok := lv.sb.(sandbox.Measurer); ok {
		if got, err := ms.Measure(); err == nil && got.CPU > cpu {
			cpu = got.CPU
		}
	}
	u := event.SandboxUsage{
		SandboxID: b.id, Start: m.at.UTC(), End: now.UTC(), Final: final,
		SandboxMS: max(0, now.Sub(m.at).Milliseconds()), CPUMS: (cpu - m.cpu).Milliseconds(),
	}
	mib := big.NewInt(max(0, b.spec.Limits.MemoryBytes>>20))
	mem := new(big.Int).Mul(mib, big.NewInt(u.SandboxMS))
	u.MemoryMiBMS = clampInt64(mem)
	// In nano-credits: a price per second is the same number per
	// millisecond in thousandths, and per GiB-second per MiB-millisecond
	// in 1024 thousandths.
	p := s.cfg.Price
	nano := new(big.Int).Mul(big.NewInt(u.SandboxMS), big.NewInt(p.SandboxSecond))
	nano.Add(nano, new(big.Int).Mul(big.NewInt(u.CPUMS), big.NewInt(p.CPUSecond)))
	nano.Add(nano, new(big.Int).Quo(new(big.Int).Mul(mem, big.NewInt(p.MemoryGiBSecond)), big.NewInt(1024)))
	nano.Add(nano, big.NewInt(m.carry))
	cost, carry := new(big.Int).QuoRem(nano, big.NewInt(1000), new(big.Int))
	u.CostMicroCredits = min(clampInt64(cost), store.MaxLedgerAmount)
	return u, meterState{at: now, cpu: cpu, carry: carry.Int64()}
}

func clampInt64(n *big.Int) int64 {
	if !n.IsInt64() {
		return 1<<63 - 1
	}
	return n.Int64()
}

// errCreditsSpent answers a create of a metered tenant without credits.
// E2B answers quota errors with 429, which the SDK raises as a
// RateLimitError; without Retry-After it does not retry.
var errCreditsSpent = &publicError{status: 429, msg: "the tenant's credits are spent: sandboxes cannot be created until credits are granted"}

// debit charges the usage recorded at seq of b's log, if its tenant is
// metered. A debit that fails is owed (credit.Meter.Debit): counted against
// the tenant's balance and tried again at the next meter tick.
func (s *Server) debit(ctx context.Context, b *box, seq, cost int64) {
	if seq <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	err := s.credits.Debit(ctx, credit.Debit{Tenant: b.tenant, RunID: b.rec.runID, Seq: seq, Amount: cost, Note: "sandbox " + b.id})
	if err != nil {
		s.log.Warn("e2b: debit sandbox usage", "sandbox_id", b.id, "seq", seq, "err", err)
	}
}

// settle debits every sandbox.usage of run r's log that has a cost: the
// debits a server that stopped may not have made. A debit is idempotent per event, so what was
// paid is not paid again.
func (s *Server) settle(ctx context.Context, r store.Run) error {
	m, err := s.credits.Metered(ctx, r.Tenant)
	if err != nil || !m {
		return err
	}
	for from := int64(1); ; {
		evs, err := s.o.Store.Events(ctx, r.ID, from, store.MaxPage)
		if err != nil {
			return fmt.Errorf("e2b: settle %s: %w", r.ID, err)
		}
		for _, e := range evs {
			if e.Type != event.TypeSandboxUsage {
				continue
			}
			p, err := e.Unpack()
			if err != nil {
				return fmt.Errorf("e2b: settle %s: %w", r.ID, err)
			}
			if d, ok := credit.DebitOf(r.Tenant, e, p); ok {
				if err := s.credits.Debit(ctx, d); err != nil {
					return fmt.Errorf("e2b: settle %s: %w", r.ID, err)
				}
			}
		}
		if len(evs) < store.MaxPage {
			return nil
		}
		from = evs[len(evs)-1].Seq + 1
	}
}

// meter is one meter tick: the debits owed are tried again, every running
// sandbox's usage is recorded and debited and its lease renewed; then the
// running sandboxes of metered tenants whose balance is spent are killed,
// and the records of other servers' sandboxes whose leases ran out are
// closed.
func (s *Server) meter(ctx context.Context) {
	if err := s.credits.Retry(ctx); err != nil {
		s.log.Warn("e2b: debit sandbox usage owed", "err", err)
	}
	running := map[string][]*box{}
	for _, b := range s.all() {
		switch s.meterBox(ctx, b) {
		case meterRunning:
			running[b.tenant] = append(running[b.tenant], b)
		case meterLeaseLost:
			// Another server closed the record, taking this one for
			// dead: the sandbox must not live on unrecorded.
			s.log.Warn("e2b: a sandbox's record was taken over; destroying it", "sandbox_id", b.id)
			s.end(ctx, b, endLost, "")
		}
	}
	s.endSpent(ctx, running)
	s.reapClosed(ctx)
	s.sweep(ctx)
}

// What meterBox found.
const (
	meterIdle = iota // not running
	meterRunning
	meterLeaseLost // running, but its record is no longer this Server's
)

// meterBox renews b's lease and records and debits its usage since the
// last tick, if it runs.
func (s *Server) meterBox(ctx context.Context, b *box) int {
	b.life.Lock()
	defer b.life.Unlock()
	b.mu.Lock()
	lv := b.live
	running := b.state == stateRunning && lv != nil
	b.mu.Unlock()
	if !running {
		return meterIdle
	}
	// The lease first: usage appended to a record another server closed
	// would follow its end.
	_, err := s.o.Store.RenewLease(ctx, b.rec.runID, s.owner, b.lease, s.leaseTTL())
	switch {
	case errors.Is(err, store.ErrLeaseLost), errors.Is(err, store.ErrFinal):
		b.status = event.StatusFailed // closed by the server that took it over
		return meterLeaseLost
	case err != nil:
		s.log.Warn("e2b: renew the lease of a sandbox's record", "sandbox_id", b.id, "err", err)
	}
	u, next := s.usage(b, lv, b.meter, s.now(), false)
	evs, err := b.rec.commit(ctx, "", "", u)
	if err != nil {
		s.log.Warn("e2b: record sandbox usage", "sandbox_id", b.id, "err", err)
		return meterRunning
	}
	b.meter = next
	s.debit(ctx, b, evs[0].Seq, u.CostMicroCredits)
	return meterRunning
}

// leaseTTL is how long a running sandbox's record stays leased to this
// Server without a renewal: long enough for a few missed meter ticks.
func (s *Server) leaseTTL() time.Duration {
	return 3*s.cfg.MeterInterval + 30*time.Second
}
