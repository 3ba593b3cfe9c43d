package host

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestServeCollectsCheckpoints: serve's periodic collection removes the
// chunks of a checkpoint nothing refers to once they are older than the
// grace period, and logs each pass.
func TestServeCollectsCheckpoints(t *testing.T) {
	home := t.TempDir()
	h, err := New(Config{Home: home})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	rs, err := h.run()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := rs.checkpoints.Write(ctx, "acme", "", true, oneFileTar(t, "orphan", 9, 1<<20)); err != nil {
		t.Fatal(err)
	}
	chunks := func() []string {
		var out []string
		_ = filepath.WalkDir(filepath.Join(home, "chunks"), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() && filepath.Base(filepath.Dir(p)) != "tmp" {
				out = append(out, p)
			}
			return nil
		})
		return out
	}
	past := time.Now().Add(-2 * time.Hour)
	for _, p := range chunks() {
		if err := os.Chtimes(p, past, past); err != nil {
			t.Fatal(err)
		}
	}
	ageFiles(t, filepath.Join(home, "blobs", "sha256"), past)
	if len(chunks()) == 0 {
		t.Fatal("the checkpoint stored no chunk")
	}
	var log syncBuffer
	s := &service{h: h, log: slog.New(slog.NewTextHandler(&log, nil))}
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.collectCheckpoints(ctx, 10*time.Millisecond, time.Hour)
	}()
	// Waits for a pass's log line too: a pass still listing the chunk
	// store when ctx ends fails on it, unlogged (the pass that removed
	// them may be that one).
	for deadline := time.Now().Add(time.Minute); (len(chunks()) > 0 || !strings.Contains(log.String(), "chunks_expired=")) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	if n := len(chunks()); n != 0 {
		t.Errorf("%d chunks of an orphaned checkpoint left after the periodic collection", n)
	}
	if !strings.Contains(log.String(), "checkpoint gc") || !strings.Contains(log.String(), "chunks_expired=") {
		t.Errorf("the collection logged %q, want its passes", log.String())
	}

	// every 0 is never: it returns at once.
	s.collectCheckpoints(context.Background(), 0, time.Hour)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
