package checkpoint

import (
	"fmt"
	"iter"
	"slices"
	"strings"
)

// tree is a mutable tree of entries that deltas apply to: each directory
// node holds its children by name, so deleting a directory with all below
// it is one map delete.
type tree struct {
	root node
	n    int64 // entries, the root not counted
	// fileBytes is the content of the tree's File entries and links the
	// number of its Hardlink entries, kept as entries come and go: with
	// no hard links, fileBytes is the tree's content (contentBytes), which
	// a step then learns without a walk of the whole tree.
	fileBytes int64
	links     int64
}

type node struct {
	e        *Entry
	children map[string]*node // directories only
	// sorted is the names of children in order, kept from the last walk
	// until a name comes or goes (nil then): a compaction walks the whole
	// tree, and a step changes few directories, so a walk sorts only the
	// directories that changed since the one before.
	sorted []string
}

func newTree() *tree {
	return &tree{root: node{children: map[string]*node{}}}
}

// lookup returns the node of name, or nil.
func (t *tree) lookup(name string) *node {
	n := &t.root
	for c := range strings.SplitSeq(name, "/") {
		if n.children == nil {
			return nil
		}
		if n = n.children[c]; n == nil {
			return nil
		}
	}
	return n
}

// dirOf returns the directory node that holds name, or nil if name's
// directory is not a directory of the tree.
func (t *tree) dirOf(name string) (*node, string) {
	dir, base := parentName(name)
	if dir == "" {
		return &t.root, base
	}
	d := t.lookup(dir)
	if d == nil || d.children == nil {
		return nil, base
	}
	return d, base
}

// add counts e, an entry put in the tree.
func (t *tree) add(e *Entry) {
	t.n++
	switch e.Kind {
	case File:
		t.fileBytes += e.Size
	case Hardlink:
		t.links++
	}
}

// drop uncounts n's subtree, n included, which the caller takes out of
// the tree.
func (t *tree) drop(n *node) {
	t.dropChildren(n)
	t.n--
	switch n.e.Kind {
	case File:
		t.fileBytes -= n.e.Size
	case Hardlink:
		t.links--
	}
}

// dropChildren empties the directory n, uncounting what was below it.
func (t *tree) dropChildren(n *node) {
	for _, ch := range n.children {
		t.drop(ch)
	}
	clear(n.children)
	n.sorted = nil
}

// errNoDir: an entry's directory is not a directory of the tree.
type errNoDir struct{ name string }

func (e errNoDir) Error() string {
	dir, _ := parentName(e.name)
	return fmt.Sprintf("its directory %q is not a directory of the tree", clip(dir))
}

// apply changes the tree by e, with a delta's semantics: an entry
// replaces whatever its name held (a directory over a directory keeps the
// children), a whiteout deletes its name and all below it (nothing, if it
// is not there), an opaque directory drops its previous children. e is
// kept, not copied: the caller must not change it afterwards.
func (t *tree) apply(e *Entry) error {
	d, base := t.dirOf(e.Name)
	if e.Kind == Whiteout {
		if d != nil {
			if old := d.children[base]; old != nil {
				t.drop(old)
				delete(d.children, base)
				d.sorted = nil
			}
		}
		return nil
	}
	if d == nil {
		return errNoDir{e.Name}
	}
	old := d.children[base]
	if (e.Kind == Dir || e.Kind == OpaqueDir) && old != nil && old.children != nil {
		if e.Kind == OpaqueDir {
			t.dropChildren(old)
			e = withKind(e, Dir)
		}
		old.e = e
		return nil
	}
	if old != nil {
		t.drop(old)
	} else {
		d.sorted = nil
	}
	n := &node{e: e}
	switch e.Kind {
	case Dir:
		n.children = map[string]*node{}
	case OpaqueDir:
		n.children = map[string]*node{}
		n.e = withKind(e, Dir)
	}
	d.children[base] = n
	t.add(n.e)
	if t.n > MaxEntries {
		return fmt.Errorf("the tree holds more than %d entries", MaxEntries)
	}
	return nil
}

// lostKey names the file a hard link shared with a name that no longer
// holds it: "\x00" (no name holds a NUL), the name, the slices.
func lostKey(e *Entry) string {
	var b strings.Builder
	b.WriteString("\x00")
	b.WriteString(e.Link)
	for _, s := range e.Slices {
		fmt.Fprintf(&b, "\x00%x:%d:%d", s.Chunk, s.Offset, s.Length)
	}
	return b.String()
}

