package sandboxtest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// DeltaEntry is one entry of an "airlock delta v1" stream (see
// sandbox.Checkpointer), as archive/tar reads it.
type DeltaEntry struct {
	Name     string
	Type     byte
	Mode     int64
	UID, GID int
	ModTime  time.Time
	Linkname string
	Body     []byte
}

// whiteout says what e deletes: the path of a deleted entry, or the
// directory whose previous children are gone (opaque).
func (e DeltaEntry) whiteout() (path string, opaque, ok bool) {
	dir, base := "", e.Name
	if i := strings.LastIndexByte(e.Name, '/'); i >= 0 {
		dir, base = e.Name[:i+1], e.Name[i+1:]
	}
	if base == ".wh..wh..opq" {
		return strings.TrimSuffix(dir, "/"), true, true
	}
	if rest, ok := strings.CutPrefix(base, ".wh."); ok {
		return dir + rest, false, true
	}
	return "", false, false
}

// ReadDelta reads a delta stream with archive/tar and checks what the
// contract promises of every entry: its name's form, its type, that a full
// stream has no whiteouts and that entries come in walk order (a directory
// before its children, children in byte order of their names).
func ReadDelta(t testing.TB, b []byte, full bool) []DeltaEntry {
	t.Helper()
	var es []DeltaEntry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("read the delta stream with archive/tar: %v", err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatalf("read %q from the delta stream: %v", h.Name, err)
		}
		e := DeltaEntry{Name: h.Name, Type: h.Typeflag, Mode: h.Mode, UID: h.Uid, GID: h.Gid, ModTime: h.ModTime, Linkname: h.Linkname, Body: body}
		if err := checkDeltaName(e); err != nil {
			t.Fatalf("delta entry %q: %v", e.Name, err)
		}
		if _, _, wh := e.whiteout(); wh && full {
			t.Fatalf("full stream holds the whiteout %q", e.Name)
		}
		es = append(es, e)
	}
	for i := 1; i < len(es); i++ {
		if a, b := orderKey(es[i-1]), orderKey(es[i]); !walkLess(a, b) {
			t.Errorf("delta entries out of walk order: %q before %q", es[i-1].Name, es[i].Name)
		}
	}
	return es
}

func checkDeltaName(e DeltaEntry) error {
	name := e.Name
	if e.Type == tar.TypeDir {
		var ok bool
		if name, ok = strings.CutSuffix(name, "/"); !ok {
			return errors.New("a directory without a trailing slash")
		}
	} else if strings.HasSuffix(name, "/") {
		return errors.New("a trailing slash on a non-directory")
	}
	if name == "" || strings.ContainsRune(name, 0) {
		return errors.New("empty, or holds NUL")
	}
	for _, c := range strings.Split(name, "/") {
		if c == "" || c == "." || c == ".." {
			return fmt.Errorf("component %q", c)
		}
	}
	switch e.Type {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeFifo:
	case tar.TypeLink:
		if e.Linkname == "" || strings.HasPrefix(e.Linkname, "/") {
			return fmt.Errorf("hard link to %q", e.Linkname)
		}
	default:
		return fmt.Errorf("type %q", e.Type)
	}
	if _, _, wh := e.whiteout(); wh && (e.Type != tar.TypeReg || len(e.Body) != 0) {
		return errors.New("a whiteout that is not an empty regular file")
	}
	if e.Mode&^0o7777 != 0 {
		return fmt.Errorf("mode %o", e.Mode)
	}
	return nil
}

// orderKey is where e sits in walk order: a whiteout where what it
// deletes was, an opaque marker right after its directory.
func orderKey(e DeltaEntry) string {
	if p, opaque, ok := e.whiteout(); ok {
		if opaque {
			return p + "/"
		}
		return p
	}
	return strings.TrimSuffix(e.Name, "/")
}

// walkLess orders paths by components, each in byte order, a directory
// before what is below it.
func walkLess(a, b string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		x, y := a[i], b[i]
		if x == y {
			continue
		}
		if x == '/' {
			return true
		}
		if y == '/' {
			return false
		}
		return x < y
	}
	return len(a) < len(b)
}

// ApplyDelta applies es to the tree at dir as an applier of the contract
// does: whiteouts delete, an entry replaces what is at its path (a
// directory over a directory keeps its children), and times, modes and
// owners are set as the entries say (owners only as root). A directory the
// stream does not name keeps its modification time, as it did in the
// sandbox.
func ApplyDelta(t testing.TB, dir string, es []DeltaEntry) {
	t.Helper()
	before := map[string]time.Time{}
	if err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		before[p] = fi.ModTime()
		return nil
	}); err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	dirTimes := map[string]time.Time{}
	for _, e := range es {
		if err := applyEntry(dir, e, dirTimes); err != nil {
			t.Fatalf("apply delta entry %q: %v", e.Name, err)
		}
	}
	for p, mt := range before {
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
			if _, named := dirTimes[p]; !named {
				dirTimes[p] = mt
			}
		}
	}
	for p, mt := range dirTimes {
		if err := os.Chtimes(p, mt, mt); err != nil {
			t.Fatalf("set the time of %s: %v", p, err)
		}
	}
}

