package secret

import (
	"bytes"
	"cmp"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/hostname"
	"github.com/airlockrun/airlock/internal/store"
)

// legacyLocalTenant is the tenant the command line's own secrets were
// stored under before it had one tenant for everything
// (event.LocalTenant). A store still holds them so: their sealed values
// name this tenant, and only the key could re-seal them. So the store
// reads them as event.LocalTenant's (Get, List, Delete), and Set of
// event.LocalTenant replaces one of the same name. A tenant created with
// this very name shares them with the local tenant, as it always did.
const legacyLocalTenant = "default"

// MaxValueSize is the largest secret value a Store accepts.
const MaxValueSize = 64 << 10

const (
	storeVersion  = 1
	storeFile     = "secrets.json"
	lockFile      = "lock"
	maxStoreBytes = 64 << 20
	nonceSize     = 12
	keyCheckSize  = 16
)

var (
	// ErrNotFound reports that the tenant has no secret of that name.
	ErrNotFound = errors.New("secret: not found")
	// ErrWrongKey reports that the store was sealed with another key.
	ErrWrongKey = errors.New("secret: wrong key for this store")
	// ErrCorrupt reports a store file that does not decode, or a sealed
	// value that does not authenticate (tampered, or moved to another name,
	// tenant or host binding).
	ErrCorrupt = errors.New("secret: store corrupt")
	// ErrInvalid reports a malformed tenant or secret name or host
	// pattern: the caller's input, not the store, is at fault.
	ErrInvalid = errors.New("secret: invalid")
)

// Info describes a secret without its value.
type Info struct {
	Name             string
	Created, Updated time.Time
	// Hosts are the host patterns the secret may be sent to; empty means
	// the binding is left to policy alone.
	Hosts []string
}

// Store is the encrypted secret store: one file in its directory, each value
// sealed with AES-256-GCM under a key derived from the KeySource, with the
// tenant, name and host binding as additional data. Writers hold an flock on
// a lock file and replace the file atomically, so concurrent processes lose
// no update and a crash leaves the old or the new file, never a mix. Values
// are never written in clear text, not even to temporary files.
type Store struct {
	dir string
	// shared, when set, keeps the sealed records instead of the file
	// (OpenShared); dir is unused then.
	shared store.Secrets
	src    KeySource

	mu sync.Mutex
	// keys is guarded by mu: derived from src on first use.
	keys *storeKeys
}

type storeKeys struct {
	aead  cipher.AEAD
	check []byte
}

