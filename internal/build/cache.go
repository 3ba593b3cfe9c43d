package build

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"

	"github.com/airlockrun/airlock/internal/image"
)

// cache is the step cache: what each step key made. It is a file the
// build reads at its start and writes at its end (an entry lost to a
// concurrent build's write is a step run again, nothing worse); entries
// name layers by digest, and one whose layer the store collected since is
// a miss.
type cache struct {
	path string

	mu      sync.Mutex
	entries map[string]entry // guarded by mu
	dirty   bool             // guarded by mu
}

// entry is a cached step: its layer, or nil for a step that changed
// nothing.
type entry struct {
	Layer *image.LayerInfo `json:"layer,omitempty"`
}

// maxCacheEntries bounds the cache file; past it the oldest build's
// entries are not kept (the file is rewritten with this build's).
const maxCacheEntries = 10000

func loadCache(path string) (*cache, error) {
	c := &cache{path: path, entries: map[string]entry{}}
	if path == "" {
		return c, nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build cache: %w", err)
	}
	if err := json.Unmarshal(b, &c.entries); err != nil {
		// A cache is rebuilt, not repaired.
		c.entries = map[string]entry{}
	}
	return c, nil
}

func (c *cache) get(key string) (entry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	return e, ok
}

func (c *cache) put(key string, e entry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.entries[key]; ok && sameEntry(old, e) {
		return
	}
	if len(c.entries) >= maxCacheEntries {
		c.entries = map[string]entry{}
	}
	c.entries[key] = e
	c.dirty = true
}

func sameEntry(a, b entry) bool {
	if a.Layer == nil || b.Layer == nil {
		return a.Layer == b.Layer
	}
	return a.Layer.Digest == b.Layer.Digest && a.Layer.DiffID == b.Layer.DiffID
}

// save writes the cache, if it changed, atomically.
func (c *cache) save() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.path == "" || !c.dirty {
		return nil
	}
	b, err := json.Marshal(c.entries)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(c.path), 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(c.path), ".build-cache-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), c.path); err != nil {
		return err
	}
	c.dirty = false
	return nil
}
