package sandbox

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"strings"
)

// A workspace tar (an upload a run's /workspace starts as) is unpacked
// inside the run's sandbox, so the host never writes what a client sent.
// It is still checked on the host before it is accepted: an entry that
// leaves the directory it is unpacked into makes the unpack fail in every
// sandbox the run would build, and a client is better told at once, with
// the entry's name, than by a run that cannot start. TarChecker is that
// check, the same for the API's uploads and for the tars the CLI makes.

// Bounds of a workspace tar, for TarLimits' zero fields.
const (
	DefaultTarEntries = 1 << 20
	DefaultTarBytes   = 16 << 30
	// maxTarName bounds an entry's name and a link's target (PATH_MAX).
	maxTarName = 4096
)

// TarLimits bound a workspace tar; zero fields take the defaults.
type TarLimits struct {
	// Entries bounds the number of entries (DefaultTarEntries).
	Entries int
	// Bytes bounds the sum of the regular files' sizes, what the tar
	// unpacks to (DefaultTarBytes).
	Bytes int64
}

// TarEntryError reports an entry of a workspace tar that cannot be
// unpacked into a workspace as it is.
type TarEntryError struct {
	// Name is the entry's name as the archive gives it.
	Name   string
	Reason string
}

func (e *TarEntryError) Error() string {
	name := e.Name
	if len(name) > 200 {
		name = name[:200] + "..."
	}
	return fmt.Sprintf("entry %q: %s", name, e.Reason)
}

// TarChecker checks the entries of a workspace tar, in the archive's
// order (Check). An entry is accepted when unpacking it into an empty
// directory keeps everything inside that directory:
//
//   - only regular files, directories, symbolic links and hard links;
//   - a name that is relative and has no ".." element;
//   - no entry below, or in place of, a symbolic link an earlier entry
//     made (the unpack would write through it), and no link in place of a
//     directory;
//   - a symbolic link's target relative, and inside the directory when
//     resolved from the link's own directory, through the links of
//     earlier entries; no link where an earlier link's target passes;
//   - a hard link's target a regular file of an earlier entry;
//   - the entries and the regular files' sizes within TarLimits.
//
// The zero TarChecker is not ready: use NewTarChecker.
type TarChecker struct {
	lim     TarLimits
	entries int
	bytes   int64
	// kinds holds what each clean name is so far: a symbolic link, a
	// regular file, or a directory (named by an entry or implied as the
	// parent of one).
	kinds map[string]byte
	// resolved holds where each symbolic link points: a clean name
	// inside the directory ("" for the directory itself).
	resolved map[string]string
	// through holds the names a link's target passes through: such a
	// name may not become a link later, which would send the target
	// elsewhere.
	through map[string]bool
}

// The kinds of TarChecker.kinds.
const (
	kindDir     = 'd'
	kindFile    = 'f'
	kindSymlink = 'l'
)

// NewTarChecker returns a checker of one archive's entries.
func NewTarChecker(l TarLimits) *TarChecker {
	if l.Entries <= 0 {
		l.Entries = DefaultTarEntries
	}
	if l.Bytes <= 0 {
		l.Bytes = DefaultTarBytes
	}
	return &TarChecker{lim: l, kinds: map[string]byte{}, resolved: map[string]string{}, through: map[string]bool{}}
}

// Check checks the archive's next entry; the error is a *TarEntryError.
func (c *TarChecker) Check(h *tar.Header) error {
	bad := func(format string, args ...any) error {
		return &TarEntryError{Name: h.Name, Reason: fmt.Sprintf(format, args...)}
	}
	if h.Typeflag == tar.TypeXGlobalHeader {
		return nil // attributes for the entries after it, not a file
	}
	if c.entries++; c.entries > c.lim.Entries {
		return bad("the archive has more than %d entries", c.lim.Entries)
	}
	name, err := tarName(h.Name)
	if err != nil {
		return bad("%v", err)
	}
	if name == "." {
		if h.Typeflag != tar.TypeDir {
			return bad("names the workspace itself")
		}
		return nil
	}
	// Every directory above the entry: none may be a link.
	for i := range len(name) {
		if name[i] != '/' {
			continue
		}
		switch c.kinds[name[:i]] {
		case kindSymlink:
			return bad("is below the symbolic link %q: unpacking it would write through the link", name[:i])
		case 0:
			c.kinds[name[:i]] = kindDir
		}
	}
	if c.kinds[name] == kindSymlink {
		return bad("replaces the symbolic link of an earlier entry")
	}
	switch h.Typeflag {
	case tar.TypeReg: // the reader reads old archives' TypeRegA as TypeReg
		if h.Size < 0 {
			return bad("a negative size")
		}
		if c.bytes += h.Size; c.bytes > c.lim.Bytes {
			return bad("the files add up to more than %d bytes", c.lim.Bytes)
		}
		c.kinds[name] = kindFile
	case tar.TypeDir:
		c.kinds[name] = kindDir
	case tar.TypeSymlink:
		if c.kinds[name] == kindDir {
			return bad("replaces a directory with a symbolic link")
		}
		if c.through[name] {
			return bad("is a symbolic link where the target of an earlier link passes")
		}
		to, err := c.symlinkTarget(name, h.Linkname)
		if err != nil {
			return bad("a symbolic link to %q: %v", clipName(h.Linkname), err)
		}
		c.kinds[name], c.resolved[name] = kindSymlink, to
	case tar.TypeLink:
		if c.kinds[name] == kindDir {
			return bad("replaces a directory with a hard link")
		}
		target, err := tarName(h.Linkname)
		if err != nil {
			return bad("a hard link to %q: %v", clipName(h.Linkname), err)
		}
		if c.kinds[target] != kindFile {
			return bad("a hard link to %q, which is not a regular file of an earlier entry", clipName(h.Linkname))
		}
		c.kinds[name] = kindFile
	default:
		return bad("a %s: a workspace holds only regular files, directories and links", tarType(h.Typeflag))
	}
	return nil
}

