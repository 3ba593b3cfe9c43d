package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// AddLedgerEntry implements store.Store.
//
// It locks the ledger table against other writers (EXCLUSIVE mode: reads
// go on) for the rest of its transaction, whatever process they are in.
// That makes the id it picks (max + 1) free and larger than every
// committed one, so ids follow commit order and a reader paging by id
// never skips a row (a sequence would hand out ids that commit out of
// order); and each statement after the lock sees every debit committed
// before it (READ COMMITTED), so the retry check below is exact. One
// ledger write at a time is cheap next to the fsync each one waits for.
func (s *Store) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	if err := s.check("add ledger entry", nil); err != nil {
		return store.LedgerEntry{}, err
	}
	e, err := store.PrepareLedgerEntry(e, s.now(), s.red)
	if err != nil {
		return store.LedgerEntry{}, fmt.Errorf("postgres: %w", err)
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `LOCK TABLE ledger IN EXCLUSIVE MODE`); err != nil {
			return fmt.Errorf("lock ledger: %w", err)
		}
		var runID, seq any // NULL unless set
		if e.RunID != "" {
			// A run's tenant never changes and its log only grows:
			// no row lock needed.
			var (
				tenant string
				last   int64
			)
			err := tx.QueryRow(ctx, `SELECT tenant, last_seq FROM runs WHERE id = $1`, e.RunID).Scan(&tenant, &last)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return err
			}
			if err := store.CheckLedgerRun(e, err == nil, tenant, last); err != nil {
				return err
			}
			runID = e.RunID
		}
		if e.Kind == store.LedgerDebit {
			old, err := sqlrow.ScanLedger(tx.QueryRow(ctx, `SELECT `+sqlrow.LedgerColumns+` FROM ledger WHERE run_id = $1 AND seq = $2`, e.RunID, e.Seq))
			switch {
			case err == nil:
				if err := store.SameDebit(old, e); err != nil {
					return err
				}
				e = old
				return nil
			case !errors.Is(err, pgx.ErrNoRows):
				return err
			}
			seq = e.Seq
		}
		err := tx.QueryRow(ctx, `INSERT INTO ledger (`+sqlrow.LedgerColumns+`)
			SELECT COALESCE(MAX(id), 0) + 1, $1::text, $2::text, $3::bigint, $4::text, $5::bigint, $6::text, $7::bigint FROM ledger
			RETURNING id`,
			e.Tenant, e.Kind, e.Amount, runID, seq, e.Note, e.Created.UnixNano()).Scan(&e.ID)
		if err != nil {
			return err
		}
		// Heard at commit by every process on the store (store.Changes):
		// an E2B server ends a spent tenant's sandboxes then.
		_, err = tx.Exec(ctx, notifySQL, ledgerPayload(e.Tenant))
		return err
	})
	if err != nil {
		return store.LedgerEntry{}, fmt.Errorf("postgres: tenant %s: add ledger %s: %w", e.Tenant, e.Kind, err)
	}
	return e, nil
}

// Balance implements store.Store. PostgreSQL sums bigints as numeric, so
// the sum is exact, and the cast back fails rather than wraps.
func (s *Store) Balance(ctx context.Context, tenant string) (int64, error) {
	if err := s.check("balance", store.ValidateTenant(tenant)); err != nil {
		return 0, err
	}
	var b int64
	err := s.pool.QueryRow(ctx, `SELECT COALESCE(SUM(CASE kind WHEN 'grant' THEN amount ELSE -amount END), 0)::bigint
		FROM ledger WHERE tenant = $1`, tenant).Scan(&b)
	if err != nil {
		return 0, fmt.Errorf("postgres: tenant %s: balance: %w", tenant, err)
	}
	return b, nil
}

// LedgerEntries implements store.Store.
func (s *Store) LedgerEntries(ctx context.Context, tenant string, after int64, limit int) ([]store.LedgerEntry, error) {
	if err := s.check("ledger entries", nil); err != nil {
		return nil, err
	}
	limit, err := store.ValidateLedgerPage(tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: %w", err)
	}
	out, err := query(ctx, s.pool, sqlrow.ScanLedger, `SELECT `+sqlrow.LedgerColumns+` FROM ledger WHERE tenant = $1 AND id > $2 ORDER BY id LIMIT $3`,
		tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: tenant %s: ledger entries: %w", tenant, err)
	}
	return out, nil
}
