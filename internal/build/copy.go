package build

import (
	"archive/tar"
	"bufio"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/image"
	"github.com/airlockrun/airlock/internal/sandbox"

	"github.com/airlockrun/airlock/internal/dockerfile"
)

// copy carries out COPY or ADD: a layer of files of the build context.
func (b *builder) copy(ctx context.Context, x dockerfile.Expander, in dockerfile.Instruction) error {
	var words []string
	if in.Exec {
		for _, a := range in.Argv {
			w, err := x.Word(a)
			if err != nil {
				return err
			}
			words = append(words, w)
		}
	} else {
		var err error
		if words, err = x.Words(in.Args); err != nil {
			return err
		}
	}
	if len(words) < 2 {
		return errors.New("needs a source and a destination")
	}
	srcs, dest := words[:len(words)-1], words[len(words)-1]
	if in.Cmd == "ADD" {
		for _, s := range srcs {
			if isRemote(s) {
				return fmt.Errorf("ADD %s: URLs and git repositories are not supported: fetch it in a RUN step, whose network the build policy decides", s)
			}
		}
	}
	own := owner{}
	if v, ok := in.Flags["chown"]; ok {
		v, err := x.Word(v)
		if err != nil {
			return err
		}
		if own, err = parseChown(v); err != nil {
			return err
		}
	}
	if v, ok := in.Flags["chmod"]; ok {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			return fmt.Errorf("--chmod=%s: want octal permission bits", v)
		}
		own.mode, own.setMode = int64(m), true
	}
	if !path.IsAbs(dest) {
		wd := b.cfg.WorkingDir
		if wd == "" {
			wd = "/"
		}
		trailing := strings.HasSuffix(dest, "/") || dest == "."
		dest = path.Join(wd, dest)
		if trailing {
			dest += "/"
		}
	}
	if from, ok := in.Flags["from"]; ok {
		return b.copyFrom(ctx, in, from, srcs, dest, words, own)
	}
	if b.req.Context == "" {
		return errors.New("no build context")
	}
	root, err := os.OpenRoot(b.req.Context)
	if err != nil {
		return fmt.Errorf("build context: %w", err)
	}
	defer root.Close()
	ign, err := loadIgnore(root)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp("", "airlock-copy-")
	if err != nil {
		return internal{err}
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	bw := bufio.NewWriter(tmp)
	lw := &layerWriter{ctx: ctx, root: root, ign: ign, tw: tar.NewWriter(bw), h: sha256.New(), own: own, isADD: in.Cmd == "ADD"}
	if err := lw.sources(srcs, dest); err != nil {
		return err
	}
	if err := lw.tw.Close(); err != nil {
		return internal{err}
	}
	if err := bw.Flush(); err != nil {
		return internal{err}
	}
	createdBy := in.Cmd + " " + strings.Join(words, " ")
	key := chain(b.key, strings.Join(append([]string{in.Cmd, fmt.Sprint(own)}, words...), "\x00")+"\x00"+hex.EncodeToString(lw.h.Sum(nil)))
	if e, ok := b.cached(key); ok {
		fmt.Fprintln(b.log, " cached")
		b.addStep(key, createdBy, e.Layer, true)
		return nil
	}
	return b.addLayerFile(ctx, tmp, key, createdBy)
}

