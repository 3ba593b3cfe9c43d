package executor

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"
)

// maxFingerprintEntries bounds the walk of fingerprint: a larger tree has
// no fingerprint (the host then assumes it changed).
const maxFingerprintEntries = 200_000

var errTooMany = errors.New("too many entries")

// fingerprint hashes the metadata of every entry of the tree at root
// (never following a symbolic link): path, type and mode, size, inode,
// modification and change times. A change to the tree changes the hash;
// ctime cannot be set from user space, so a change cannot hide behind a
// restored mtime. It returns "" when the tree cannot be walked.
func fingerprint(root string) string {
	h := sha256.New()
	var buf [8 * 7]byte
	n := 0
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if n++; n > maxFingerprintEntries {
			return errTooMany
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return errors.New("no stat")
		}
		binary.LittleEndian.PutUint64(buf[:8], uint64(len(p)))
		h.Write(buf[:8])
		h.Write([]byte(p))
		for i, v := range []uint64{
			uint64(st.Mode), uint64(st.Size), st.Ino,
			uint64(st.Mtim.Sec), uint64(st.Mtim.Nsec), uint64(st.Ctim.Sec), uint64(st.Ctim.Nsec),
		} {
			binary.LittleEndian.PutUint64(buf[8*i:], v)
		}
		h.Write(buf[:])
		return nil
	})
	if err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
