package execproto

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
)

// Special is one FIFO of the workspace as the sandbox sees it, as an
// OpSpecialFiles stream reports it.
type Special struct {
	// Path is relative to /workspace, without a leading or trailing slash.
	Path     string
	Mode     uint32 // the permission bits (st_mode & 07777)
	UID, GID uint32
	// Mtime and Ctime are the file's times, seconds and nanoseconds.
	MtimeSec, MtimeNsec int64
	CtimeSec, CtimeNsec int64
}

// specialFixed is the size of an encoded Special but its path: the path's
// length, mode, uid and gid (4 bytes each), then the four times (8 each).
const specialFixed = 4*4 + 4*8

// MaxSpecialPath bounds an encoded Special's path.
const MaxSpecialPath = 64 << 10

// AppendSpecial appends s's encoding to b: the length of the path (uint32,
// big-endian), mode, uid, gid, the mtime's seconds and nanoseconds, the
// ctime's, then the path's bytes. An OpSpecialFiles stream is a sequence of
// them, nothing between.
func AppendSpecial(b []byte, s Special) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(s.Path)))
	b = binary.BigEndian.AppendUint32(b, s.Mode)
	b = binary.BigEndian.AppendUint32(b, s.UID)
	b = binary.BigEndian.AppendUint32(b, s.GID)
	for _, t := range []int64{s.MtimeSec, s.MtimeNsec, s.CtimeSec, s.CtimeNsec} {
		b = binary.BigEndian.AppendUint64(b, uint64(t))
	}
	return append(b, s.Path...)
}

// ParseSpecials decodes an OpSpecialFiles stream. It refuses what no
// executor writes: a path that is empty, absolute, longer than
// MaxSpecialPath, holds NUL or a ".", ".." or empty component; a mode
// beyond the permission bits; nanoseconds outside 0 to 999999999; a
// truncated entry.
func ParseSpecials(b []byte) ([]Special, error) {
	var out []Special
	for len(b) > 0 {
		if len(b) < specialFixed {
			return nil, errors.New("special files: truncated entry")
		}
		n := binary.BigEndian.Uint32(b)
		s := Special{
			Mode: binary.BigEndian.Uint32(b[4:]),
			UID:  binary.BigEndian.Uint32(b[8:]),
			GID:  binary.BigEndian.Uint32(b[12:]),
		}
		t := b[16:specialFixed]
		s.MtimeSec = int64(binary.BigEndian.Uint64(t))
		s.MtimeNsec = int64(binary.BigEndian.Uint64(t[8:]))
		s.CtimeSec = int64(binary.BigEndian.Uint64(t[16:]))
		s.CtimeNsec = int64(binary.BigEndian.Uint64(t[24:]))
		b = b[specialFixed:]
		if n > MaxSpecialPath || int(n) > len(b) {
			return nil, fmt.Errorf("special files: path of %d bytes", n)
		}
		s.Path, b = string(b[:n]), b[n:]
		if err := checkSpecialPath(s.Path); err != nil {
			return nil, fmt.Errorf("special files: %q: %w", s.Path, err)
		}
		if s.Mode&^0o7777 != 0 {
			return nil, fmt.Errorf("special files: %q: mode %o", s.Path, s.Mode)
		}
		if s.MtimeNsec < 0 || s.MtimeNsec > 999999999 || s.CtimeNsec < 0 || s.CtimeNsec > 999999999 {
			return nil, fmt.Errorf("special files: %q: nanoseconds out of range", s.Path)
		}
		out = append(out, s)
	}
	return out, nil
}

func checkSpecialPath(p string) error {
	if p == "" || strings.IndexByte(p, 0) >= 0 {
		return errors.New("empty, or holds NUL")
	}
	for _, c := range strings.Split(p, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("component %q", c)
		}
	}
	return nil
}
