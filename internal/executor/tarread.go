package executor

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// tarReader reads a tar stream: ustar and GNU headers, PAX extended headers
// (path, linkpath, size, mtime, uid, gid; global headers are read and
// ignored) and GNU long names and link targets. Like tarWriter it is small
// on purpose (archive/tar links os/user, and through it the C library).
// Its input is untrusted: every length is bounded before it is read, and
// a header that is not one fails with an error; what an entry's name or
// type means is for the caller to decide.
type tarReader struct {
	r      io.Reader
	remain int64 // body bytes of the current entry not read yet
	pad    int64 // padding after the body
	ended  bool
}

// Types the reader returns beside the writer's (tar.go).
const (
	tarRegA    = '\x00' // a regular file, pre-POSIX
	tarChar    = '3'
	tarBlockD  = '4'
	tarCont    = '7' // contiguous file: a regular file
	tarGlobal  = 'g'
	tarLongN   = 'L'
	tarLongL   = 'K'
	maxTarMeta = 1 << 20 // the most a PAX header or GNU long name may hold
)

// errTarFormat is the class of malformed-stream errors.
var errTarFormat = errors.New("tar: malformed stream")

// Next returns the next entry's header, skipping what is left of the
// current entry's body, or io.EOF after the end-of-archive blocks (or at a
// clean end of input between entries). A regular file's body is read with
// Read.
func (tr *tarReader) Next() (tarHeader, error) {
	if tr.ended {
		return tarHeader{}, io.EOF
	}
	if err := tr.skip(tr.remain + tr.pad); err != nil {
		return tarHeader{}, err
	}
	tr.remain, tr.pad = 0, 0
	var pax map[string]string
	var longName, longLink *string
	for {
		var b [tarBlock]byte
		if _, err := io.ReadFull(tr.r, b[:]); err != nil {
			if errors.Is(err, io.EOF) {
				tr.ended = true
				return tarHeader{}, io.EOF
			}
			return tarHeader{}, fmt.Errorf("%w: short header: %w", errTarFormat, err)
		}
		if b == [tarBlock]byte{} {
			// The end: a second zero block should follow; an input that
			// ends after one is taken as ended too, as GNU tar does.
			tr.ended = true
			return tarHeader{}, io.EOF
		}
		h, err := parseTarBlock(&b)
		if err != nil {
			return tarHeader{}, err
		}
		switch h.Type {
		case tarPAX, tarGlobal, tarLongN, tarLongL:
			if h.Size > maxTarMeta {
				return tarHeader{}, fmt.Errorf("%w: %c header of %d bytes (at most %d)", errTarFormat, h.Type, h.Size, maxTarMeta)
			}
			meta := make([]byte, h.Size)
			if _, err := io.ReadFull(tr.r, meta); err != nil {
				return tarHeader{}, fmt.Errorf("%w: short %c header: %w", errTarFormat, h.Type, err)
			}
			if err := tr.skip(padOf(h.Size)); err != nil {
				return tarHeader{}, err
			}
			switch h.Type {
			case tarPAX:
				if pax, err = parsePAX(meta); err != nil {
					return tarHeader{}, err
				}
			case tarGlobal:
				if _, err := parsePAX(meta); err != nil {
					return tarHeader{}, err
				}
			case tarLongN:
				s := string(bytes.TrimRight(meta, "\x00"))
				longName = &s
			case tarLongL:
				s := string(bytes.TrimRight(meta, "\x00"))
				longLink = &s
			}
			continue
		}
		if longName != nil {
			h.Name = *longName
		}
		if longLink != nil {
			h.Linkname = *longLink
		}
		if err := applyPAX(&h, pax); err != nil {
			return tarHeader{}, err
		}
		switch h.Type {
		case tarRegA, tarCont:
			h.Type = tarReg
		}
		// Links, directories and special files have no body whatever
		// their size field says (POSIX; as archive/tar reads them); an
		// unknown type's body is skipped.
		switch h.Type {
		case tarReg:
			tr.remain, tr.pad = h.Size, padOf(h.Size)
		case tarHardlink, tarSymlink, tarChar, tarBlockD, tarDir, tarFIFO:
			h.Size = 0
		default:
			tr.pad = h.Size + padOf(h.Size)
			h.Size = 0
		}
		return h, nil
	}
}

