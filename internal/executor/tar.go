package executor

import (
	"errors"
	"fmt"
	"io"
	"strconv"
)

// tarWriter writes a POSIX (PAX) tar stream: ustar headers, with a PAX
// extended header in front of an entry whose path, link target, size or ids
// do not fit the ustar fields. It is write-only and small on purpose:
// archive/tar links os/user, which links the C library when cgo is on, and
// the executor must never link C (see startProxy).
type tarWriter struct {
	w       io.Writer
	remain  int64 // bytes of the current entry's body still to come
	pad     int64 // zero bytes owed after the body
	pending bool
}

// tarHeader is what export and checkpoint record of an entry.
type tarHeader struct {
	Name     string
	Linkname string
	Type     byte // tarReg, tarHardlink, tarSymlink, tarDir, tarFIFO
	Mode     int64
	UID, GID int
	Size     int64
	ModTime  int64 // seconds since the epoch
	// ModTimeNsec is the fraction of ModTime's second, 0 to 999999999;
	// when it is not 0 a PAX mtime record carries the time exactly.
	ModTimeNsec int64
}

const (
	tarReg      = '0'
	tarHardlink = '1'
	tarSymlink  = '2'
	tarDir      = '5'
	tarFIFO     = '6'
	tarPAX      = 'x'
	tarBlock    = 512
)

var errTarBody = errors.New("tar: entry body length does not match its header")

func (tw *tarWriter) WriteHeader(h tarHeader) error {
	if err := tw.finishEntry(); err != nil {
		return err
	}
	if h.Type != tarReg {
		h.Size = 0
	}
	if h.Size < 0 || h.Mode < 0 || h.UID < 0 || h.GID < 0 {
		return fmt.Errorf("tar: %q: negative field", h.Name)
	}
	if h.ModTimeNsec < 0 || h.ModTimeNsec >= 1e9 {
		return fmt.Errorf("tar: %q: nanoseconds out of range", h.Name)
	}
	var pax []byte
	name, link := h.Name, h.Linkname
	if len(name) > 100 || !ascii(name) {
		pax = paxRecord(pax, "path", name)
		name = asciiPrefix(name, 100)
	}
	if len(link) > 100 || !ascii(link) {
		pax = paxRecord(pax, "linkpath", link)
		link = asciiPrefix(link, 100)
	}
	size := h.Size
	if size > 0o77777777777 {
		pax = paxRecord(pax, "size", strconv.FormatInt(size, 10))
		size = 0
	}
	uid, gid := h.UID, h.GID
	if uid > 0o7777777 {
		pax = paxRecord(pax, "uid", strconv.Itoa(uid))
		uid = 0
	}
	if gid > 0o7777777 {
		pax = paxRecord(pax, "gid", strconv.Itoa(gid))
		gid = 0
	}
	mtime := h.ModTime
	if mtime < 0 || mtime > 0o77777777777 || h.ModTimeNsec != 0 {
		pax = paxRecord(pax, "mtime", paxTime(h.ModTime, h.ModTimeNsec))
		mtime = max(0, min(mtime, 0o77777777777))
	}
	if pax != nil {
		ph := tarBlockFor(asciiPrefix("PaxHeaders/"+name, 100), "", tarPAX, 0o644, 0, 0, int64(len(pax)), mtime)
		if _, err := tw.w.Write(ph[:]); err != nil {
			return err
		}
		if err := tw.writePadded(pax); err != nil {
			return err
		}
	}
	b := tarBlockFor(name, link, h.Type, h.Mode&0o7777, uid, gid, size, mtime)
	if _, err := tw.w.Write(b[:]); err != nil {
		return err
	}
	tw.remain = h.Size
	tw.pad = (tarBlock - h.Size%tarBlock) % tarBlock
	tw.pending = true
	return nil
}

// Write writes body bytes of the current entry.
func (tw *tarWriter) Write(p []byte) (int, error) {
	if int64(len(p)) > tw.remain {
		return 0, errTarBody
	}
	n, err := tw.w.Write(p)
	tw.remain -= int64(n)
	return n, err
}

func (tw *tarWriter) finishEntry() error {
	if !tw.pending {
		return nil
	}
	if tw.remain != 0 {
		return errTarBody
	}
	tw.pending = false
	var zero [tarBlock]byte
	_, err := tw.w.Write(zero[:tw.pad])
	return err
}

// Close ends the archive with two zero blocks.
func (tw *tarWriter) Close() error {
	if err := tw.finishEntry(); err != nil {
		return err
	}
	var zero [2 * tarBlock]byte
	_, err := tw.w.Write(zero[:])
	return err
}

func (tw *tarWriter) writePadded(p []byte) error {
	if _, err := tw.w.Write(p); err != nil {
		return err
	}
	var zero [tarBlock]byte
	_, err := tw.w.Write(zero[:(tarBlock-len(p)%tarBlock)%tarBlock])
	return err
}

func tarBlockFor(name, link string, typ byte, mode int64, uid, gid int, size, mtime int64) [tarBlock]byte {
	var b [tarBlock]byte
	copy(b[0:100], name)
	octal(b[100:108], mode)
	octal(b[108:116], int64(uid))
	octal(b[116:124], int64(gid))
	octal(b[124:136], size)
	octal(b[136:148], mtime)
	b[156] = typ
	copy(b[157:257], link)
	copy(b[257:265], "ustar\x0000")
	octal(b[329:337], 0)
	octal(b[337:345], 0)
	// The checksum is computed with its own field read as spaces.
	copy(b[148:156], "        ")
	var sum int64
	for _, c := range b {
		sum += int64(c)
	}
	octal(b[148:155], sum) // six digits and a NUL; the eighth byte stays a space
	return b
}

// octal writes v as zero-padded octal digits followed by a NUL.
func octal(dst []byte, v int64) {
	s := strconv.FormatInt(v, 8)
	n := len(dst) - 1
	for i := range n {
		dst[i] = '0'
	}
	copy(dst[n-len(s):n], s)
	dst[n] = 0
}

// paxTime formats sec+nsec/1e9 as a PAX time: decimal seconds, with a
// fraction when nsec is not 0. PAX writes a negative time as its magnitude
// with a minus sign ("-1.5" is 1.5 s before the epoch), as archive/tar
// reads it.
func paxTime(sec, nsec int64) string {
	neg := sec < 0
	if neg && nsec != 0 {
		sec, nsec = sec+1, 1e9-nsec
	}
	s := strconv.FormatInt(sec, 10)
	if neg && sec == 0 {
		s = "-0"
	}
	if nsec == 0 {
		return s
	}
	return fmt.Sprintf("%s.%09d", s, nsec)
}

// paxRecord appends "LEN key=value\n", where LEN counts the whole record.
func paxRecord(dst []byte, key, value string) []byte {
	body := len(key) + len(value) + 3 // ' ', '=', '\n'
	n := body + len(strconv.Itoa(body))
	if len(strconv.Itoa(n)) != len(strconv.Itoa(body)) {
		n++
	}
	return fmt.Appendf(dst, "%d %s=%s\n", n, key, value)
}

func ascii(s string) bool {
	for i := range len(s) {
		if s[i] >= 0x80 || s[i] == 0 {
			return false
		}
	}
	return true
}

// asciiPrefix is the ustar stand-in for a name PAX carries in full.
func asciiPrefix(s string, n int) string {
	b := make([]byte, 0, n)
	for i := 0; i < len(s) && len(b) < n; i++ {
		if s[i] >= 0x80 || s[i] == 0 {
			b = append(b, '_')
		} else {
			b = append(b, s[i])
		}
	}
	return string(b)
}
