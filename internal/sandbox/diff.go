package sandbox

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/pmezard/go-difflib/difflib"
)

// MaxDiffFile is the largest file WriteDiff compares line by line; larger
// files are reported as changed binaries.
const MaxDiffFile = 8 << 20

// WriteDiff writes a unified diff ("a/" is the source, "b/" the sandbox) of
// the tree in the tar stream against the host directory source. Source files
// are opened through os.Root, so a symlink in the source cannot make the host
// read outside it. The tar stream is untrusted: names are cleaned and checked,
// and sizes bounded. A top-level .git directory is left out on both sides:
// a patch is of the work tree, never of a repository's internals (which a
// plain `git status` rewrites).
func WriteDiff(w io.Writer, source string, tarStream io.Reader) error {
	var base baseline
	if source != "" {
		root, err := os.OpenRoot(source)
		if err != nil {
			return fmt.Errorf("diff: open source: %w", err)
		}
		defer root.Close()
		base = rootBaseline{root}
	}
	return writeDiff(w, base, tarStream)
}

// MaxDiffBase bounds the bytes of a tar WriteDiffTar keeps as its source.
const MaxDiffBase = 256 << 20

// WriteDiffTar is WriteDiff against the regular files of a tar stream
// (a workspace that started as an uploaded tar) instead of a directory.
// Both streams are untrusted alike; the source's files are kept in memory,
// MaxDiffBase bytes at most.
func WriteDiffTar(w io.Writer, sourceTar, tarStream io.Reader) error {
	base := tarBaseline{}
	tr := tar.NewReader(sourceTar)
	var total int64
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("diff: read source tar: %w", err)
		}
		name, ok := cleanName(h.Name)
		if !ok {
			return fmt.Errorf("diff: source tar has unsafe name %q", h.Name)
		}
		if h.Typeflag != tar.TypeReg || inGitDir(name) {
			continue
		}
		if total += min(h.Size, MaxDiffFile+1); total > MaxDiffBase {
			return fmt.Errorf("diff: source tar holds more than %d bytes", MaxDiffBase)
		}
		data, binary, err := readBounded(tr, h.Size)
		if err != nil {
			return fmt.Errorf("diff: source tar: %s: %w", name, err)
		}
		base[name] = tarFile{data, binary}
	}
	return writeDiff(w, base, tarStream)
}

// WriteFileDiff writes the unified diff of one regular file, name, from
// the oldSize bytes of from to the newSize bytes of to, as WriteDiff writes each
// file's: a nil reader is a file that does not exist on that side; a file
// over MaxDiffFile, or that is not UTF-8 text, is a changed binary. The
// caller knows the contents differ (a checkpoint's manifests say so).
func WriteFileDiff(w io.Writer, name string, from io.Reader, oldSize int64, to io.Reader, newSize int64) error {
	var oldData, newData []byte
	var oldBinary, newBinary bool
	var err error
	if from != nil {
		if oldData, oldBinary, err = readBounded(from, oldSize); err != nil {
			return fmt.Errorf("diff: %s: %w", name, err)
		}
	}
	if to != nil {
		if newData, newBinary, err = readBounded(to, newSize); err != nil {
			return fmt.Errorf("diff: %s: %w", name, err)
		}
	}
	return writeFileDiff(w, name, oldData, newData, from != nil, to != nil, oldBinary || newBinary)
}

// InGitDir reports whether the relative name is in a tree's top-level
// .git directory (or is it): patches leave the repository's internals out.
func InGitDir(name string) bool { return inGitDir(name) }

// baseline is what a diff compares the sandbox with.
type baseline interface {
	// read returns a regular file's bytes (nil when too large), whether
	// it is binary, and whether it exists.
	read(name string) ([]byte, bool, bool)
	// files lists every regular file.
	files() ([]string, error)
}

type rootBaseline struct{ root *os.Root }

func (b rootBaseline) read(name string) ([]byte, bool, bool) { return readSource(b.root, name) }

func (b rootBaseline) files() ([]string, error) {
	var out []string
	err := fs.WalkDir(b.root.FS(), ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err == nil && p == ".git" && d.IsDir():
			return fs.SkipDir
		case err == nil && p != "." && d.Type().IsRegular():
			out = append(out, p)
		}
		return nil
	})
	return out, err
}

type tarFile struct {
	data   []byte
	binary bool
}