// Read reads the current entry's body.
func (tr *tarReader) Read(p []byte) (int, error) {
	if tr.remain <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > tr.remain {
		p = p[:tr.remain]
	}
	n, err := tr.r.Read(p)
	tr.remain -= int64(n)
	if errors.Is(err, io.EOF) && tr.remain > 0 {
		err = fmt.Errorf("%w: body ends %d bytes early", errTarFormat, tr.remain)
	}
	return n, err
}

// peeker is an input whose bytes can be used where they lie (the
// stream's inboxReader): peek returns the next ones (at least one, or an
// error; io.EOF at the end), consume drops what was used of them.
type peeker interface {
	peek() ([]byte, error)
	consume(n int)
}

// writeBody writes what is left of the current entry's body to w and
// returns the bytes written; a body the input ends inside of is written
// as far as it goes (the caller compares the count with the entry's
// size). From a peeker it writes the input's own bytes, a
// write per piece of the input (as a Read of it returns them), else it
// reads into buf.
func (tr *tarReader) writeBody(w io.Writer, buf []byte) (int64, error) {
	pk, ok := tr.r.(peeker)
	if !ok {
		return io.CopyBuffer(w, struct{ io.Reader }{tr}, buf)
	}
	var n int64
	for tr.remain > 0 {
		b, err := pk.peek()
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
		if int64(len(b)) > tr.remain {
			b = b[:tr.remain]
		}
		m, err := w.Write(b)
		pk.consume(m)
		tr.remain -= int64(m)
		n += int64(m)
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (tr *tarReader) skip(n int64) error {
	if n <= 0 {
		return nil
	}
	if _, err := io.CopyN(io.Discard, tr.r, n); err != nil {
		return fmt.Errorf("%w: stream ends inside an entry: %w", errTarFormat, err)
	}
	return nil
}

func padOf(size int64) int64 { return (tarBlock - size%tarBlock) % tarBlock }

// parseTarBlock decodes one header block, checksum first.
func parseTarBlock(b *[tarBlock]byte) (tarHeader, error) {
	want, err := tarNumber(b[148:156])
	if err != nil {
		return tarHeader{}, fmt.Errorf("%w: checksum field: %w", errTarFormat, err)
	}
	// The sum of the block with the checksum field read as spaces, as
	// unsigned bytes (POSIX) or signed ones (old Sun and GNU tars).
	var us, ss int64
	for i, c := range b {
		if i >= 148 && i < 156 {
			c = ' '
		}
		us += int64(c)
		ss += int64(int8(c))
	}
	if want != us && want != ss {
		return tarHeader{}, fmt.Errorf("%w: header checksum does not match", errTarFormat)
	}
	h := tarHeader{Type: b[156]}
	name := cstr(b[0:100])
	magic := string(b[257:263])
	if magic == "ustar\x00" && b[345] != 0 {
		// POSIX ustar: the prefix field holds the name's leading part.
		name = cstr(b[345:500]) + "/" + name
	}
	h.Name, h.Linkname = name, cstr(b[157:257])
	fields := []struct {
		dst *int64
		b   []byte
		msg string
	}{{&h.Mode, b[100:108], "mode"}, {&h.Size, b[124:136], "size"}, {&h.ModTime, b[136:148], "mtime"}}
	for _, f := range fields {
		if *f.dst, err = tarNumber(f.b); err != nil {
			return tarHeader{}, fmt.Errorf("%w: %s of %.100q: %w", errTarFormat, f.msg, h.Name, err)
		}
	}
	uid, err := tarNumber(b[108:116])
	if err != nil {
		return tarHeader{}, fmt.Errorf("%w: uid of %.100q: %w", errTarFormat, h.Name, err)
	}
	gid, err := tarNumber(b[116:124])
	if err != nil {
		return tarHeader{}, fmt.Errorf("%w: gid of %.100q: %w", errTarFormat, h.Name, err)
	}
	h.UID, h.GID = int(min(uid, math.MaxInt32)), int(min(gid, math.MaxInt32))
	if h.Size < 0 || h.Mode < 0 {
		return tarHeader{}, fmt.Errorf("%w: %.100q: negative size or mode", errTarFormat, h.Name)
	}
	return h, nil
}

// tarNumber reads a numeric field: octal digits (spaces and NULs around
// them), or GNU's base-256 form (the first byte's high bit set).
func tarNumber(f []byte) (int64, error) {
	if len(f) > 0 && f[0]&0x80 != 0 {
		if f[0]&0x40 != 0 {
			return 0, errors.New("negative base-256 number")
		}
		var v uint64
		for i, c := range f {
			if i == 0 {
				c &= 0x7f
			}
			if v > math.MaxInt64>>8 {
				return 0, errors.New("base-256 number overflows")
			}
			v = v<<8 | uint64(c)
		}
		return int64(v), nil
	}
	s := strings.Trim(string(f), " \x00")
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 8, 64)
	if err != nil {
		return 0, fmt.Errorf("not an octal number: %.20q", s)
	}
	return v, nil
}

// parsePAX reads PAX records: "LEN KEY=VALUE\n", LEN counting the whole
// record.
func parsePAX(b []byte) (map[string]string, error) {
	m := map[string]string{}
	for len(b) > 0 {
		sp := bytes.IndexByte(b, ' ')
		if sp <= 0 || sp > 20 {
			return nil, fmt.Errorf("%w: PAX record without a length", errTarFormat)
		}
		n, err := strconv.Atoi(string(b[:sp]))
		if err != nil || n <= sp+1 || n > len(b) || b[n-1] != '\n' {
			return nil, fmt.Errorf("%w: PAX record of a bad length", errTarFormat)
		}
		kv := b[sp+1 : n-1]
		eq := bytes.IndexByte(kv, '=')
		if eq <= 0 {
			return nil, fmt.Errorf("%w: PAX record without a key", errTarFormat)
		}
		m[string(kv[:eq])] = string(kv[eq+1:])
		b = b[n:]
	}
	return m, nil
}

// applyPAX lets an entry's PAX records override its ustar fields.
func applyPAX(h *tarHeader, pax map[string]string) error {
	for k, v := range pax {
		switch k {
		case "path":
			h.Name = v
		case "linkpath":
			h.Linkname = v
		case "size":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: PAX size %.20q of %.100q", errTarFormat, v, h.Name)
			}
			h.Size = n
		case "uid", "gid":
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: PAX %s %.20q of %.100q", errTarFormat, k, v, h.Name)
			}
			if k == "uid" {
				h.UID = int(min(n, math.MaxInt32))
			} else {
				h.GID = int(min(n, math.MaxInt32))
			}
		case "mtime":
			sec, frac, _ := strings.Cut(v, ".")
			s, err := strconv.ParseInt(sec, 10, 64)
			if err != nil {
				return fmt.Errorf("%w: PAX mtime %.30q of %.100q", errTarFormat, v, h.Name)
			}
			var ns int64
			if frac != "" {
				frac = (frac + "000000000")[:9]
				if ns, err = strconv.ParseInt(frac, 10, 64); err != nil || ns < 0 {
					return fmt.Errorf("%w: PAX mtime %.30q of %.100q", errTarFormat, v, h.Name)
				}
			}
			if strings.HasPrefix(sec, "-") && ns != 0 {
				// -1.5 is 1.5 s before the epoch: -2 s + 0.5 s.
				s, ns = s-1, 1e9-ns
			}
			h.ModTime, h.ModTimeNsec = s, ns
		case "GNU.sparse.major", "GNU.sparse.minor", "GNU.sparse.map", "GNU.sparse.size", "GNU.sparse.name":
			return fmt.Errorf("%w: %.100q is a GNU sparse file, which is not supported", errTarFormat, h.Name)
		}
	}
	return nil
}

// cstr is a NUL-terminated field's text.
func cstr(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}