// copyFrom carries out COPY --from: a layer of files of an earlier stage
// or of an image, read out of a sandbox of it (its root as its layers make
// it, whiteouts applied; nothing of it is trusted more than a RUN step's
// output). Sources are absolute paths in it (relative ones are taken from
// its /), without wildcards; files keep their modes, and are owned by
// --chown's ids or root, as docker's are. The step's key is the source's
// (a stage's key or an image's digest) and the instruction: a cached step
// makes no sandbox.
func (b *builder) copyFrom(ctx context.Context, in dockerfile.Instruction, from string, srcs []string, dest string, words []string, own owner) error {
	var src stage
	if st, ok := b.stage(from); ok {
		src = st
	} else {
		img, err := b.image(ctx, "COPY --from image", from)
		if err != nil {
			return err
		}
		src = stage{name: from, base: img.Digest, baseLayer: img.Layers, cfg: img.Config, key: "image " + img.Digest}
	}
	for _, s := range srcs {
		if strings.ContainsAny(s, "*?[") {
			return fmt.Errorf("source %s: wildcards in COPY --from are not supported: name the files or their directory", s)
		}
	}
	createdBy := in.Cmd + " --from=" + from + " " + strings.Join(words, " ")
	key := chain(b.key, strings.Join(append([]string{"COPY --from", src.key, fmt.Sprint(own)}, words...), "\x00"))
	if e, ok := b.cached(key); ok {
		fmt.Fprintln(b.log, " cached")
		b.addStep(key, createdBy, e.Layer, true)
		return nil
	}
	layers := src.layerInfos()
	if len(layers) == 0 {
		return fmt.Errorf("--from=%s: an empty image (FROM scratch with no files): nothing to copy", from)
	}
	dirs, err := b.o.Store.LayerDirs(ctx, layers)
	if err != nil {
		return internal{err}
	}
	// A writable root, so /tmp is the image's own; no step runs in it.
	spec := sandbox.Spec{WritableRoot: true, Limits: b.limits()}
	image.Root{Layers: dirs, Config: src.cfg}.Apply(&spec)
	spec.User = "root"
	sb, err := b.o.Backend.Create(ctx, spec)
	if err != nil {
		return internal{fmt.Errorf("create a sandbox of %s: %w", from, err)}
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = sb.Destroy(dctx)
	}()
	// Read as the image's root, whatever the files' owners.
	ctx = sandbox.WithFileUser(ctx, "root")
	tmp, err := os.CreateTemp("", "airlock-copy-")
	if err != nil {
		return internal{err}
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	bw := bufio.NewWriter(tmp)
	lw := &layerWriter{ctx: ctx, tw: tar.NewWriter(bw), h: sha256.New(), own: own}
	destDir := strings.HasSuffix(dest, "/") || len(srcs) > 1
	destRel := strings.TrimPrefix(path.Clean(dest), "/")
	for _, s := range srcs {
		p := path.Clean("/" + s)
		fi, err := sb.Stat(ctx, p)
		if err != nil {
			return fmt.Errorf("source %s: in %s: %w", s, from, err)
		}
		name := destRel // a directory's contents go into dest
		if !fi.Mode.IsDir() && destDir {
			name = path.Join(destRel, path.Base(p))
		}
		if err := lw.fromSandbox(ctx, sb, p, name, fi.Mode.IsDir()); err != nil {
			return fmt.Errorf("source %s: in %s: %w", s, from, err)
		}
	}
	if err := lw.tw.Close(); err != nil {
		return internal{err}
	}
	if err := bw.Flush(); err != nil {
		return internal{err}
	}
	return b.addLayerFile(ctx, tmp, key, createdBy)
}

// fromSandbox adds what the sandbox's export of p holds under name: a
// directory's entries below it, a file or link as it.
func (w *layerWriter) fromSandbox(ctx context.Context, sb sandbox.Sandbox, p, name string, dir bool) error {
	want := ""
	if !dir {
		want = path.Base(p)
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := sb.Export(ctx, p, pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	err := w.retar(tar.NewReader(pr), name, want)
	pr.CloseWithError(cmp.Or(err, io.ErrClosedPipe))
	if xerr := <-errc; err == nil && xerr != nil {
		err = xerr
	}
	return err
}

// retar copies the entries of tr under name: all of them, or (a file's
// export) the one named want as name itself.
func (w *layerWriter) retar(tr *tar.Reader, name, want string) error {
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := strings.TrimSuffix(h.Name, "/")
		if want != "" {
			if rel != want {
				continue
			}
			rel = ""
		}
		out := &tar.Header{Typeflag: h.Typeflag, Name: path.Join(name, rel), Mode: h.Mode, ModTime: h.ModTime, Linkname: h.Linkname}
		if w.own.setMode {
			out.Mode = w.own.mode
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out.Name += "/"
			err = w.header(out, nil)
		case tar.TypeSymlink:
			err = w.header(out, nil)
		case tar.TypeReg:
			out.Size = h.Size
			err = w.header(out, tr)
		default:
			continue // what the export never holds (it skips devices, fifos, sockets)
		}
		if err != nil {
			return err
		}
	}
}

// addLayerFile stores the layer tar written to tmp as the step key's.
func (b *builder) addLayerFile(ctx context.Context, tmp *os.File, key, createdBy string) error {
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return internal{err}
	}
	info, err := b.o.Store.AddLayer(ctx, tmp)
	if err != nil {
		return internal{err}
	}
	b.addStep(key, createdBy, &info, false)
	return nil
}

// isRemote reports whether an ADD source is a URL or a git repository.
func isRemote(s string) bool {
	return strings.Contains(s, "://") || strings.HasPrefix(s, "git@")
}

// owner is what --chown and --chmod set on copied files.
type owner struct {
	uid, gid int
	mode     int64
	setMode  bool
}

func parseChown(v string) (owner, error) {
	u, g, hasG := strings.Cut(v, ":")
	uid, err := strconv.Atoi(u)
	if err != nil || uid < 0 {
		return owner{}, fmt.Errorf("--chown=%s: want numeric UID[:GID] (names are not looked up in the image)", v)
	}
	gid := uid
	if hasG {
		if gid, err = strconv.Atoi(g); err != nil || gid < 0 {
			return owner{}, fmt.Errorf("--chown=%s: want numeric UID[:GID] (names are not looked up in the image)", v)
		}
	}
	return owner{uid: uid, gid: gid}, nil
}

// layerWriter writes the tar of a COPY's files and hashes what identifies
// them (names, kinds, modes, owners, link targets, contents; not times).
type layerWriter struct {
	ctx   context.Context
	root  *os.Root
	ign   *ignore
	tw    *tar.Writer
	h     hash.Hash
	own   owner
	isADD bool
}

// cleanSource is a source as a path relative to the context, or an error
// for one that leaves it.
func cleanSource(s string) (string, error) {
	c := path.Clean("/" + s)
	rel := strings.TrimPrefix(c, "/")
	if strings.Contains("/"+path.Clean(s)+"/", "/../") {
		return "", fmt.Errorf("source %s: outside the build context", s)
	}
	if rel == "" {
		rel = "."
	}
	return rel, nil
}

func (w *layerWriter) sources(srcs []string, dest string) error {
	var rels []string
	for _, s := range srcs {
		rel, err := cleanSource(s)
		if err != nil {
			return err
		}
		if strings.ContainsAny(rel, "*?[") {
			matches, err := fs.Glob(w.root.FS(), rel)
			if err != nil {
				return fmt.Errorf("source %s: %w", s, err)
			}
			var kept []string
			for _, m := range matches {
				if !w.ign.excluded(m) {
					kept = append(kept, m)
				}
			}
			if len(kept) == 0 {
				return fmt.Errorf("source %s: no file of the build context matches", s)
			}
			rels = append(rels, kept...)
			continue
		}
		if rel != "." && w.ign.excluded(rel) {
			return fmt.Errorf("source %s: excluded by .dockerignore", s)
		}
		rels = append(rels, rel)
	}
	destDir := strings.HasSuffix(dest, "/") || len(rels) > 1
	dest = strings.TrimPrefix(path.Clean(dest), "/")
	for _, rel := range rels {
		fi, err := w.root.Stat(rel)
		if err != nil {
			return fmt.Errorf("source %s: %w", rel, confinedErr(err))
		}
		switch {
		case fi.IsDir():
			if err := w.dir(rel, dest); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if w.isADD {
				if err := w.refuseArchive(rel); err != nil {
					return err
				}
			}
			name := dest
			if destDir {
				name = path.Join(dest, path.Base(rel))
			}
			if err := w.file(rel, name, fi); err != nil {
				return err
			}
		default:
			return fmt.Errorf("source %s: not a regular file or directory", rel)
		}
	}
	return nil
}

// confinedErr says what an os.Root error means for a build context.
func confinedErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "escapes") {
		return fmt.Errorf("a symbolic link leads out of the build context: %w", err)
	}
	return err
}