// symlinkTarget checks the target of symbolic link name and returns where
// it points, resolved through the links known so far.
func (c *TarChecker) symlinkTarget(name, target string) (string, error) {
	switch {
	case target == "":
		return "", errors.New("an empty target")
	case len(target) > maxTarName || strings.ContainsRune(target, 0):
		return "", errors.New("a target too long or with a NUL byte")
	case strings.HasPrefix(target, "/"):
		return "", errors.New("an absolute target: it would point outside the workspace")
	}
	var cur []string // where the walk is: a name, element by element
	if i := strings.LastIndexByte(name, '/'); i >= 0 {
		cur = strings.Split(name[:i], "/")
	}
	var elems []string
	for _, e := range strings.Split(target, "/") {
		if e != "" && e != "." {
			elems = append(elems, e)
		}
	}
	// passed are the names the walk goes on from: a link there later
	// would send it elsewhere. (The name it ends at may become a link:
	// a chain of links, each checked from where it is.)
	var passed []string
	for i, e := range elems {
		switch e {
		case "..":
			// Up from a name that is no link (links are replaced by
			// where they point as the walk reaches them), so up from
			// a directory, as the unpacked tree has it.
			if len(cur) == 0 {
				return "", errors.New("it points outside the workspace")
			}
			cur = cur[:len(cur)-1]
		default:
			cur = append(cur, e)
			p := strings.Join(cur, "/")
			if i < len(elems)-1 {
				passed = append(passed, p)
			}
			if c.kinds[p] == kindSymlink {
				cur = nil
				if to := c.resolved[p]; to != "" {
					cur = strings.Split(to, "/")
				}
			}
		}
	}
	for _, p := range passed {
		c.through[p] = true
	}
	return strings.Join(cur, "/"), nil
}

// tarName checks an entry's name (or a hard link's target) and returns it
// clean, "." for the directory itself.
func tarName(n string) (string, error) {
	switch {
	case n == "":
		return "", errors.New("an empty name")
	case len(n) > maxTarName || strings.ContainsRune(n, 0):
		return "", errors.New("a name too long or with a NUL byte")
	case strings.HasPrefix(n, "/"):
		return "", errors.New("an absolute name: it would be unpacked outside the workspace")
	}
	var parts []string
	for _, e := range strings.Split(n, "/") {
		switch e {
		case "", ".":
		case "..":
			return "", errors.New("a .. element: it would be unpacked outside the workspace")
		default:
			parts = append(parts, e)
		}
	}
	if len(parts) == 0 {
		return ".", nil
	}
	return strings.Join(parts, "/"), nil
}

func clipName(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// tarType names an entry type for a person.
func tarType(t byte) string {
	switch t {
	case tar.TypeChar:
		return "character device"
	case tar.TypeBlock:
		return "block device"
	case tar.TypeFifo:
		return "named pipe"
	case tar.TypeCont:
		return "contiguous file"
	case tar.TypeGNUSparse:
		return "sparse file"
	}
	return fmt.Sprintf("entry of type %q", t)
}

// CheckWorkspaceTar reads the tar stream r (not compressed) to its end and
// checks each entry with a TarChecker. The error is a *TarEntryError for
// an entry that cannot be unpacked into a workspace, or says why the
// stream is not a whole tar (cut short: tar would fail on it too).
func CheckWorkspaceTar(r io.Reader, l TarLimits) error {
	cr := &countReader{r: r}
	tr := tar.NewReader(cr)
	c := NewTarChecker(l)
	var end int64 // where the last entry's data ends, padding included
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			// The reader takes a stream that stops at a block boundary
			// for a whole one; tar wants the end-of-archive block.
			if cr.n < end+512 {
				return errors.New("read the tar: it ends before its end-of-archive block (cut short?)")
			}
			return nil
		}
		if err != nil {
			return fmt.Errorf("read the tar: %w", err)
		}
		if err := c.Check(h); err != nil {
			return err
		}
		end = cr.n
		if h.Typeflag == tar.TypeReg {
			end += (h.Size + 511) &^ 511
		}
	}
}

// countReader counts the bytes read through it.
type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
