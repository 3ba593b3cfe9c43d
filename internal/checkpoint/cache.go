package checkpoint

import (
	"slices"
	"sync"
)

// The tree cache's bounds: the trees it keeps hold at most
// treeCacheEntries entries in all (a few hundred bytes each), and it keeps
// at most treeCacheTrees trees.
const (
	treeCacheEntries = 1 << 20
	treeCacheTrees   = 16
)

// treeCache keeps the trees of the checkpoints written last, so that the
// next Write on one of them (the next step of its run, usually) does not
// read and apply its chain again: that would cost every step in a big
// workspace what the workspace holds, not what the step changed. A Write
// takes the tree out (it changes it into its own) and puts it back under
// its new checkpoint; a failed Write drops it. Trees are keyed by tenant
// key and digest. Least recently put go first.
type treeCache struct {
	mu sync.Mutex
	// trees, oldest first, and their entries in all. Guarded by mu.
	trees   []*cachedTree
	entries int64
}

type cachedTree struct {
	key  string // tenant key fingerprint and digest
	t    *tree
	head *Manifest // the checkpoint's manifest, without its entries
	// chain is the digests of the checkpoint's chain, its own first and
	// its full checkpoint's last.
	chain []string
}

// take removes and returns the tree of the checkpoint digest of the
// tenant whose key fingerprint is fp, or nil.
func (c *treeCache) take(fp, digest string) *cachedTree {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, ct := range c.trees {
		if ct.key == fp+digest {
			c.trees = append(c.trees[:i], c.trees[i+1:]...)
			c.entries -= ct.t.n
			return ct
		}
	}
	return nil
}

// put keeps t, the tree of the checkpoint whose manifest is m and whose
// chain is chain (chain[0] its digest), and evicts the oldest trees past
// the bounds.
func (c *treeCache) put(fp string, chain []string, t *tree, m *Manifest) {
	if t.n > treeCacheEntries {
		return
	}
	head := *m
	head.Entries = nil
	c.mu.Lock()
	defer c.mu.Unlock()
	c.trees = append(c.trees, &cachedTree{key: fp + chain[0], t: t, head: &head, chain: chain})
	c.entries += t.n
	for len(c.trees) > treeCacheTrees || c.entries > treeCacheEntries {
		c.entries -= c.trees[0].t.n
		c.trees[0] = nil
		c.trees = c.trees[1:]
	}
}

// forget drops the trees whose chain holds digest, a manifest a deletion
// removed: a tree holds the file names of its chain, which must not
// outlive the deletion in memory either.
func (c *treeCache) forget(digest string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	kept := c.trees[:0]
	for _, ct := range c.trees {
		if slices.Contains(ct.chain, digest) {
			c.entries -= ct.t.n
			continue
		}
		kept = append(kept, ct)
	}
	clear(c.trees[len(kept):])
	c.trees = kept
}
