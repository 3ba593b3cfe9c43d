package e2b

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/checkpoint"
)

// CheckpointRoots lists the checkpoints that the E2B records in stateDir
// keep alive, for a chunk collection (checkpoint.Store.Collect): each
// paused sandbox's workspace, of its record's tenant (tenantOf looks the
// record's run up), and each snapshot's. A record that does not read
// fails the listing: a collector that cannot read it cannot know what it
// keeps. A missing stateDir holds none.
func CheckpointRoots(ctx context.Context, stateDir string, tenantOf func(ctx context.Context, runID string) (string, error)) ([]checkpoint.Root, error) {
	var roots []checkpoint.Root
	entries, err := os.ReadDir(stateDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("e2b: checkpoint roots: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, pausedPrefix) || !strings.HasSuffix(name, pausedSuffix) {
			continue
		}
		runID := strings.TrimSuffix(strings.TrimPrefix(name, pausedPrefix), pausedSuffix)
		if runID == "" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(stateDir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("e2b: checkpoint roots: %w", err)
		}
		ps, err := parsePaused(b)
		if err != nil {
			return nil, fmt.Errorf("e2b: checkpoint roots: paused state of %s: %w", runID, err)
		}
		if ps.Checkpoint == "" {
			continue // a workspace paused as a tar file, before checkpoints
		}
		tenant, err := tenantOf(ctx, runID)
		if err != nil {
			return nil, fmt.Errorf("e2b: checkpoint roots: paused sandbox %s: %w", runID, err)
		}
		roots = append(roots, checkpoint.Root{Tenant: tenant, Digest: ps.Checkpoint})
	}
	dir := filepath.Join(stateDir, "snapshots")
	entries, err = os.ReadDir(dir)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("e2b: checkpoint roots: %w", err)
	}
	for _, e := range entries {
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok || !strings.HasPrefix(id, snapshotIDPrefix) {
			continue
		}
		sn, err := readSnapshot(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, fmt.Errorf("e2b: checkpoint roots: snapshot %s: %w", id, err)
		}
		roots = append(roots, checkpoint.Root{Tenant: sn.Tenant, Digest: sn.Checkpoint})
	}
	return roots, nil
}
