package imageroot

import (
	"bytes"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// RootsFile is the store's index again, as the lines Lookup reads without
// encoding/json (WriteRoots): in a cold `sandbox run --image` the index's
// JSON decoding was most of the front end's time for the image, about 35
// page faults and 1 ms of a 40 ms start (docs/benchmarks.md, image29b).
// It holds a copy of the images.json it was made from, which Lookup
// compares with the images.json there now, byte for byte: an index
// written since (an image imported, pulled, tagged or removed) differs,
// and Lookup reads images.json instead. Nothing but Lookup reads it; a
// missing, stale or unreadable one costs only the JSON.
const RootsFile = "roots"

// rootsMagic is a roots file's first line: its format's name and version.
const rootsMagic = "airlock-image-roots 1"

// WriteRoots writes dir's roots file for index, the bytes just renamed to
// dir's images.json. Callers hold the store's index lock, so no other
// writer replaces either file meanwhile; readers see the old roots file or
// the new one, whole. An index with a null image gets no roots file (any
// old one is removed): Lookup declines it through the JSON, as before. On
// an error the old roots file may be left: it holds another images.json,
// so Lookup does not use it.
func WriteRoots(dir string, index []byte) error {
	path := filepath.Join(dir, RootsFile)
	ix := &Index{}
	if err := json.Unmarshal(index, ix); err != nil {
		return removeRoots(path)
	}
	var b bytes.Buffer
	b.WriteString(rootsMagic + "\nindex " + strconv.Itoa(len(index)) + "\n")
	b.Write(index)
	b.WriteByte('\n')
	for _, d := range slices.Sorted(maps.Keys(ix.Images)) {
		img := ix.Images[d]
		if img == nil {
			return removeRoots(path)
		}
		line(&b, "image", d, img.Digest, img.Index)
		for _, r := range img.Repos {
			line(&b, "repo", r)
		}
		c := img.Config
		for _, e := range c.Env {
			line(&b, "env", e)
		}
		if c.WorkingDir != "" {
			line(&b, "workdir", c.WorkingDir)
		}
		if c.User != "" {
			line(&b, "user", c.User)
		}
		for _, a := range c.Entrypoint {
			line(&b, "entrypoint", a)
		}
		for _, a := range c.Cmd {
			line(&b, "cmd", a)
		}
		for _, k := range slices.Sorted(maps.Keys(c.Labels)) {
			line(&b, "label", k, c.Labels[k])
		}
		if !c.Created.IsZero() {
			t, err := c.Created.MarshalText()
			if err != nil {
				return removeRoots(path)
			}
			line(&b, "created", string(t))
		}
		for _, l := range img.Layers {
			line(&b, "layer", l.DiffID)
		}
	}
	for _, n := range slices.Sorted(maps.Keys(ix.Names)) {
		line(&b, "name", n, ix.Names[n])
	}
	b.WriteString("end\n")
	tmp, err := os.CreateTemp(dir, ".roots-*")
	if err != nil {
		return errors.Join(err, removeRoots(path))
	}
	_, err = tmp.Write(b.Bytes())
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return errors.Join(err, removeRoots(path))
	}
	return nil
}

// removeRoots removes a roots file that no longer matches the index.
func removeRoots(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// line writes a roots line: its kind, then each field quoted.
func line(b *bytes.Buffer, kind string, fields ...string) {
	b.WriteString(kind)
	for _, f := range fields {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(f))
	}
	b.WriteByte('\n')
}

// readRoots returns the index of dir's roots file when it was made from
// the images.json there now; false when there is none, it is stale, or
// any line is not one WriteRoots writes.
func readRoots(dir string) (*Index, bool) {
	b, err := os.ReadFile(filepath.Join(dir, RootsFile))
	if err != nil {
		return nil, false
	}
	rest, ok := bytes.CutPrefix(b, []byte(rootsMagic+"\nindex "))
	if !ok {
		return nil, false
	}
	num, rest, ok := bytes.Cut(rest, []byte("\n"))
	n, err := strconv.Atoi(string(num))
	if !ok || err != nil || n < 0 || n >= len(rest) || rest[n] != '\n' {
		return nil, false
	}
	now, err := os.ReadFile(filepath.Join(dir, "images.json"))
	if err != nil || !bytes.Equal(now, rest[:n]) {
		return nil, false // stale: made from another images.json
	}
	text, ok := strings.CutSuffix(string(rest[n+1:]), "end\n")
	if !ok {
		return nil, false
	}
	ix := &Index{Images: map[string]*Image{}, Names: map[string]string{}}
	var img *Image
	for l := range strings.Lines(text) {
		kind, fields, ok := parseLine(strings.TrimSuffix(l, "\n"))
		if !ok {
			return nil, false
		}
		n := 1
		switch kind {
		case "image":
			n = 3
		case "label", "name":
			n = 2
		}
		if len(fields) != n || kind != "image" && kind != "name" && img == nil {
			return nil, false
		}
		switch kind {
		case "image":
			if _, dup := ix.Images[fields[0]]; dup {
				return nil, false
			}
			img = &Image{Digest: fields[1], Index: fields[2]}
			ix.Images[fields[0]] = img
		case "repo":
			img.Repos = append(img.Repos, fields[0])
		case "env":
			img.Config.Env = append(img.Config.Env, fields[0])
		case "workdir":
			img.Config.WorkingDir = fields[0]
		case "user":
			img.Config.User = fields[0]
		case "entrypoint":
			img.Config.Entrypoint = append(img.Config.Entrypoint, fields[0])
		case "cmd":
			img.Config.Cmd = append(img.Config.Cmd, fields[0])
		case "label":
			if img.Config.Labels == nil {
				img.Config.Labels = map[string]string{}
			}
			img.Config.Labels[fields[0]] = fields[1]
		case "created":
			var t time.Time
			if err := t.UnmarshalText([]byte(fields[0])); err != nil {
				return nil, false
			}
			img.Config.Created = t
		case "layer":
			img.Layers = append(img.Layers, LayerInfo{DiffID: fields[0]})
		case "name":
			img = nil // the names come last
			ix.Names[fields[0]] = fields[1]
		default:
			return nil, false
		}
	}
	return ix, true
}

// parseLine splits a roots line into its kind and its unquoted fields.
func parseLine(l string) (string, []string, bool) {
	kind, rest, _ := strings.Cut(l, " ")
	var fields []string
	for rest != "" {
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", nil, false
		}
		f, err := strconv.Unquote(q)
		if err != nil {
			return "", nil, false
		}
		fields = append(fields, f)
		rest = rest[len(q):]
		if rest != "" {
			if rest[0] != ' ' {
				return "", nil, false
			}
			rest = rest[1:]
		}
	}
	return kind, fields, true
}
