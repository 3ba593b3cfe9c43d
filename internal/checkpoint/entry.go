package checkpoint

import (
	"errors"
	"fmt"
	"strings"

	"github.com/airlockrun/airlock/internal/store/chunk"
)

// Limits on what a delta stream and a manifest may hold. Beyond them a
// stream is refused and a manifest is corrupt: they bound the memory a
// checkpoint costs the host, whatever the sandbox sends.
const (
	// MaxName is the longest name, in bytes (Linux's PATH_MAX).
	MaxName = 4096
	// MaxComponent is the longest component of a name (NAME_MAX).
	MaxComponent = 255
	// MaxLink is the longest symlink target.
	MaxLink = 4096
	// MaxEntries is the most entries in a stream, a manifest or a tree.
	MaxEntries = 1 << 23
	// MaxFileSize is the largest file: 1 TiB.
	MaxFileSize = 1 << 40
	// MaxChain is the most checkpoints a chain may hold, the full one
	// included. The writer compacts before (compactDepth).
	MaxChain = 64
)

// Kind is what an Entry is.
type Kind uint8

// The kinds of entries. A tree holds File, Dir, Symlink, Hardlink and
// FIFO; a delta may also hold Whiteout and OpaqueDir.
const (
	// File is a regular file: Size bytes of content, in Slices.
	File Kind = iota + 1
	// Dir is a directory. Over a directory it updates the metadata and
	// keeps the children.
	Dir
	// Symlink is a symbolic link to Link, which is never followed.
	Symlink
	// Hardlink is a regular file that shares its content with the file
	// named Link. It carries that content (Size, Slices) itself, so it
	// stays whole if Link is later deleted or replaced.
	Hardlink
	// FIFO is a named pipe.
	FIFO
	// Whiteout deletes Name, whatever it is, with everything below it.
	Whiteout
	// OpaqueDir is a directory whose previous children are all gone: the
	// delta's entries below it are its new ones.
	OpaqueDir
)

var kindNames = [...]string{File: "file", Dir: "dir", Symlink: "symlink", Hardlink: "hardlink", FIFO: "fifo", Whiteout: "whiteout", OpaqueDir: "opaque-dir"}

// String returns the kind's name ("file", "opaque-dir").
func (k Kind) String() string {
	if k >= File && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Slice is a piece of a file's content: Length bytes from Offset of the
// chunk named Chunk. A file's content is its slices in order.
type Slice struct {
	Chunk  chunk.ID
	Offset uint32
	Length uint32
}

// Entry is one name of a tree, or one change of a delta.
type Entry struct {
	Kind Kind
	// Name is relative to /workspace: components separated by "/", none
	// empty, "." or "..", no NUL, no leading or trailing "/". Any other
	// bytes (newlines, invalid UTF-8) are kept as they are.
	Name string
	// Mode holds the permission bits and setuid, setgid and sticky
	// (07777).
	Mode uint32
	// UID and GID are numeric, as seen inside the sandbox.
	UID, GID uint32
	// MTime is the modification time in nanoseconds since 1970 UTC.
	MTime int64
	// Size is the length of the content (File and Hardlink), else 0.
	Size int64
	// Link is a Symlink's target (raw bytes) or the name of the file a
	// Hardlink links to; else "".
	Link string
	// Slices hold a File's or Hardlink's content, summing to Size.
	Slices []Slice
}

// hasContent reports whether e is a file with content slices.
func (e *Entry) hasContent() bool { return e.Kind == File || e.Kind == Hardlink }

// String describes e for an error message.
func (e *Entry) String() string { return fmt.Sprintf("%s %q", e.Kind, e.Name) }

// compareNames orders names the way a depth-first walk meets them: by
// component, bytewise. It is bytewise order with "/" below every other
// byte, so "a" < "a/b" < "a.txt", and a directory comes right before
// everything below it.
func compareNames(a, b string) int {
	n := min(len(a), len(b))
	for i := 0; i < n; i++ {
		ca, cb := a[i], b[i]
		if ca == cb {
			continue
		}
		switch {
		case ca == '/':
			return -1
		case cb == '/':
			return 1
		case ca < cb:
			return -1
		default:
			return 1
		}
	}
	switch {
	case len(a) < len(b):
		return -1
	case len(a) > len(b):
		return 1
	}
	return 0
}

// errName is what every malformed name wraps.
var errName = errors.New("malformed name")

// validName returns nil if name is a name an Entry may have.
func validName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty", errName)
	case len(name) > MaxName:
		return fmt.Errorf("%w: %d bytes, the most is %d", errName, len(name), MaxName)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("%w: holds a NUL byte", errName)
	case name[0] == '/':
		return fmt.Errorf("%w: absolute", errName)
	}
	for rest := name; ; {
		c, tail, more := strings.Cut(rest, "/")
		switch {
		case c == "":
			return fmt.Errorf("%w: an empty component", errName)
		case c == "." || c == "..":
			return fmt.Errorf("%w: a %q component", errName, c)
		case len(c) > MaxComponent:
			return fmt.Errorf("%w: a component of %d bytes, the most is %d", errName, len(c), MaxComponent)
		}
		if !more {
			return nil
		}
		rest = tail
	}
}

// validLink returns nil if target may be a symlink's.
func validLink(target string) error {
	switch {
	case target == "":
		return errors.New("empty symlink target")
	case len(target) > MaxLink:
		return fmt.Errorf("symlink target of %d bytes, the most is %d", len(target), MaxLink)
	case strings.IndexByte(target, 0) >= 0:
		return errors.New("symlink target holds a NUL byte")
	}
	return nil
}

// parentName returns the name of the directory holding name ("" for the
// workspace itself) and name's last component.
func parentName(name string) (dir, base string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return "", name
	}
	return name[:i], name[i+1:]
}

// under reports whether name is below dir (not dir itself).
func under(name, dir string) bool {
	return len(name) > len(dir) && name[len(dir)] == '/' && name[:len(dir)] == dir
}

// sameContent reports whether a and b hold the same slices (and so the
// same content, without reading it).
func sameContent(a, b *Entry) bool {
	if a.Size != b.Size || len(a.Slices) != len(b.Slices) {
		return false
	}
	for i := range a.Slices {
		if a.Slices[i] != b.Slices[i] {
			return false
		}
	}
	return true
}

// checkContent returns nil if e's slices are well formed and sum to its
// size.
func checkContent(e *Entry) error {
	if e.Size < 0 || e.Size > MaxFileSize {
		return fmt.Errorf("size %d, want 0 to %d", e.Size, int64(MaxFileSize))
	}
	var sum int64
	for i, s := range e.Slices {
		if s.Length == 0 || uint64(s.Offset)+uint64(s.Length) > chunk.MaxSize {
			return fmt.Errorf("slice %d: %d bytes at %d of a chunk of at most %d", i, s.Length, s.Offset, chunk.MaxSize)
		}
		sum += int64(s.Length)
	}
	if sum != e.Size {
		return fmt.Errorf("slices hold %d bytes, the size is %d", sum, e.Size)
	}
	return nil
}