func applyEntry(dir string, e DeltaEntry, dirTimes map[string]time.Time) error {
	if p, opaque, ok := e.whiteout(); ok {
		target := filepath.Join(dir, p)
		if !opaque {
			return os.RemoveAll(target)
		}
		ents, err := os.ReadDir(target)
		if err != nil {
			return err
		}
		for _, de := range ents {
			if err := os.RemoveAll(filepath.Join(target, de.Name())); err != nil {
				return err
			}
		}
		return nil
	}
	p := filepath.Join(dir, strings.TrimSuffix(e.Name, "/"))
	fi, err := os.Lstat(p)
	exists := err == nil
	if exists && !(e.Type == tar.TypeDir && fi.IsDir()) {
		if err := os.RemoveAll(p); err != nil {
			return err
		}
	}
	switch e.Type {
	case tar.TypeDir:
		if !exists || !fi.IsDir() {
			if err := os.Mkdir(p, 0o700); err != nil {
				return err
			}
		}
		dirTimes[p] = e.ModTime
	case tar.TypeReg:
		if err := os.WriteFile(p, e.Body, 0o600); err != nil {
			return err
		}
	case tar.TypeSymlink:
		if err := os.Symlink(e.Linkname, p); err != nil {
			return err
		}
	case tar.TypeLink:
		// A hard link names a file of the tree; it must not leave it.
		target := filepath.Join(dir, e.Linkname)
		if !strings.HasPrefix(target, dir+"/") {
			return fmt.Errorf("hard link to %q leaves the tree", e.Linkname)
		}
		return os.Link(target, p)
	case tar.TypeFifo:
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return err
		}
	}
	if os.Geteuid() == 0 {
		if err := os.Lchown(p, e.UID, e.GID); err != nil {
			return err
		}
	}
	if e.Type != tar.TypeSymlink {
		// After chown, which clears set-id bits.
		if err := unix.Chmod(p, uint32(e.Mode&0o7777)); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{unix.NsecToTimespec(e.ModTime.UnixNano()), unix.NsecToTimespec(e.ModTime.UnixNano())}
	return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// TreeEntry describes one entry of a tree, for comparing a sandbox's
// /workspace with a tree on the host.
type TreeEntry struct {
	Type  byte   // 'f', 'd', 'l', 'p' (find's %y)
	Perm  uint32 // permission, set-id and sticky bits
	UID   int
	GID   int
	Size  int64 // regular files
	MTime int64 // ns since the epoch
	Link  string
	Hash  string // regular files: sha256 of the content
	Links int    // regular files: the number of names
	// Group is, for a regular file with other names, the first of its
	// names in byte order: equal groups, equal hard links. It is "?" when
	// inode numbers do not tell (see groups).
	Group string
}

// SandboxTree describes /workspace inside sb with find and sha256sum, run
// in the sandbox: a description independent of the checkpoint code.
// Sockets and device nodes are left out, as checkpoints leave them.
func SandboxTree(t testing.TB, sb sandbox.Sandbox) map[string]TreeEntry {
	t.Helper()
	out, errOut, r := runCmdTB(t, sb, `cd /workspace && find . -mindepth 1 \( -type f -o -type d -o -type l -o -type p \) -printf '%P\0%y %m %U %G %s %T@ %i %n\0%l\0'`)
	if r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
		t.Fatalf("find in the sandbox: %+v: %s", r, errOut)
	}
	tree := map[string]TreeEntry{}
	inodes := map[string][]string{}
	fields := strings.Split(out, "\x00")
	for i := 0; i+2 < len(fields); i += 3 {
		name, meta, link := fields[i], strings.Fields(fields[i+1]), fields[i+2]
		if len(meta) != 8 {
			t.Fatalf("find: %q: metadata %q", name, fields[i+1])
		}
		var e TreeEntry
		e.Type = meta[0][0]
		perm, err1 := strconv.ParseUint(meta[1], 8, 32)
		uid, err2 := strconv.Atoi(meta[2])
		gid, err3 := strconv.Atoi(meta[3])
		size, err4 := strconv.ParseInt(meta[4], 10, 64)
		mtime, err5 := parseFindTime(meta[5])
		nlink, err6 := strconv.Atoi(meta[7])
		if err := errors.Join(err1, err2, err3, err4, err5, err6); err != nil {
			t.Fatalf("find: %q: %v", name, err)
		}
		e.Perm, e.UID, e.GID, e.MTime, e.Link = uint32(perm), uid, gid, mtime, link
		if e.Type == 'f' {
			e.Size, e.Links = size, nlink
			if nlink > 1 {
				inodes[meta[6]] = append(inodes[meta[6]], name)
			}
		}
		tree[name] = e
	}
	groups(tree, inodes)
	hashes, errOut, r := runCmdTB(t, sb, `cd /workspace && find . -mindepth 1 -type f -printf '%P\0' | xargs -0 -r sha256sum -z --`)
	if r.Outcome != sandbox.OutcomeExited || r.ExitCode != 0 {
		t.Fatalf("sha256sum in the sandbox: %+v: %s", r, errOut)
	}
	for _, line := range strings.Split(hashes, "\x00") {
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, "  ")
		e, found := tree[name]
		if !ok || !found {
			t.Fatalf("sha256sum: %q", line)
		}
		e.Hash = sum
		tree[name] = e
	}
	return tree
}