// Open returns the store kept in dir (created with mode 0700 if missing),
// sealed with the key from key. The key is fetched on first need, so
// listing and deleting work without it.
func Open(dir string, key KeySource) (*Store, error) {
	if key == nil {
		return nil, errors.New("secret: open store: no key source")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("secret: create store directory: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return nil, fmt.Errorf("secret: open store: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("secret: open store: %s is not a directory", dir)
	}
	// Why: whoever can write the directory can swap the store or key file.
	if st.Mode().Perm()&0o022 != 0 {
		return nil, fmt.Errorf("secret: open store: directory %s has mode %04o: it must not be writable by group or other", dir, st.Mode().Perm())
	}
	return &Store{dir: dir, src: key}, nil
}

// ValidName reports whether name may name a secret or a tenant: 1 to 128
// characters from [a-zA-Z0-9_.-], starting with a letter or digit.
func ValidName(name string) error {
	if name == "" || len(name) > 128 {
		return fmt.Errorf("%w name %q: want 1 to 128 characters", ErrInvalid, truncate(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		alnum := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
		if i == 0 && !alnum {
			return fmt.Errorf("%w name %q: must start with a letter or digit", ErrInvalid, truncate(name))
		}
		if !alnum && c != '_' && c != '.' && c != '-' {
			return fmt.Errorf("%w name %q: only letters, digits, '_', '.' and '-' are allowed", ErrInvalid, truncate(name))
		}
	}
	return nil
}

func truncate(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// NormalizeHosts validates host patterns for a secret's binding and returns
// them normalized (hostname.Pattern), sorted and deduplicated. A pattern is
// an exact name, "*.suffix", or an IP literal.
func NormalizeHosts(hosts []string) ([]string, error) {
	var out []string
	var errs []error
	for _, h := range hosts {
		n, err := normalizeHost(h)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, n)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// normalizeHost checks one pattern of a binding in the dialect the policy
// and the proxy use (hostname.Pattern), so that a binding names exactly the
// hosts a policy rule of the same spelling would.
func normalizeHost(h string) (string, error) {
	n, err := hostname.Pattern(h)
	if err != nil {
		return "", fmt.Errorf("%w host: %w", ErrInvalid, err)
	}
	return n, nil
}

// Set stores v as tenant's secret name, replacing any earlier value (its
// creation time is kept). hosts optionally binds it: if non-empty, the proxy
// may inject it only to these host patterns.
func (s *Store) Set(ctx context.Context, tenant, name string, v Value, hosts []string) error {
	if err := checkIDs(tenant, name); err != nil {
		return err
	}
	if v.Len() == 0 {
		return fmt.Errorf("secret: set %s: empty value", name)
	}
	if v.Len() > MaxValueSize {
		return fmt.Errorf("secret: set %s: value is %d bytes, more than %d", name, v.Len(), MaxValueSize)
	}
	hosts, err := NormalizeHosts(hosts)
	if err != nil {
		return err
	}
	keys, err := s.storeKeys(ctx)
	if err != nil {
		return err
	}
	if s.shared != nil {
		return s.setShared(ctx, tenant, name, v, hosts, keys)
	}
	return s.update(ctx, func(f *storeData) error {
		if err := f.checkKey(keys); err != nil {
			return err
		}
		f.KeyCheck = keys.check
		now := time.Now().UTC()
		rec := record{Tenant: tenant, Name: name, Hosts: hosts, Created: now, Updated: now}
		i := f.find(tenant, name)
		if i >= 0 {
			rec.Created = f.Secrets[i].Created
			if f.Secrets[i].Tenant != tenant {
				// A legacy record: it is replaced by one under tenant.
				f.Secrets = slices.Delete(f.Secrets, i, i+1)
				i = -1
			}
		}
		rec.Nonce = make([]byte, nonceSize)
		if _, err := rand.Read(rec.Nonce); err != nil {
			return fmt.Errorf("secret: set %s: nonce: %w", name, err)
		}
		rec.Ciphertext = keys.aead.Seal(nil, rec.Nonce, v.bytes(), additionalData(tenant, name, hosts))
		if i >= 0 {
			f.Secrets[i] = rec
		} else {
			f.Secrets = append(f.Secrets, rec)
		}
		return nil
	})
}

// Get returns tenant's secret name and its description; ErrNotFound if
// there is none, ErrWrongKey or ErrCorrupt if it cannot be opened.
func (s *Store) Get(ctx context.Context, tenant, name string) (Value, Info, error) {
	if err := checkIDs(tenant, name); err != nil {
		return Value{}, Info{}, err
	}
	if s.shared != nil {
		return s.getShared(ctx, tenant, name)
	}
	f, err := s.read(ctx)
	if err != nil {
		return Value{}, Info{}, err
	}
	i := f.find(tenant, name)
	if i < 0 {
		return Value{}, Info{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	keys, err := s.storeKeys(ctx)
	if err != nil {
		return Value{}, Info{}, err
	}
	if err := f.checkKey(keys); err != nil {
		return Value{}, Info{}, err
	}
	rec := f.Secrets[i]
	plain, err := keys.aead.Open(nil, rec.Nonce, rec.Ciphertext, additionalData(rec.Tenant, name, rec.Hosts))
	if err != nil {
		return Value{}, Info{}, fmt.Errorf("%w: %s: sealed value does not authenticate (tampered, moved from another name, tenant or host binding, or sealed with another key)", ErrCorrupt, name)
	}
	v := NewValue(plain)
	clear(plain)
	return v, rec.info(), nil
}

// List describes tenant's secrets, sorted by name. It needs no key.
func (s *Store) List(ctx context.Context, tenant string) ([]Info, error) {
	if err := ValidName(tenant); err != nil {
		return nil, fmt.Errorf("tenant: %w", err)
	}
	if s.shared != nil {
		return s.listShared(ctx, tenant)
	}
	f, err := s.read(ctx)
	if err != nil {
		return nil, err
	}
	var out []Info
	for i, r := range f.Secrets {
		if f.find(tenant, r.Name) == i {
			out = append(out, r.info())
		}
	}
	slices.SortFunc(out, func(a, b Info) int { return cmp.Compare(a.Name, b.Name) })
	return out, nil
}

// Delete removes tenant's secret name; ErrNotFound if there is none. It
// needs no key.
func (s *Store) Delete(ctx context.Context, tenant, name string) error {
	if err := checkIDs(tenant, name); err != nil {
		return err
	}
	if s.shared != nil {
		return s.deleteShared(ctx, tenant, name)
	}
	return s.update(ctx, func(f *storeData) error {
		i := f.find(tenant, name)
		if i < 0 {
			return fmt.Errorf("%w: %s", ErrNotFound, name)
		}
		f.Secrets = slices.Delete(f.Secrets, i, i+1)
		if i := f.find(tenant, name); i >= 0 {
			// A legacy record the deleted one shadowed.
			f.Secrets = slices.Delete(f.Secrets, i, i+1)
		}
		if len(f.Secrets) == 0 {
			// An empty store is bound to no key: a new key may start over.
			f.KeyCheck = nil
		}
		return nil
	})
}

func checkIDs(tenant, name string) error {
	if err := ValidName(tenant); err != nil {
		return fmt.Errorf("tenant: %w", err)
	}
	return ValidName(name)
}

// storeKeys derives the sealing key and the key check from the KeySource,
// once. Separate HKDF labels keep the key check from revealing anything
// about the sealing key.
func (s *Store) storeKeys(ctx context.Context) (*storeKeys, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.keys != nil {
		return s.keys, nil
	}
	master, err := s.src.Key(ctx)
	if err != nil {
		return nil, err
	}
	defer clear(master)
	if len(master) != KeySize {
		return nil, fmt.Errorf("secret: key is %d bytes, want %d", len(master), KeySize)
	}
	sealKey, err := hkdf.Key(sha256.New, master, nil, "airlock secret store v1 seal", KeySize)
	if err != nil {
		return nil, fmt.Errorf("secret: derive key: %w", err)
	}
	defer clear(sealKey)
	check, err := hkdf.Key(sha256.New, master, nil, "airlock secret store v1 key check", keyCheckSize)
	if err != nil {
		return nil, fmt.Errorf("secret: derive key check: %w", err)
	}
	block, err := aes.NewCipher(sealKey)
	if err != nil {
		return nil, fmt.Errorf("secret: cipher: %w", err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("secret: cipher: %w", err)
	}
	s.keys = &storeKeys{aead: aead, check: check}
	return s.keys, nil
}

// additionalData binds a sealed value to its tenant, name and host binding,
// each length-prefixed so no two bindings encode alike.
func additionalData(tenant, name string, hosts []string) []byte {
	b := []byte("airlock-secret-v1")
	field := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	field(tenant)
	field(name)
	b = binary.AppendUvarint(b, uint64(len(hosts)))
	for _, h := range hosts {
		field(h)
	}
	return b
}

// storeData is the on-disk format, version 1: JSON, byte fields in base64.
type storeData struct {
	Version  int      `json:"version"`
	KeyCheck []byte   `json:"key_check,omitempty"`
	Secrets  []record `json:"secrets"`
}

type record struct {
	Tenant     string    `json:"tenant"`
	Name       string    `json:"name"`
	Hosts      []string  `json:"hosts,omitempty"`
	Created    time.Time `json:"created"`
	Updated    time.Time `json:"updated"`
	Nonce      []byte    `json:"nonce"`
	Ciphertext []byte    `json:"ciphertext"`
}

func (r record) info() Info {
	return Info{Name: r.Name, Created: r.Created, Updated: r.Updated, Hosts: slices.Clone(r.Hosts)}
}

// find returns the index of tenant's secret name, or -1. The local
// tenant's secrets include those of legacyLocalTenant; its own record of
// a name comes before a legacy one.
func (f *storeData) find(tenant, name string) int {
	i := slices.IndexFunc(f.Secrets, func(r record) bool { return r.Tenant == tenant && r.Name == name })
	if i < 0 && tenant == event.LocalTenant {
		i = slices.IndexFunc(f.Secrets, func(r record) bool { return r.Tenant == legacyLocalTenant && r.Name == name })
	}
	return i
}

func (f *storeData) checkKey(k *storeKeys) error {
	if f.KeyCheck != nil && subtle.ConstantTimeCompare(f.KeyCheck, k.check) != 1 {
		return fmt.Errorf("%w (its key check does not match the key given)", ErrWrongKey)
	}
	return nil
}

// decodeStore parses and validates a store file. It never panics on bad
// input; every rejection wraps ErrCorrupt.
func decodeStore(b []byte) (*storeData, error) {
	bad := func(format string, a ...any) (*storeData, error) {
		return nil, fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, a...)...)
	}
	if len(b) > maxStoreBytes {
		return bad("file larger than %d bytes", maxStoreBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f storeData
	if err := dec.Decode(&f); err != nil {
		return bad("%v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("data after the JSON object")
	}
	if f.Version != storeVersion {
		return bad("version %d, this airlock reads version %d", f.Version, storeVersion)
	}
	if f.KeyCheck != nil && len(f.KeyCheck) != keyCheckSize {
		return bad("key check is %d bytes, want %d", len(f.KeyCheck), keyCheckSize)
	}
	seen := make(map[[2]string]bool, len(f.Secrets))
	for i, r := range f.Secrets {
		if err := checkIDs(r.Tenant, r.Name); err != nil {
			return bad("secrets[%d]: %v", i, err)
		}
		k := [2]string{r.Tenant, r.Name}
		if seen[k] {
			return bad("secrets[%d]: duplicate %s/%s", i, r.Tenant, r.Name)
		}
		seen[k] = true
		// Set stores bindings in hostname.Pattern form. Reading asks less:
		// a pattern an older airlock accepted and the shared dialect now
		// refuses ('_' in a label, say) could never match a normalized
		// host, so it is inert, and need not make every secret unreadable.
		// The seal's additional data covers the hosts: an edited binding
		// fails Get.
		if !slices.IsSorted(r.Hosts) || len(slices.Compact(slices.Clone(r.Hosts))) != len(r.Hosts) || slices.Contains(r.Hosts, "") {
			return bad("secrets[%d]: hosts not sorted, unique and non-empty", i)
		}
		if len(r.Nonce) != nonceSize {
			return bad("secrets[%d]: nonce is %d bytes, want %d", i, len(r.Nonce), nonceSize)
		}
		if n := len(r.Ciphertext); n <= 16 || n > MaxValueSize+16 {
			return bad("secrets[%d]: ciphertext length %d out of range", i, n)
		}
	}
	if len(f.Secrets) > 0 && f.KeyCheck == nil {
		return bad("secrets without a key check")
	}
	return &f, nil
}

func encodeStore(f *storeData) ([]byte, error) {
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("secret: encode store: %w", err)
	}
	return append(b, '\n'), nil
}

// read returns the store's content under a shared lock.
func (s *Store) read(ctx context.Context) (*storeData, error) {
	unlock, err := s.lock(ctx, unix.LOCK_SH)
	if err != nil {
		return nil, err
	}
	defer unlock()
	return s.readLocked()
}

// update applies fn to the store's content and writes the result, all under
// an exclusive lock. Nothing is written if fn fails.
func (s *Store) update(ctx context.Context, fn func(*storeData) error) error {
	unlock, err := s.lock(ctx, unix.LOCK_EX)
	if err != nil {
		return err
	}
	defer unlock()
	f, err := s.readLocked()
	if err != nil {
		return err
	}
	if err := fn(f); err != nil {
		return err
	}
	return s.writeLocked(f)
}

// Preconditions: the lock is held.
func (s *Store) readLocked() (*storeData, error) {
	path := filepath.Join(s.dir, storeFile)
	fh, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if errors.Is(err, fs.ErrNotExist) {
		return &storeData{Version: storeVersion}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("secret: open store: %w", err)
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxStoreBytes+1))
	if err != nil {
		return nil, fmt.Errorf("secret: read store: %w", err)
	}
	f, err := decodeStore(b)
	if err != nil {
		return nil, fmt.Errorf("secret: read %s: %w", path, err)
	}
	return f, nil
}

// writeLocked replaces the store file atomically: a temporary file in the
// same directory, fsync, rename, fsync of the directory.
// Preconditions: the exclusive lock is held.
func (s *Store) writeLocked(f *storeData) error {
	b, err := encodeStore(f)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(s.dir, ".secrets-*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("secret: write store: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := tmp.Write(b); err != nil {
		return fmt.Errorf("secret: write store: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("secret: sync store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secret: write store: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, storeFile)); err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("secret: replace store: %w", err)
	}
	committed = true
	return syncDir(s.dir)
}

// lock takes an flock on the store's lock file, polling so that ctx can
// cancel the wait.
func (s *Store) lock(ctx context.Context, how int) (unlock func(), err error) {
	fh, err := os.OpenFile(filepath.Join(s.dir, lockFile), os.O_RDWR|os.O_CREATE|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("secret: open lock: %w", err)
	}
	wait := time.Millisecond
	for {
		err := unix.Flock(int(fh.Fd()), how|unix.LOCK_NB)
		if err == nil {
			return func() { fh.Close() }, nil // closing releases the lock
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			fh.Close()
			return nil, fmt.Errorf("secret: lock store: %w", err)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			fh.Close()
			return nil, fmt.Errorf("secret: lock store: %w", ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}
