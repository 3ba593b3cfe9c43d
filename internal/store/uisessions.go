package store

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"
)

// UISession is one web UI login: a browser's session cookie stands for an
// API key's principal until Expires. The store keeps the SHA-256 of the
// session's id (the cookie's value), never the id: a copy of the database
// holds no usable cookie (nor the CSRF token the server derives from the
// id).
type UISession struct {
	// Hash is the SHA-256 of the session id (sha256.Size bytes).
	Hash          []byte
	Tenant, KeyID string
	// Scopes are, in a session read from the store, its key's (a key's
	// scopes never change); not stored with the session.
	Scopes []string
	// Created is the login; Used the last use the store recorded;
	// Expires when the session ends unless used again (the caller's
	// rule: idle and absolute limits).
	Created, Used, Expires time.Time
}

// UISessions keeps the web UI's sessions where every server on the store
// finds them: a browser logged in through one replica is logged in on
// all, and a logout, a key's revocation or its tenant's deletion through
// any of them (or in the store directly) ends the session everywhere, at
// the next request. RevokeAPIKey deletes the key's sessions and a
// tenant's deletion the tenant's, in their own transactions.
type UISessions interface {
	// CreateUISession stores s. Its key must be tenant's, unrevoked, of a
	// tenant not being deleted (else ErrNotFound). When the key has most
	// or more sessions unexpired at s.Created, the least recently used
	// end first, so that it keeps at most most. A hash stored already
	// gives ErrExists.
	CreateUISession(ctx context.Context, s UISession, most int) error
	// UISession returns the session whose id hashes to hash, with its
	// key's scopes, if it expires after now, its key is unrevoked and
	// its tenant not being deleted; otherwise ErrNotFound (and an expired
	// session is deleted).
	UISession(ctx context.Context, hash []byte, now time.Time) (UISession, error)
	// TouchUISession records a use of the session: Used and Expires move
	// to used and expires if used is later than the recorded use (never
	// back). A session that is gone gives ErrNotFound.
	TouchUISession(ctx context.Context, hash []byte, used, expires time.Time) error
	// DeleteUISession ends the session (a logout); one that is gone
	// gives ErrNotFound.
	DeleteUISession(ctx context.Context, hash []byte) error
	// ExpireUISessions deletes every session that expired at or before
	// now and returns how many.
	ExpireUISessions(ctx context.Context, now time.Time) (int64, error)
}

// MaxUISessionsPerKey is what a server keeps per key at most (the most of
// CreateUISession): a key's logins past it end its least recently used
// sessions.
const MaxUISessionsPerKey = 100

// CheckUISession refuses a session a store must not keep.
func CheckUISession(s UISession) error {
	switch {
	case len(s.Hash) != sha256.Size:
		return fmt.Errorf("%w: ui session: hash must be %d bytes", ErrInvalid, sha256.Size)
	case ValidateTenant(s.Tenant) != nil:
		return fmt.Errorf("%w: ui session: tenant %q", ErrInvalid, clip(s.Tenant))
	case ValidateAPIKeyID(s.KeyID) != nil:
		return fmt.Errorf("%w: ui session: key id %q", ErrInvalid, clip(s.KeyID))
	case s.Created.IsZero() || s.Used.Before(s.Created) || !s.Expires.After(s.Used):
		return fmt.Errorf("%w: ui session: want created <= used < expires", ErrInvalid)
	}
	return nil
}