// parseFindTime parses find's %T@: whole seconds (rounded down, so
// negative before the epoch) and a fraction that counts up from them.
func parseFindTime(s string) (int64, error) {
	sec, frac, _ := strings.Cut(s, ".")
	n, err := strconv.ParseInt(sec, 10, 64)
	if err != nil {
		return 0, err
	}
	ns, err := strconv.ParseInt((frac + "000000000")[:9], 10, 64)
	if err != nil {
		return 0, err
	}
	return n*1e9 + ns, nil
}

// groups sets Group of every name of a file with several. Where the
// names of an inode number are fewer than its link count, the number does
// not tell which names are one file (overlayfs reports, for a file copied
// up while it had one name, the lower file's inode, and for its later
// names the upper one's; for a file of the lower layer, the lower file's
// link count, names outside the workspace included), and Group is "?":
// then neither is compared.
func groups(tree map[string]TreeEntry, inodes map[string][]string) {
	for _, names := range inodes {
		first := slices.Min(names)
		if len(names) != tree[first].Links {
			first = "?"
		}
		for _, n := range names {
			e := tree[n]
			e.Group = first
			tree[n] = e
		}
	}
}

// HostTree describes the tree at dir as SandboxTree describes a sandbox's.
func HostTree(t testing.TB, dir string) map[string]TreeEntry {
	t.Helper()
	tree := map[string]TreeEntry{}
	inodes := map[string][]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st := fi.Sys().(*syscall.Stat_t)
		name, _ := filepath.Rel(dir, p)
		e := TreeEntry{Perm: st.Mode & 0o7777, UID: int(st.Uid), GID: int(st.Gid), MTime: st.Mtim.Nano()}
		switch st.Mode & syscall.S_IFMT {
		case syscall.S_IFREG:
			e.Type, e.Size, e.Links = 'f', st.Size, int(st.Nlink)
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			sum := sha256.Sum256(b)
			e.Hash = hex.EncodeToString(sum[:])
			if st.Nlink > 1 {
				ino := strconv.FormatUint(st.Ino, 10)
				inodes[ino] = append(inodes[ino], name)
			}
		case syscall.S_IFDIR:
			e.Type = 'd'
		case syscall.S_IFLNK:
			e.Type = 'l'
			if e.Link, err = os.Readlink(p); err != nil {
				return err
			}
		case syscall.S_IFIFO:
			e.Type = 'p'
		default:
			return nil
		}
		tree[name] = e
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	groups(tree, inodes)
	return tree
}

// CompareTrees fails t unless /workspace in sb and the tree at dir hold
// the same entries with the same type, content, permissions, owners,
// modification times (to the nanosecond), symlink targets and hard links.
// Symlinks' own times are compared too. Owners are compared when the test
// runs as root, which ApplyDelta needs to set them. what says which step
// this is.
func CompareTrees(t testing.TB, what string, sb sandbox.Sandbox, dir string) {
	t.Helper()
	want, got := SandboxTree(t, sb), HostTree(t, dir)
	if os.Geteuid() != 0 {
		for _, tree := range []map[string]TreeEntry{want, got} {
			for name, e := range tree {
				e.UID, e.GID = 0, 0
				tree[name] = e
			}
		}
	}
	var diffs []string
	for name, w := range want {
		g, ok := got[name]
		if w.Group == "?" {
			g.Group, g.Links = "?", w.Links
		}
		switch {
		case !ok:
			diffs = append(diffs, fmt.Sprintf("%q: missing (sandbox: %+v)", name, w))
		case g != w:
			diffs = append(diffs, fmt.Sprintf("%q: applied %+v, sandbox %+v", name, g, w))
		}
	}
	for name, g := range got {
		if _, ok := want[name]; !ok {
			diffs = append(diffs, fmt.Sprintf("%q: not in the sandbox (applied: %+v)", name, g))
		}
	}
	if len(diffs) > 0 {
		slices.Sort(diffs)
		if len(diffs) > 20 {
			diffs = append(diffs[:20], fmt.Sprintf("... and %d more", len(diffs)-20))
		}
		t.Errorf("%s: the applied checkpoints differ from the sandbox's /workspace (%d entries there):\n%s", what, len(want), strings.Join(diffs, "\n"))
	}
}

// runCmdTB runs a shell script in sb for helpers that take a testing.TB.
func runCmdTB(t testing.TB, sb sandbox.Sandbox, script string) (stdout, stderr string, r sandbox.Result) {
	t.Helper()
	var out, errb SyncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"sh", "-c", script}, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("Run(%q) = %v", script, err)
	}
	return out.String(), errb.String(), r
}