// refuseArchive refuses ADD of a local archive, which docker would
// extract: this builder does not, and says so rather than copy it.
func (w *layerWriter) refuseArchive(rel string) error {
	f, err := w.root.Open(rel)
	if err != nil {
		return err
	}
	defer f.Close()
	var head [262]byte
	n, _ := io.ReadFull(f, head[:])
	b := head[:n]
	archive := bytes2(b, "\x1f\x8b") || bytes2(b, "BZh") || bytes2(b, "\xfd7zXZ\x00") || bytes2(b, "\x28\xb5\x2f\xfd") ||
		(n >= 262 && string(b[257:262]) == "ustar")
	if archive {
		return fmt.Errorf("ADD %s: a local archive, which docker extracts: not supported here; COPY it and extract it in a RUN step", rel)
	}
	return nil
}

func bytes2(b []byte, prefix string) bool { return strings.HasPrefix(string(b), prefix) }

// dir adds the tree at rel (a directory of the context) under dest.
func (w *layerWriter) dir(rel, dest string) error {
	f, err := w.root.Open(rel)
	if err != nil {
		return fmt.Errorf("source %s: %w", rel, confinedErr(err))
	}
	ents, err := f.ReadDir(-1)
	f.Close()
	if err != nil {
		return fmt.Errorf("source %s: %w", rel, err)
	}
	slices.SortFunc(ents, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
	for _, e := range ents {
		if err := w.ctx.Err(); err != nil {
			return err
		}
		src := path.Join(rel, e.Name())
		if w.ign.excluded(src) {
			continue
		}
		name := path.Join(dest, e.Name())
		fi, err := w.root.Lstat(src)
		if err != nil {
			return fmt.Errorf("source %s: %w", src, err)
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			if err := w.symlink(src, name, fi); err != nil {
				return err
			}
		case fi.IsDir():
			if err := w.header(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: w.mode(fi), ModTime: fi.ModTime()}, nil); err != nil {
				return err
			}
			if err := w.dir(src, name); err != nil {
				return err
			}
		case fi.Mode().IsRegular():
			if err := w.file(src, name, fi); err != nil {
				return err
			}
		default:
			return fmt.Errorf("source %s: a %s: only regular files, directories and symbolic links are copied", src, fi.Mode().Type())
		}
	}
	return nil
}

