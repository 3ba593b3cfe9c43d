package schema

import (
	"context"
	"fmt"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// The sandbox events of store.SandboxEvents, written once over Tx for
// both dialects.

// CheckSandboxEvents refuses events a store must not keep: no tenant or
// sandbox, a seq of 0, an event that is empty or over store.MaxSandboxEvent.
func CheckSandboxEvents(es []store.SandboxEvent) error {
	for _, e := range es {
		switch {
		case e.Tenant == "" || len(e.Tenant) > store.MaxTenantLen:
			return fmt.Errorf("%w: sandbox event: tenant must be 1 to %d bytes", store.ErrInvalid, store.MaxTenantLen)
		case e.Sandbox == "" || len(e.Sandbox) > 128:
			return fmt.Errorf("%w: sandbox event: sandbox must be 1 to 128 bytes", store.ErrInvalid)
		case e.Seq == 0 || e.Seq > 1<<62:
			return fmt.Errorf("%w: sandbox event: seq %d", store.ErrInvalid, e.Seq)
		case len(e.Event) == 0 || len(e.Event) > store.MaxSandboxEvent:
			return fmt.Errorf("%w: sandbox event: 1 to %d bytes", store.ErrInvalid, store.MaxSandboxEvent)
		}
	}
	return nil
}

// AppendSandboxEvents implements store.SandboxEvents.AppendSandboxEvents
// in tx.
func (d Dialect) AppendSandboxEvents(ctx context.Context, tx Tx, es []store.SandboxEvent) error {
	q := `INSERT INTO sandbox_events (tenant, sandbox, seq, time_ns, body) VALUES (` +
		d.Param(1) + `, ` + d.Param(2) + `, ` + d.Param(3) + `, ` + d.Param(4) + `, ` + d.Param(5) +
		`) ON CONFLICT (tenant, sandbox, seq) DO NOTHING`
	for _, e := range es {
		if err := tx.Exec(ctx, q, e.Tenant, e.Sandbox, int64(e.Seq), e.Time.UnixNano(), e.Event); err != nil {
			return fmt.Errorf("append sandbox event: %w", err)
		}
	}
	return nil
}

// SandboxEvents implements store.SandboxEvents.SandboxEvents in tx.
func (d Dialect) SandboxEvents(ctx context.Context, tx Tx, tenant, sandbox string, after uint64, limit int) ([]store.SandboxEvent, error) {
	q := `SELECT seq, time_ns, body FROM sandbox_events WHERE tenant = ` + d.Param(1) + ` AND sandbox = ` + d.Param(2) +
		` AND seq > ` + d.Param(3) + ` ORDER BY seq LIMIT ` + d.Param(4)
	var out []store.SandboxEvent
	err := tx.Query(ctx, q, []any{tenant, sandbox, int64(min(after, 1<<62)), store.PageLimit(limit)}, func(scan func(...any) error) error {
		e := store.SandboxEvent{Tenant: tenant, Sandbox: sandbox}
		var seq, ns int64
		if err := scan(&seq, &ns, &e.Event); err != nil {
			return err
		}
		e.Seq, e.Time = uint64(seq), time.Unix(0, ns).UTC()
		out = append(out, e)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("sandbox events: %w", err)
	}
	return out, nil
}

// ExpireSandboxEvents implements store.SandboxEvents.ExpireSandboxEvents
// in tx.
func (d Dialect) ExpireSandboxEvents(ctx context.Context, tx Tx, tenant string, before time.Time) (int64, error) {
	cond := `tenant = ` + d.Param(1) + ` AND time_ns < ` + d.Param(2)
	var n int64
	if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM sandbox_events WHERE `+cond, []any{tenant, before.UnixNano()}, &n); err != nil {
		return 0, fmt.Errorf("count sandbox events: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := tx.Exec(ctx, `DELETE FROM sandbox_events WHERE `+cond, tenant, before.UnixNano()); err != nil {
		return 0, fmt.Errorf("expire sandbox events: %w", err)
	}
	return n, nil
}
