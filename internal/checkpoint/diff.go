package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
)

// Change is a name whose entry differs between two trees.
type Change struct {
	Name string
	// From and To are the entries before and after; nil where the name
	// is absent.
	From, To *Entry
	// Content says the name's content changed: it was added or removed,
	// changed kind (a hard link counts as a file), or holds other bytes
	// (files) or another target (symlinks). A change that is not of
	// content is of metadata only (mode, owner, modification time).
	Content bool
}

// Changed returns the names whose entries differ between the trees of the
// checkpoints from and to, both tenant's, in walk order; from "" is the
// empty tree. It compares manifests, not trees on disk: two files are the
// same when they hold the same slices, and their bytes are read only when
// both have the same size and other slices (a file written again with
// the content it had). Patches and verification read the content of what
// changed with Open.
func (s *Store) Changed(ctx context.Context, tenant, from, to string) ([]Change, error) {
	var ta *Tree
	if from != "" {
		t, err := s.Resolve(ctx, tenant, from)
		if err != nil {
			return nil, fmt.Errorf("checkpoint: changed: %w", err)
		}
		ta = t
	}
	tb, err := s.Resolve(ctx, tenant, to)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: changed: %w", err)
	}
	return s.ChangedTrees(ctx, tenant, ta, tb)
}

// ChangedTrees is Changed between trees the caller resolved already
// (tenant's; a nil from is the empty tree), for a caller that reads them
// too.
func (s *Store) ChangedTrees(ctx context.Context, tenant string, from, to *Tree) ([]Change, error) {
	var a []*Entry
	if from != nil {
		a = from.Entries()
	}
	b := to.Entries()
	var out []Change
	for i, j := 0, 0; i < len(a) || j < len(b); {
		var c int
		switch {
		case i == len(a):
			c = 1
		case j == len(b):
			c = -1
		default:
			c = compareNames(a[i].Name, b[j].Name)
		}
		switch {
		case c < 0:
			out = append(out, Change{Name: a[i].Name, From: a[i], Content: true})
			i++
		case c > 0:
			out = append(out, Change{Name: b[j].Name, To: b[j], Content: true})
			j++
		default:
			content, meta, err := s.differ(ctx, tenant, a[i], b[j])
			if err != nil {
				return nil, fmt.Errorf("checkpoint: changed %s..%s: %w", from.digest(), to.Digest, err)
			}
			if content || meta {
				out = append(out, Change{Name: a[i].Name, From: a[i], To: b[j], Content: content})
			}
			i, j = i+1, j+1
		}
	}
	return out, nil
}

// differ compares two entries of one name: their content and their
// metadata.
func (s *Store) differ(ctx context.Context, tenant string, x, y *Entry) (content, meta bool, err error) {
	meta = x.Mode != y.Mode || x.UID != y.UID || x.GID != y.GID || x.MTime != y.MTime
	switch {
	case x.hasContent() != y.hasContent() || !x.hasContent() && x.Kind != y.Kind:
		return true, meta, nil
	case x.Kind == Symlink:
		return x.Link != y.Link, meta, nil
	case !x.hasContent():
		return false, meta, nil
	case x.Size != y.Size:
		return true, meta, nil
	case sameContent(x, y):
		return false, meta, nil
	}
	same, err := s.sameBytes(ctx, tenant, x, y)
	return !same, meta, err
}

// sameBytes reads two files of one size and reports whether their bytes
// are the same.
func (s *Store) sameBytes(ctx context.Context, tenant string, x, y *Entry) (bool, error) {
	rx, err := s.Open(ctx, tenant, x)
	if err != nil {
		return false, err
	}
	defer rx.Close()
	ry, err := s.Open(ctx, tenant, y)
	if err != nil {
		return false, err
	}
	defer ry.Close()
	bx, by := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		n, errx := io.ReadFull(rx, bx)
		if errx != nil && !isEnd(errx) {
			return false, errx
		}
		m, erry := io.ReadFull(ry, by)
		if erry != nil && !isEnd(erry) {
			return false, erry
		}
		if n != m || !bytes.Equal(bx[:n], by[:m]) {
			return false, nil
		}
		if errx != nil || erry != nil {
			return errx != nil && erry != nil, nil
		}
	}
}

func isEnd(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// digest is t's digest, "" for a nil (empty) tree.
func (t *Tree) digest() string {
	if t == nil {
		return ""
	}
	return t.Digest
}