// symlink adds the link at src, unless it leads out of the context: a
// link is copied as it is, never followed, but one whose target is
// absolute or climbs out of the context says nothing the build may take.
func (w *layerWriter) symlink(src, name string, fi fs.FileInfo) error {
	target, err := w.root.Readlink(src)
	if err != nil {
		return fmt.Errorf("source %s: %w", src, err)
	}
	if path.IsAbs(target) || strings.HasPrefix(path.Join(path.Dir(src), target)+"/", "../") || path.Join(path.Dir(src), target) == ".." {
		return fmt.Errorf("source %s: a symbolic link to %s, out of the build context: refused", src, target)
	}
	return w.header(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: fi.ModTime()}, nil)
}

func (w *layerWriter) mode(fi fs.FileInfo) int64 {
	if w.own.setMode {
		return w.own.mode
	}
	m := int64(fi.Mode().Perm())
	if fi.Mode()&fs.ModeSticky != 0 {
		m |= 0o1000
	}
	return m
}

func (w *layerWriter) file(src, name string, fi fs.FileInfo) error {
	f, err := w.root.Open(src)
	if err != nil {
		return fmt.Errorf("source %s: %w", src, confinedErr(err))
	}
	defer f.Close()
	// The size of the file opened, not of the name stat'ed before.
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("source %s: changed while copied", src)
	}
	return w.header(&tar.Header{Typeflag: tar.TypeReg, Name: name, Size: st.Size(), Mode: w.mode(fi), ModTime: st.ModTime()}, f)
}

