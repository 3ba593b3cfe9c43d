package secret

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// KeySize is the length of a store key in bytes (AES-256).
const KeySize = 32

// KeySource supplies the 32-byte key that seals a Store. KeyFile reads it
// from a local file; a KMS client can implement it later. Key may be called
// more than once and must return the same key each time.
type KeySource interface {
	Key(ctx context.Context) ([]byte, error)
}

// KeyFile returns a KeySource that reads the key from path, creating a
// random key there with mode 0600 on first use. It refuses a key file that
// is not a regular file, is owned by another user, or is readable or
// writable by group or other. The file holds 32 raw bytes, 64 hex digits or
// the standard base64 of 32 bytes (what KeyFile writes).
func KeyFile(path string) KeySource { return keyFile{path: path} }

type keyFile struct{ path string }

// Key reads the key, creating it first if the file does not exist.
func (k keyFile) Key(ctx context.Context) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key, err := readKeyFile(k.path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := createKeyFile(k.path); err != nil {
			return nil, err
		}
		key, err = readKeyFile(k.path)
	}
	return key, err
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ELOOP) {
			return nil, fmt.Errorf("secret: key file %s is a symbolic link: refusing it", path)
		}
		return nil, fmt.Errorf("secret: open key file: %w", err)
	}
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("secret: stat key file %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("secret: key file %s is not a regular file", path)
	}
	if err := keyFileOwner(path, st.Mode, st.Uid, st.Gid, uint32(os.Geteuid()), inGroup); err != nil {
		return nil, err
	}
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("secret: read key file %s: %w", path, err)
	}
	key, ok := parseKey(b)
	clear(b)
	if !ok {
		// Never echo the file's content: it may be a key in another format.
		return nil, fmt.Errorf("secret: key file %s: want %d raw bytes, %d hex digits or base64 of %d bytes", path, KeySize, 2*KeySize, KeySize)
	}
	return key, nil
}

// parseKey accepts 32 raw bytes, 64 hex digits or standard base64 of 32
// bytes, each optionally followed by white space.
func parseKey(b []byte) ([]byte, bool) {
	if len(b) == KeySize {
		return append([]byte(nil), b...), true
	}
	t := bytes.TrimRight(b, " \t\r\n")
	if len(t) == KeySize {
		return append([]byte(nil), t...), true
	}
	if len(t) == 2*KeySize {
		key := make([]byte, KeySize)
		if _, err := hex.Decode(key, t); err == nil {
			return key, true
		}
	}
	if len(t) == base64.StdEncoding.EncodedLen(KeySize) {
		key := make([]byte, base64.StdEncoding.DecodedLen(len(t)))
		if n, err := base64.StdEncoding.Strict().Decode(key, t); err == nil && n == KeySize {
			return key[:n], true
		}
	}
	return nil, false
}

// createKeyFile writes a random key to a temporary file in the key's
// directory and links it into place, so a reader never sees a partial key
// and two processes racing to create it agree on one.
func createKeyFile(path string) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("secret: create key directory: %w", err)
	}
	key := make([]byte, KeySize)
	if _, err := rand.Read(key); err != nil {
		return fmt.Errorf("secret: generate key: %w", err)
	}
	text := base64.StdEncoding.AppendEncode(nil, key)
	text = append(text, '\n')
	clear(key)
	defer clear(text)
	tmp, err := os.CreateTemp(dir, ".key-*.tmp") // mode 0600
	if err != nil {
		return fmt.Errorf("secret: create key file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(text); err != nil {
		tmp.Close()
		return fmt.Errorf("secret: write key file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("secret: sync key file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("secret: write key file: %w", err)
	}
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("secret: install key file: %w", err)
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("secret: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("secret: sync %s: %w", dir, err)
	}
	return nil
}

// inGroup reports whether gid is this process's effective group or one of
// its supplementary groups.
func inGroup(gid uint32) bool {
	if uint32(os.Getegid()) == gid {
		return true
	}
	groups, err := os.Getgroups()
	if err != nil {
		return false
	}
	for _, g := range groups {
		if uint32(g) == gid {
			return true
		}
	}
	return false
}

// keyFileOwner refuses a key file of mode, owner uid and group gid for a
// process of effective uid euid. Why: a key others can read opens every
// secret; one others can write lets them substitute a key they know for
// the next secrets set. So the file must be the process's own, with no
// access for group or other; the one exception is how a Kubernetes
// Secret volume gives a non-root server its key: root's file, readable
// by the pod's fsGroup (mode 0440), a group the process is in, and
// writable by root alone.
func keyFileOwner(path string, mode, uid, gid, euid uint32, inGroup func(uint32) bool) error {
	secretVolume := uid == 0 && euid != 0 && mode&0o037 == 0 && inGroup(gid)
	if perm := mode & 0o077; perm != 0 && !secretVolume {
		return fmt.Errorf("secret: key file %s has mode %04o: it must not be accessible by group or other (chmod 600 %s)", path, mode&0o7777, path)
	}
	if uid != euid && !secretVolume {
		return fmt.Errorf("secret: key file %s is owned by uid %d, not by this user (uid %d)", path, uid, euid)
	}
	return nil
}
