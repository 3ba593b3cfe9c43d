package executor

import (
	"archive/tar"
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// untarCommand is airlock-untar: the executor's binary called by that name
// (execproto.UntarHelper), run inside the sandbox as any command, with the
// caller's rights. It extracts the tar stream on stdin (gzipped with -z)
// into the directory of -C, as `tar -xp --no-same-owner
// --delay-directory-restore` does: modes and times kept, owners the
// caller's, a directory's mode and time set once its entries are in. Every
// path resolves beneath the directory and no link is followed on the way
// (os.Root); a name with "..", an absolute one, a whiteout or a device is
// refused. So a host that restores a workspace needs no tar in the image.
func untarCommand(args []string, stdin io.Reader, stderr io.Writer) int {
	dir, gz := "", false
	for i := 0; i < len(args); i++ {
		switch {
		case args[i] == "-z":
			gz = true
		case args[i] == "-C" && i+1 < len(args):
			i++
			dir = args[i]
		default:
			fmt.Fprintf(stderr, "airlock-untar: unknown argument %q\nusage: airlock-untar [-z] -C DIR < TAR\n", args[i])
			return 2
		}
	}
	if dir == "" {
		fmt.Fprintln(stderr, "usage: airlock-untar [-z] -C DIR < TAR")
		return 2
	}
	r := io.Reader(bufio.NewReaderSize(stdin, 256<<10))
	if gz {
		z, err := gzip.NewReader(r)
		if err != nil {
			fmt.Fprintf(stderr, "airlock-untar: gzip: %v\n", err)
			return 1
		}
		r = z
	}
	if err := untar(r, dir); err != nil {
		fmt.Fprintf(stderr, "airlock-untar: %v\n", err)
		return 1
	}
	return 0
}

// untar extracts the tar stream r beneath dir.
func untar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	type delayed struct {
		name  string
		mode  fs.FileMode
		mtime time.Time
	}
	var dirs []delayed
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return err
		}
		name, err := entryName(h.Name)
		if err != nil {
			return err
		}
		if name == "." {
			if h.Typeflag == tar.TypeDir {
				dirs = append(dirs, delayed{name, fs.FileMode(h.Mode) & fs.ModePerm, h.ModTime})
			}
			continue
		}
		if strings.HasPrefix(path.Base(name), ".wh.") {
			return fmt.Errorf("%s: a whiteout: not a whole tree", name)
		}
		if dir := path.Dir(name); dir != "." {
			if err := root.MkdirAll(dir, 0o700); err != nil {
				return err
			}
		}
		mode := fs.FileMode(h.Mode)&fs.ModePerm | tarSpecialBits(h.Mode)
		switch h.Typeflag {
		case tar.TypeDir:
			if fi, err := root.Lstat(name); err == nil && !fi.IsDir() {
				if err := root.Remove(name); err != nil {
					return err
				}
			}
			// Writable while its entries come; its own mode at the end.
			if err := root.Mkdir(name, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
				return err
			}
			dirs = append(dirs, delayed{name, mode, h.ModTime})
			continue
		case tar.TypeReg:
			if err := replace(root, name); err != nil {
				return err
			}
			f, err := root.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
		case tar.TypeSymlink:
			if err := replace(root, name); err != nil {
				return err
			}
			if err := root.Symlink(h.Linkname, name); err != nil {
				return err
			}
			continue // no mode or time on a link
		case tar.TypeLink:
			target, err := entryName(h.Linkname)
			if err != nil {
				return err
			}
			if err := replace(root, name); err != nil {
				return err
			}
			if err := root.Link(target, name); err != nil {
				return err
			}
			continue // the target's mode and time
		case tar.TypeFifo:
			if err := replace(root, name); err != nil {
				return err
			}
			if err := mkfifo(root, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: an entry of type %q is not extracted", name, h.Typeflag)
		}
		if err := root.Chmod(name, mode); err != nil {
			return err
		}
		if err := root.Chtimes(name, h.ModTime, h.ModTime); err != nil {
			return err
		}
	}
	// Deepest first, so a directory's time is set after its children's.
	for _, d := range slices.Backward(dirs) {
		if err := root.Chmod(d.name, d.mode); err != nil {
			return err
		}
		if err := root.Chtimes(d.name, d.mtime, d.mtime); err != nil {
			return err
		}
	}
	return nil
}

// entryName is a tar entry's name relative to the directory: "./" and a
// trailing "/" dropped; an absolute name, or one with "..", refused.
func entryName(n string) (string, error) {
	c := path.Clean(strings.TrimPrefix(n, "./"))
	if n == "" || path.IsAbs(n) || c == ".." || strings.HasPrefix(c, "../") || slices.Contains(strings.Split(n, "/"), "..") {
		return "", fmt.Errorf("entry %q: outside the directory", n)
	}
	return c, nil
}

// tarSpecialBits are the setuid, setgid and sticky bits of a tar mode, as
// fs.FileMode's (the caller's own files may carry them; no_new_privs keeps
// them from raising anything).
func tarSpecialBits(m int64) fs.FileMode {
	var out fs.FileMode
	if m&0o4000 != 0 {
		out |= fs.ModeSetuid
	}
	if m&0o2000 != 0 {
		out |= fs.ModeSetgid
	}
	if m&0o1000 != 0 {
		out |= fs.ModeSticky
	}
	return out
}

// replace removes what is at name unless it is a directory (an entry
// replaces a file, a link or a FIFO there; one over a directory fails).
func replace(root *os.Root, name string) error {
	fi, err := root.Lstat(name)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	case fi.IsDir():
		return fmt.Errorf("%s: a directory is there", name)
	}
	return root.Remove(name)
}

// mkfifo makes a FIFO at name, beneath root.
func mkfifo(root *os.Root, name string) error {
	d, err := root.Open(path.Dir(name))
	if err != nil {
		return err
	}
	defer d.Close()
	if err := unix.Mkfifoat(int(d.Fd()), path.Base(name), 0o600); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}