type tarBaseline map[string]tarFile

func (b tarBaseline) read(name string) ([]byte, bool, bool) {
	f, ok := b[name]
	return f.data, f.binary, ok
}

func (b tarBaseline) files() ([]string, error) {
	out := make([]string, 0, len(b))
	for name := range b {
		out = append(out, name)
	}
	return out, nil
}

// inGitDir reports whether the cleaned relative name is in the tree's
// top-level .git directory (or is it).
func inGitDir(name string) bool { return name == ".git" || strings.HasPrefix(name, ".git/") }

// cleanName returns a tar entry's name relative to the tree, or false when
// it would leave it.
func cleanName(n string) (string, bool) {
	name := path.Clean(strings.TrimPrefix(strings.TrimSuffix(n, "/"), "./"))
	if name == "." || strings.HasPrefix(name, "../") || name == ".." || path.IsAbs(name) {
		return name, name == "."
	}
	return name, true
}

func writeDiff(w io.Writer, base baseline, tarStream io.Reader) error {
	seen := map[string]bool{}
	tr := tar.NewReader(tarStream)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("diff: read export: %w", err)
		}
		name := path.Clean(strings.TrimSuffix(h.Name, "/"))
		if name == "." || strings.HasPrefix(name, "../") || name == ".." || path.IsAbs(name) {
			return fmt.Errorf("diff: export has unsafe name %q", h.Name)
		}
		seen[name] = true
		if h.Typeflag != tar.TypeReg || inGitDir(name) {
			continue
		}
		newData, newBinary, err := readBounded(tr, h.Size)
		if err != nil {
			return fmt.Errorf("diff: %s: %w", name, err)
		}
		var oldData []byte
		var oldBinary, exists bool
		if base != nil {
			oldData, oldBinary, exists = base.read(name)
		}
		if exists && bytes.Equal(oldData, newData) {
			continue
		}
		if err := writeFileDiff(w, name, oldData, newData, exists, true, oldBinary || newBinary); err != nil {
			return err
		}
	}
	if base == nil {
		return nil
	}
	// Files in the source that are gone from the sandbox.
	all, err := base.files()
	if err != nil {
		return err
	}
	var removed []string
	for _, p := range all {
		if !seen[p] && !inGitDir(p) {
			removed = append(removed, p)
		}
	}
	slices.Sort(removed)
	for _, p := range removed {
		oldData, oldBinary, _ := base.read(p)
		if err := writeFileDiff(w, p, oldData, nil, true, false, oldBinary); err != nil {
			return err
		}
	}
	return nil
}

func readBounded(r io.Reader, size int64) ([]byte, bool, error) {
	if size > MaxDiffFile {
		_, err := io.Copy(io.Discard, r)
		return nil, true, err
	}
	b, err := io.ReadAll(io.LimitReader(r, MaxDiffFile+1))
	if err != nil {
		return nil, false, err
	}
	return b, isBinary(b), nil
}

func readSource(root *os.Root, name string) ([]byte, bool, bool) {
	if root == nil {
		return nil, false, false
	}
	f, err := root.Open(name)
	if err != nil {
		return nil, false, false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		return nil, false, false
	}
	b, bin, err := readBounded(f, fi.Size())
	if err != nil {
		return nil, false, false
	}
	return b, bin, true
}

func isBinary(b []byte) bool {
	return bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b)
}

func writeFileDiff(w io.Writer, name string, oldData, newData []byte, oldExists, newExists, binary bool) error {
	from, to := "a/"+name, "b/"+name
	hdr := fmt.Sprintf("diff --git a/%s b/%s\n", name, name)
	switch {
	case !oldExists:
		hdr += "new file mode 100644\n"
		from = "/dev/null"
	case !newExists:
		hdr += "deleted file mode 100644\n"
		to = "/dev/null"
	}
	if binary {
		_, err := fmt.Fprintf(w, "%sBinary files %s and %s differ\n", hdr, from, to)
		return err
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: difflib.SplitLines(string(oldData)), B: difflib.SplitLines(string(newData)),
		FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil {
		return err
	}
	if oldData == nil {
		text = strings.Replace(text, "@@ -1,0 ", "@@ -0,0 ", 1)
	}
	if newData == nil {
		text = strings.Replace(text, " +1,0 @@", " +0,0 @@", 1)
	}
	_, err = io.WriteString(w, hdr+text)
	return err
}
