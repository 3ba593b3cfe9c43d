package schema

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/store"
)

// The web UI's sessions of store.UISessions, written once over Tx for both
// dialects.

// errNoLiveKey is what a login to a key that is gone, revoked or of a
// tenant being deleted gets.
func errNoLiveKey(id string) error {
	return fmt.Errorf("ui session: key %s is not live: %w", store.Clip(id), store.ErrNotFound)
}

// CreateUISession implements store.UISessions.CreateUISession in tx. On
// PostgreSQL it holds the key's row lock (FOR UPDATE) to the commit, so
// that a revocation (which updates that row, then deletes the key's
// sessions) either comes first and is seen here, or comes after and
// deletes this session; and two logins of one key at once cannot both
// find room under most. SQLite has one writer.
func (d Dialect) CreateUISession(ctx context.Context, tx Tx, s store.UISession, most int) error {
	lock := ""
	if d == Postgres {
		lock = " FOR UPDATE OF k"
	}
	var revoked, deleting *int64
	err := d.queryOne(ctx, tx, `SELECT k.revoked_ns, t.deleting_ns FROM api_keys k JOIN tenants t ON t.name = k.tenant
		WHERE k.id = `+d.Param(1)+` AND k.tenant = `+d.Param(2)+lock, []any{s.KeyID, s.Tenant}, &revoked, &deleting)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return errNoLiveKey(s.KeyID)
	case err != nil:
		return fmt.Errorf("ui session: key: %w", err)
	case revoked != nil || deleting != nil:
		return errNoLiveKey(s.KeyID)
	}
	var one int64
	err = d.queryOne(ctx, tx, `SELECT 1 FROM ui_sessions WHERE hash = `+d.Param(1), []any{s.Hash}, &one)
	switch {
	case err == nil:
		return fmt.Errorf("ui session: %w", store.ErrExists)
	case !errors.Is(err, store.ErrNotFound):
		return fmt.Errorf("ui session: %w", err)
	}
	created := s.Created.UnixNano()
	key := `tenant = ` + d.Param(1) + ` AND key_id = ` + d.Param(2)
	if err := tx.Exec(ctx, `DELETE FROM ui_sessions WHERE `+key+` AND expires_ns <= `+d.Param(3), s.Tenant, s.KeyID, created); err != nil {
		return fmt.Errorf("ui session: expire: %w", err)
	}
	var n int64
	if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM ui_sessions WHERE `+key, []any{s.Tenant, s.KeyID}, &n); err != nil {
		return fmt.Errorf("ui session: count: %w", err)
	}
	if over := n - int64(most) + 1; over > 0 {
		q := `DELETE FROM ui_sessions WHERE hash IN (SELECT hash FROM ui_sessions WHERE ` + key + ` ORDER BY used_ns, hash LIMIT ` + d.Param(3) + `)`
		if err := tx.Exec(ctx, q, s.Tenant, s.KeyID, over); err != nil {
			return fmt.Errorf("ui session: make room: %w", err)
		}
	}
	q := `INSERT INTO ui_sessions (hash, tenant, key_id, created_ns, used_ns, expires_ns) VALUES (` +
		d.Param(1) + `, ` + d.Param(2) + `, ` + d.Param(3) + `, ` + d.Param(4) + `, ` + d.Param(5) + `, ` + d.Param(6) + `)`
	if err := tx.Exec(ctx, q, s.Hash, s.Tenant, s.KeyID, created, s.Used.UnixNano(), s.Expires.UnixNano()); err != nil {
		return fmt.Errorf("ui session: store: %w", err)
	}
	return nil
}

// UISession implements store.UISessions.UISession in tx, but for its
// answer when there is no live session: ok false and no error, so that
// the caller commits, because a session that can never be live again
// (expired, its key revoked or gone, its tenant being deleted) is deleted
// as it is found.
func (d Dialect) UISession(ctx context.Context, tx Tx, hash []byte, now time.Time) (s store.UISession, ok bool, err error) {
	s = store.UISession{Hash: hash}
	var (
		created, used, expires int64
		scopes                 *string
		revoked, deleting      *int64
	)
	err = d.queryOne(ctx, tx, `SELECT s.tenant, s.key_id, s.created_ns, s.used_ns, s.expires_ns, k.scopes, k.revoked_ns, t.deleting_ns
		FROM ui_sessions s
		LEFT JOIN api_keys k ON k.id = s.key_id AND k.tenant = s.tenant
		LEFT JOIN tenants t ON t.name = s.tenant
		WHERE s.hash = `+d.Param(1), []any{hash}, &s.Tenant, &s.KeyID, &created, &used, &expires, &scopes, &revoked, &deleting)
	if errors.Is(err, store.ErrNotFound) {
		return store.UISession{}, false, nil
	}
	if err != nil {
		return store.UISession{}, false, fmt.Errorf("ui session: %w", err)
	}
	if expires <= now.UnixNano() || scopes == nil || revoked != nil || deleting != nil {
		if err := tx.Exec(ctx, `DELETE FROM ui_sessions WHERE hash = `+d.Param(1), hash); err != nil {
			return store.UISession{}, false, fmt.Errorf("ui session: delete: %w", err)
		}
		return store.UISession{}, false, nil
	}
	s.Scopes = strings.Fields(*scopes)
	s.Created, s.Used, s.Expires = time.Unix(0, created).UTC(), time.Unix(0, used).UTC(), time.Unix(0, expires).UTC()
	return s, true, nil
}

// ErrNoUISession is what store.UISessions.UISession answers when Dialect.UISession finds no live session.
var ErrNoUISession = fmt.Errorf("ui session: none live: %w", store.ErrNotFound)

// TouchUISession implements store.UISessions.TouchUISession in tx.
func (d Dialect) TouchUISession(ctx context.Context, tx Tx, hash []byte, used, expires time.Time) error {
	if err := d.uiSessionExists(ctx, tx, hash); err != nil {
		return err
	}
	ns := used.UnixNano()
	q := `UPDATE ui_sessions SET used_ns = ` + d.Param(1) + `, expires_ns = ` + d.Param(2) +
		` WHERE hash = ` + d.Param(3) + ` AND used_ns < ` + d.Param(4)
	if err := tx.Exec(ctx, q, ns, expires.UnixNano(), hash, ns); err != nil {
		return fmt.Errorf("ui session: touch: %w", err)
	}
	return nil
}

// uiSessionExists returns nil if session hash is stored, live or not, and
// an error wrapping store.ErrNotFound if it is not.
func (d Dialect) uiSessionExists(ctx context.Context, tx Tx, hash []byte) error {
	var one int64
	err := d.queryOne(ctx, tx, `SELECT 1 FROM ui_sessions WHERE hash = `+d.Param(1), []any{hash}, &one)
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("ui session: %w", store.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("ui session: %w", err)
	}
	return nil
}

// DeleteUISession implements store.UISessions.DeleteUISession in tx.
func (d Dialect) DeleteUISession(ctx context.Context, tx Tx, hash []byte) error {
	if err := d.uiSessionExists(ctx, tx, hash); err != nil {
		return err
	}
	if err := tx.Exec(ctx, `DELETE FROM ui_sessions WHERE hash = `+d.Param(1), hash); err != nil {
		return fmt.Errorf("ui session: delete: %w", err)
	}
	return nil
}

// ExpireUISessions implements store.UISessions.ExpireUISessions in tx.
func (d Dialect) ExpireUISessions(ctx context.Context, tx Tx, now time.Time) (int64, error) {
	var n int64
	ns := now.UnixNano()
	if err := d.queryOne(ctx, tx, `SELECT COUNT(*) FROM ui_sessions WHERE expires_ns <= `+d.Param(1), []any{ns}, &n); err != nil {
		return 0, fmt.Errorf("ui sessions: count expired: %w", err)
	}
	if n == 0 {
		return 0, nil
	}
	if err := tx.Exec(ctx, `DELETE FROM ui_sessions WHERE expires_ns <= `+d.Param(1), ns); err != nil {
		return 0, fmt.Errorf("ui sessions: expire: %w", err)
	}
	return n, nil
}

// DeleteKeyUISessions deletes the sessions of tenant's key id: what
// revoking the key does in its transaction.
func (d Dialect) DeleteKeyUISessions(ctx context.Context, tx Tx, tenant, id string) error {
	if err := tx.Exec(ctx, `DELETE FROM ui_sessions WHERE tenant = `+d.Param(1)+` AND key_id = `+d.Param(2), tenant, id); err != nil {
		return fmt.Errorf("delete the key's ui sessions: %w", err)
	}
	return nil
}
