package sandboxtest

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
)

// benchTreeShape is the workspace of the checkpoint benchmarks: about 1 GiB
// shaped like a repository at work: many small files in many directories
// (sources, loose git objects, installed packages) and a few large ones
// (git packs, build outputs).
var benchTreeShape = []struct {
	dir            string
	dirs, files    int
	minKB, maxKB   int
	large, largeMB int
}{
	{dir: "src", dirs: 200, files: 50, minKB: 1, maxKB: 16},
	{dir: ".git/objects", dirs: 256, files: 20, minKB: 1, maxKB: 4},
	{dir: "node_modules", dirs: 100, files: 30, minKB: 2, maxKB: 8},
	{dir: "build", large: 7, largeMB: 128},
}

// BenchTreeChanged is the file the delta benchmarks change: a source file
// deep in the tree.
const BenchTreeChanged = "src/d0150/f0025"

// MakeBenchTree makes the benchmarks' workspace (benchTreeShape, the same
// bytes every time) in a new temporary directory, and returns it and the
// size of its files; the caller removes it.
func MakeBenchTree() (string, int64, error) {
	root, err := os.MkdirTemp("", "airlock-checkpoint-bench-")
	if err != nil {
		return "", 0, err
	}
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	block := make([]byte, 1<<20)
	for i := range block {
		block[i] = byte(rng.Uint32())
	}
	var total int64
	for _, s := range benchTreeShape {
		for d := range s.dirs {
			dir := filepath.Join(root, s.dir, fmt.Sprintf("d%04d", d))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return root, 0, err
			}
			for f := range s.files {
				n := (s.minKB + rng.IntN(s.maxKB-s.minKB+1)) << 10
				off := rng.IntN(len(block) - n)
				if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%04d", f)), block[off:off+n], 0o644); err != nil {
					return root, 0, err
				}
				total += int64(n)
			}
		}
		for i := range s.large {
			if err := os.MkdirAll(filepath.Join(root, s.dir), 0o755); err != nil {
				return root, 0, err
			}
			f, err := os.Create(filepath.Join(root, s.dir, fmt.Sprintf("large%d", i)))
			if err != nil {
				return root, 0, err
			}
			for range s.largeMB {
				if _, err := f.Write(block); err != nil {
					f.Close()
					return root, 0, err
				}
			}
			if err := f.Close(); err != nil {
				return root, 0, err
			}
			total += int64(s.largeMB) << 20
		}
	}
	return root, total, nil
}