// withKind returns a copy of e of kind k.
func withKind(e *Entry, k Kind) *Entry {
	c := *e
	c.Kind = k
	return &c
}

// walk yields the tree's entries in walk order.
func (t *tree) walk() iter.Seq[*Entry] {
	return func(yield func(*Entry) bool) {
		walkNode(&t.root, yield)
	}
}

func walkNode(n *node, yield func(*Entry) bool) bool {
	if n.sorted == nil {
		n.sorted = make([]string, 0, len(n.children))
		for name := range n.children {
			n.sorted = append(n.sorted, name)
		}
		slices.Sort(n.sorted)
	}
	for _, name := range n.sorted {
		ch := n.children[name]
		if !yield(ch.e) {
			return false
		}
		if ch.children != nil && !walkNode(ch, yield) {
			return false
		}
	}
	return true
}

// each calls fn for every entry of the tree, in no particular order.
func (t *tree) each(fn func(*Entry)) {
	var visit func(n *node)
	visit = func(n *node) {
		for _, ch := range n.children {
			fn(ch.e)
			if ch.children != nil {
				visit(ch)
			}
		}
	}
	visit(&t.root)
}

// linkGroups puts the files that share content through hard links in
// groups: a hard link and the name it links to are in one group if that
// name holds the same content (the same slices); hard links to one name
// with the same content are in one group even when that name is gone or
// holds other content now (the file they shared lost a name, not its
// other names). It returns a function naming the group of a file; files
// in no group are a group of their own.
func (t *tree) linkGroups() func(name string) string {
	// A union-find over names and, for the links to a name that no longer
	// holds their content, a key of that name and the content.
	parent := map[string]string{}
	var find func(string) string
	find = func(name string) string {
		p, ok := parent[name]
		if !ok || p == name {
			return name
		}
		r := find(p)
		parent[name] = r
		return r
	}
	union := func(a, b string) {
		if a, b = find(a), find(b); a != b {
			parent[a] = b
		}
	}
	t.each(func(e *Entry) {
		if e.Kind != Hardlink {
			return
		}
		if n := t.lookup(e.Link); n != nil && n.e.hasContent() && sameContent(n.e, e) {
			union(e.Name, e.Link)
		} else {
			union(e.Name, lostKey(e))
		}
	})
	return find
}

// contentBytes returns the bytes of file content in the tree, each hard
// link group's once: the count kept when the tree has no hard links, a
// walk of it when it has.
func (t *tree) contentBytes() int64 {
	if t.links == 0 {
		return t.fileBytes
	}
	return t.walkBytes()
}

// walkBytes is contentBytes by a walk of the whole tree.
func (t *tree) walkBytes() int64 {
	find := t.linkGroups()
	seen := map[string]bool{}
	var n int64
	t.each(func(e *Entry) {
		if !e.hasContent() {
			return
		}
		if g := find(e.Name); !seen[g] {
			seen[g] = true
			n += e.Size
		}
	})
	return n
}

// normalize returns the tree's entries in walk order in normal form: the
// files of each hard link group (linkGroups) are a File, the first in
// walk order, and Hardlinks to it. It also returns the bytes of file
// content (each group's once). Entries that change are copies: the tree's
// are not modified.
func (t *tree) normalize() ([]*Entry, int64) {
	list := make([]*Entry, 0, t.n)
	if t.links == 0 {
		// No hard links: every file is a group of its own, and the walk
		// alone is the normal form (a compaction of a big tree then costs
		// no union-find and no map of every file's name).
		var bytes int64
		for e := range t.walk() {
			if e.hasContent() {
				bytes += e.Size
				if e.Kind != File || e.Link != "" {
					c := *e
					c.Kind, c.Link = File, ""
					e = &c
				}
			}
			list = append(list, e)
		}
		return list, bytes
	}
	for e := range t.walk() {
		list = append(list, e)
	}
	find := t.linkGroups()
	first := map[string]string{} // group -> its first member in walk order
	var bytes int64
	for i, e := range list {
		if !e.hasContent() {
			continue
		}
		r := find(e.Name)
		f, seen := first[r]
		switch {
		case !seen:
			first[r] = e.Name
			bytes += e.Size
			if e.Kind != File || e.Link != "" {
				c := *e
				c.Kind, c.Link = File, ""
				list[i] = &c
			}
		case e.Kind != Hardlink || e.Link != f:
			c := *e
			c.Kind, c.Link = Hardlink, f
			list[i] = &c
		}
	}
	return list, bytes
}
