package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/sqlrow"
)

// AddLedgerEntry implements store.Store. The write lock every write
// transaction takes (BEGIN IMMEDIATE) serializes it with every other
// writer, in this process or another, so the id it picks (max + 1) is free
// and larger than every committed one.
func (s *Store) AddLedgerEntry(ctx context.Context, e store.LedgerEntry) (store.LedgerEntry, error) {
	if err := s.check("add ledger entry", nil); err != nil {
		return store.LedgerEntry{}, err
	}
	e, err := store.PrepareLedgerEntry(e, s.now(), s.red)
	if err != nil {
		return store.LedgerEntry{}, fmt.Errorf("sqlite: %w", err)
	}
	err = s.write(ctx, func(ctx context.Context, tx *sql.Tx) error {
		if e.RunID != "" {
			var (
				tenant string
				last   int64
			)
			err := tx.QueryRowContext(ctx, `SELECT tenant, last_seq FROM runs WHERE id = ?`, e.RunID).Scan(&tenant, &last)
			if err != nil && !errors.Is(err, sql.ErrNoRows) {
				return err
			}
			if err := store.CheckLedgerRun(e, err == nil, tenant, last); err != nil {
				return err
			}
		}
		if e.Kind == store.LedgerDebit {
			old, err := sqlrow.ScanLedger(tx.QueryRowContext(ctx, `SELECT `+sqlrow.LedgerColumns+` FROM ledger WHERE run_id = ? AND seq = ?`, e.RunID, e.Seq))
			switch {
			case err == nil:
				if err := store.SameDebit(old, e); err != nil {
					return err
				}
				e = old
				return nil
			case !errors.Is(err, sql.ErrNoRows):
				return err
			}
		}
		if err := tx.QueryRowContext(ctx, `SELECT COALESCE(MAX(id), 0) + 1 FROM ledger`).Scan(&e.ID); err != nil {
			return fmt.Errorf("next id: %w", err)
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO ledger (`+sqlrow.LedgerColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?)`,
			e.ID, e.Tenant, e.Kind, e.Amount, nullString(e.RunID), nullInt(e.Seq, e.Kind == store.LedgerDebit), e.Note, e.Created.UnixNano())
		return err
	})
	if err != nil {
		return store.LedgerEntry{}, fmt.Errorf("sqlite: tenant %s: add ledger %s: %w", e.Tenant, e.Kind, err)
	}
	return e, nil
}

// Balance implements store.Store. SQLite's SUM fails on overflow rather
// than wrapping.
func (s *Store) Balance(ctx context.Context, tenant string) (int64, error) {
	if err := s.check("balance", store.ValidateTenant(tenant)); err != nil {
		return 0, err
	}
	var b int64
	err := s.r.QueryRowContext(ctx, `SELECT COALESCE(SUM(CASE kind WHEN 'grant' THEN amount ELSE -amount END), 0)
		FROM ledger WHERE tenant = ?`, tenant).Scan(&b)
	if err != nil {
		return 0, fmt.Errorf("sqlite: tenant %s: balance: %w", tenant, err)
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
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	out, err := query(ctx, s.r, sqlrow.ScanLedger, `SELECT `+sqlrow.LedgerColumns+` FROM ledger WHERE tenant = ? AND id > ? ORDER BY id LIMIT ?`,
		tenant, after, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: tenant %s: ledger entries: %w", tenant, err)
	}
	return out, nil
}
