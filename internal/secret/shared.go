package secret

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/store"
)

// OpenShared returns a store whose sealed records are rows of db (the run
// store, store.Secrets) instead of a file: every server on one database
// sees every secret, sealed under the key from key exactly as a file's
// (same cipher, same additional data, same key check). Every server must
// therefore be given the same key: a secret put under another key is
// refused with ErrWrongKey, and one sealed under another key does not
// open. The database never sees a value in clear, nor the key.
func OpenShared(db store.Secrets, key KeySource) (*Store, error) {
	if db == nil || key == nil {
		return nil, errors.New("secret: open shared store: no database or no key source")
	}
	return &Store{shared: db, src: key}, nil
}

// wrongKey is what a put refused for its key check says.
func wrongKey(name string) error {
	return fmt.Errorf("%w: %s: the shared store's secrets are sealed with another key (every server on one store needs the same secret key file)", ErrWrongKey, name)
}

// storeErr maps the database's not-found to ErrNotFound.
func storeErr(name string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return fmt.Errorf("secret: %s: %w", name, err)
}

// findShared returns tenant's record name, the local tenant's legacy one
// when it has none of its own (as storeData.find).
func (s *Store) findShared(ctx context.Context, tenant, name string) (store.SealedSecret, error) {
	rec, err := s.shared.SealedSecret(ctx, tenant, name)
	if errors.Is(err, store.ErrNotFound) && tenant == event.LocalTenant {
		rec, err = s.shared.SealedSecret(ctx, legacyLocalTenant, name)
	}
	if err != nil {
		return store.SealedSecret{}, storeErr(name, err)
	}
	return rec, nil
}

func (s *Store) setShared(ctx context.Context, tenant, name string, v Value, hosts []string, keys *storeKeys) error {
	now := time.Now().UTC()
	createdNS := now.UnixNano()
	old, err := s.findShared(ctx, tenant, name)
	switch {
	case err == nil:
		createdNS = min(old.Created.UnixNano(), createdNS) // a clock that went back
	case !errors.Is(err, ErrNotFound):
		return err
	}
	nonce := make([]byte, nonceSize)
	if _, err := rand.Read(nonce); err != nil {
		return fmt.Errorf("secret: set %s: nonce: %w", name, err)
	}
	rec := store.SealedSecret{
		Tenant: tenant, Name: name, Hosts: hosts, Created: time.Unix(0, createdNS).UTC(), Updated: now,
		KeyCheck: keys.check, Nonce: nonce,
		Ciphertext: keys.aead.Seal(nil, nonce, v.bytes(), additionalData(tenant, name, hosts)),
	}
	if err := s.shared.PutSecret(ctx, rec); err != nil {
		if errors.Is(err, store.ErrConflict) {
			return wrongKey(name)
		}
		return fmt.Errorf("secret: set %s: %w", name, err)
	}
	if tenant == event.LocalTenant && old.Tenant == legacyLocalTenant {
		// The legacy record is replaced by the one under tenant.
		if err := s.shared.DeleteSecret(ctx, legacyLocalTenant, name); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("secret: set %s: replace the legacy record: %w", name, err)
		}
	}
	return nil
}

func (s *Store) getShared(ctx context.Context, tenant, name string) (Value, Info, error) {
	rec, err := s.findShared(ctx, tenant, name)
	if err != nil {
		return Value{}, Info{}, err
	}
	keys, err := s.storeKeys(ctx)
	if err != nil {
		return Value{}, Info{}, err
	}
	if subtle.ConstantTimeCompare(rec.KeyCheck, keys.check) != 1 {
		return Value{}, Info{}, fmt.Errorf("%w: %s: sealed with another key (its key check does not match the key given)", ErrWrongKey, name)
	}
	if len(rec.Nonce) != nonceSize {
		return Value{}, Info{}, fmt.Errorf("%w: %s: nonce is %d bytes", ErrCorrupt, name, len(rec.Nonce))
	}
	plain, err := keys.aead.Open(nil, rec.Nonce, rec.Ciphertext, additionalData(rec.Tenant, name, rec.Hosts))
	if err != nil {
		return Value{}, Info{}, fmt.Errorf("%w: %s: sealed value does not authenticate (tampered, moved from another name, tenant or host binding)", ErrCorrupt, name)
	}
	v := NewValue(plain)
	clear(plain)
	return v, sharedInfo(rec), nil
}

