package imagetest

import (
	"debug/elf"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// HostTools returns the files that put the host's commands names into an
// image laid out as BusyboxFiles': each binary in /usr/bin and the shared
// libraries it needs, found from its ELF headers (its interpreter and
// DT_NEEDED, recursively) where the host's loader finds them, at the same
// paths under /usr. It skips t when a command is missing.
func HostTools(t testing.TB, names ...string) []File {
	t.Helper()
	c := &closure{t: t, seen: map[string]bool{}}
	for _, n := range names {
		p := filepath.Join("/usr/bin", n)
		if _, err := os.Stat(p); err != nil {
			t.Skipf("%s is not installed on the host (%v): the test image takes it from there", p, err)
		}
		c.add(p, "usr/bin/"+n, 0o755)
	}
	return c.files
}

// Python returns HostTools' files for the host's python3 and its standard
// library (without its tests, caches and tool packages).
func Python(t testing.TB) []File {
	t.Helper()
	libs, _ := filepath.Glob("/usr/lib/python3.*/os.py")
	if len(libs) == 0 {
		t.Skip("the host has no python3 standard library in /usr/lib")
	}
	c := &closure{t: t, seen: map[string]bool{}}
	c.files = HostTools(t, "python3")
	for _, f := range c.files {
		c.seen[f.Name] = true
	}
	lib := filepath.Dir(libs[0])
	skip := map[string]bool{
		"__pycache__": true, "test": true, "tests": true, "idlelib": true, "tkinter": true, "turtledemo": true,
		"ensurepip": true, "lib2to3": true, "pydoc_data": true, "site-packages": true, "dist-packages": true,
	}
	err := filepath.WalkDir(lib, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && skip[d.Name()] {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		c.add(p, imagePath(p), 0o644)
		if strings.HasSuffix(p, ".so") {
			c.needs(p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c.files
}

// closure collects files and the libraries they need, once each.
type closure struct {
	t     testing.TB
	seen  map[string]bool // image paths added
	files []File
}

// add puts the host file p at image path dst, and what it needs.
func (c *closure) add(p, dst string, mode int64) {
	if c.seen[dst] {
		return
	}
	c.seen[dst] = true
	b, err := os.ReadFile(p)
	if err != nil {
		c.t.Fatal(err)
	}
	c.files = append(c.files, File{Name: dst, Mode: mode, Body: b})
	c.needs(p)
}

// needs adds the interpreter and the libraries the ELF file p names.
func (c *closure) needs(p string) {
	f, err := elf.Open(p)
	if err != nil {
		return // not an ELF file
	}
	defer f.Close()
	for _, prog := range f.Progs {
		if prog.Type == elf.PT_INTERP {
			b := make([]byte, prog.Filesz)
			if _, err := prog.ReadAt(b, 0); err == nil {
				interp := strings.TrimRight(string(b), "\x00")
				c.add(interp, imagePath(interp), 0o755)
			}
		}
	}
	libs, _ := f.ImportedLibraries()
	for _, l := range libs {
		if found := findLib(l); found != "" {
			c.add(found, imagePath(found), 0o644)
		}
	}
}

// findLib finds a library by its DT_NEEDED name where the host's loader
// looks by default.
func findLib(name string) string {
	multiarch := map[string]string{"amd64": "x86_64-linux-gnu", "arm64": "aarch64-linux-gnu"}[runtime.GOARCH]
	for _, d := range []string{"/lib/" + multiarch, "/usr/lib/" + multiarch, "/lib64", "/usr/lib64", "/lib", "/usr/lib"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// imagePath is where the host file p goes in a usr-merged image: /lib/x
// and /lib64/x under /usr, the rest where it is.
func imagePath(p string) string {
	rel := strings.TrimPrefix(filepath.Clean(p), "/")
	for _, top := range []string{"lib/", "lib64/", "bin/", "sbin/"} {
		if strings.HasPrefix(rel, top) {
			return "usr/" + rel
		}
	}
	return rel
}