// header writes h (with the owner given) and r's h.Size bytes, and hashes
// them.
func (w *layerWriter) header(h *tar.Header, r io.Reader) error {
	h.Uid, h.Gid = w.own.uid, w.own.gid
	h.Format = tar.FormatPAX
	fmt.Fprintf(w.h, "%c\x00%s\x00%o\x00%d:%d\x00%s\x00%d\x00", h.Typeflag, h.Name, h.Mode, h.Uid, h.Gid, h.Linkname, h.Size)
	if err := w.tw.WriteHeader(h); err != nil {
		return fmt.Errorf("layer entry %s: %w", h.Name, err)
	}
	if r == nil {
		return nil
	}
	n, err := io.Copy(io.MultiWriter(w.tw, w.h), io.LimitReader(r, h.Size))
	if err == nil && n != h.Size {
		err = errors.New("changed while copied")
	}
	if err != nil {
		return fmt.Errorf("layer entry %s: %w", h.Name, err)
	}
	return nil
}

// ignore is a .dockerignore: patterns, the last that matches deciding.
type ignore struct {
	rules []ignoreRule
}

type ignoreRule struct {
	re      *regexp.Regexp
	exclude bool // false for a "!" exception
}

// loadIgnore reads the context's .dockerignore, if any.
func loadIgnore(root *os.Root) (*ignore, error) {
	ig := &ignore{}
	b, err := root.ReadFile(".dockerignore")
	if errors.Is(err, fs.ErrNotExist) {
		return ig, nil
	}
	if err != nil {
		return nil, fmt.Errorf(".dockerignore: %w", err)
	}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		r := ignoreRule{exclude: true}
		if strings.HasPrefix(line, "!") {
			r.exclude, line = false, strings.TrimSpace(line[1:])
		}
		p := strings.TrimPrefix(path.Clean("/"+line), "/")
		re, err := globRegexp(p)
		if err != nil {
			return nil, fmt.Errorf(".dockerignore line %d: %q: %w", i+1, line, err)
		}
		r.re = re
		ig.rules = append(ig.rules, r)
	}
	return ig, nil
}

// globRegexp turns a .dockerignore pattern (path.Match syntax plus "**",
// any number of directories) into a regexp of a whole relative path.
func globRegexp(p string) (*regexp.Regexp, error) {
	var b strings.Builder
	b.WriteString("^")
	for i := 0; i < len(p); i++ {
		c := p[i]
		switch {
		case c == '*' && i+1 < len(p) && p[i+1] == '*':
			i++
			if i+1 < len(p) && p[i+1] == '/' {
				i++
				b.WriteString("(.*/)?")
			} else {
				b.WriteString(".*")
			}
		case c == '*':
			b.WriteString("[^/]*")
		case c == '?':
			b.WriteString("[^/]")
		case c == '[':
			j := strings.IndexByte(p[i:], ']')
			if j < 0 {
				return nil, errors.New("unterminated [")
			}
			class := p[i+1 : i+j]
			if strings.HasPrefix(class, "!") {
				class = "^" + class[1:]
			}
			b.WriteString("[" + strings.ReplaceAll(class, `\`, `\\`) + "]")
			i += j
		case c == '\\' && i+1 < len(p):
			i++
			b.WriteString(regexp.QuoteMeta(string(p[i])))
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString("$")
	return regexp.Compile(b.String())
}

// excluded reports whether rel (relative to the context) is ignored: the
// last rule matching it or a directory above it decides.
func (ig *ignore) excluded(rel string) bool {
	if ig == nil || len(ig.rules) == 0 {
		return false
	}
	out := false
	for _, r := range ig.rules {
		for p := rel; ; {
			if r.re.MatchString(p) {
				out = r.exclude
				break
			}
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				break
			}
			p = p[:i]
		}
	}
	return out
}