func sharedInfo(r store.SealedSecret) Info {
	return Info{Name: r.Name, Created: r.Created, Updated: r.Updated, Hosts: slices.Clone(r.Hosts)}
}

func (s *Store) listShared(ctx context.Context, tenant string) ([]Info, error) {
	recs, err := s.shared.ListSecrets(ctx, tenant)
	if err != nil {
		return nil, fmt.Errorf("secret: list: %w", err)
	}
	var out []Info
	seen := map[string]bool{}
	for _, r := range recs {
		out = append(out, sharedInfo(r))
		seen[r.Name] = true
	}
	if tenant == event.LocalTenant {
		legacy, err := s.shared.ListSecrets(ctx, legacyLocalTenant)
		if err != nil {
			return nil, fmt.Errorf("secret: list: %w", err)
		}
		for _, r := range legacy {
			if !seen[r.Name] {
				out = append(out, sharedInfo(r))
			}
		}
		slices.SortFunc(out, func(a, b Info) int {
			switch {
			case a.Name < b.Name:
				return -1
			case a.Name > b.Name:
				return 1
			}
			return 0
		})
	}
	return out, nil
}

func (s *Store) deleteShared(ctx context.Context, tenant, name string) error {
	err := s.shared.DeleteSecret(ctx, tenant, name)
	if tenant == event.LocalTenant {
		// A legacy record of the name goes too (it would show through).
		lerr := s.shared.DeleteSecret(ctx, legacyLocalTenant, name)
		if err == nil || !errors.Is(err, store.ErrNotFound) {
			if lerr != nil && !errors.Is(lerr, store.ErrNotFound) {
				return storeErr(name, lerr)
			}
		} else {
			err = lerr
		}
	}
	if err != nil {
		return storeErr(name, err)
	}
	return nil
}

// MoveFile moves the secrets of the file store in dir (what Open keeps)
// into this shared store, as they are sealed (no key is needed: the seal
// binds tenant, name and hosts, not where it is kept), and then removes
// the file, under the file store's lock. A name the shared store has
// already keeps the shared store's value (it was set through another
// server since; the file's is dropped, counted in kept). A file sealed
// under another key than the shared store's secrets is refused with
// ErrWrongKey and left in place. No file: nothing to move.
func (s *Store) MoveFile(ctx context.Context, dir string) (moved, kept int, err error) {
	if s.shared == nil {
		return 0, 0, errors.New("secret: move file: not a shared store")
	}
	if _, err := os.Lstat(filepath.Join(dir, storeFile)); errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	fileStore, err := Open(dir, s.src)
	if err != nil {
		return 0, 0, err
	}
	unlock, err := fileStore.lock(ctx, unix.LOCK_EX)
	if err != nil {
		return 0, 0, err
	}
	defer unlock()
	f, err := fileStore.readLocked()
	if err != nil {
		return 0, 0, err
	}
	for _, r := range f.Secrets {
		_, err := s.shared.SealedSecret(ctx, r.Tenant, r.Name)
		if err == nil {
			kept++
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return moved, kept, fmt.Errorf("secret: move %s: %w", r.Name, err)
		}
		err = s.shared.PutSecret(ctx, store.SealedSecret{
			Tenant: r.Tenant, Name: r.Name, Hosts: r.Hosts, Created: r.Created, Updated: r.Updated,
			KeyCheck: f.KeyCheck, Nonce: r.Nonce, Ciphertext: r.Ciphertext,
		})
		if errors.Is(err, store.ErrConflict) {
			return moved, kept, fmt.Errorf("secret: move %s: %w", filepath.Join(dir, storeFile), wrongKey(r.Name))
		}
		if err != nil {
			return moved, kept, fmt.Errorf("secret: move %s: %w", r.Name, err)
		}
		moved++
	}
	if err := os.Remove(filepath.Join(dir, storeFile)); err != nil {
		return moved, kept, fmt.Errorf("secret: remove the moved file: %w", err)
	}
	return moved, kept, syncDir(dir)
}
