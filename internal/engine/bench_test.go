package engine_test

import (
	"context"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/engine"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/model"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

// BenchmarkStep measures one step of the loop with the scripted model and
// a trivial tool, in the steady state: from the first call's result to the
// last one's, so the sandbox's creation and the run's checks and teardown
// are left out. That is everything of a step but the model and the call
// itself (the events, fsync'd; the policy hook; the workspace check after a
// command). Compare with BenchmarkCommand and BenchmarkReadFile, the calls
// alone in a running sandbox:
//
//	go test -run '^$' -bench 'Step|Command|ReadFile' -benchtime 100x ./internal/engine
func BenchmarkStep(b *testing.B) {
	for _, bc := range []struct{ name, call string }{
		{"run_command", `{name: run_command, args: {command: "true"}}`},
		{"read_file", `{name: read_file, args: {path: "f.txt"}}`},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var first, last time.Time
			var n int
			var inModel, modelAtFirst, modelAtLast time.Duration
			eng, ws := benchEngine(b, func(e event.Event) {
				if e.Type == event.TypeToolFinished && !strings.Contains(string(e.Payload), `"tool":"finish"`) {
					if n++; n == 1 {
						first, modelAtFirst = time.Now(), inModel
					}
					last, modelAtLast = time.Now(), inModel
				}
			}, func(p model.Provider) model.Provider { return timedModel{p, &inModel} })
			steps := max(b.N, 2)
			var s strings.Builder
			s.WriteString("turns:\n")
			for range steps {
				fmt.Fprintf(&s, "  - tool_calls: [%s]\n", bc.call)
			}
			s.WriteString("  - tool_calls: [{name: finish, args: {summary: done}}]\n")
			r, err := eng.Create(context.Background(), engine.Request{
				Task: "bench", Script: []byte(s.String()),
				Config: engine.Config{Model: "script:bench", MaxSteps: steps + 1, Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			o, err := eng.Drive(context.Background(), r.ID)
			if err != nil || o.Status != event.StatusCompleted {
				b.Fatalf("Drive = %v, %v", o.Status, err)
			}
			per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(n-1) }
			model := modelAtLast - modelAtFirst
			b.ReportMetric(per(last.Sub(first)), "ms/step")
			b.ReportMetric(per(model), "model-ms/step")
			b.ReportMetric(per(last.Sub(first)-model), "ms/step-without-model")
		})
	}
}

// BenchmarkCommand is one trivial command in a running sandbox, and
// BenchmarkReadFile one small file read: the tools' own costs, to subtract
// from BenchmarkStep.
func BenchmarkCommand(b *testing.B) { benchSandboxOp(b, true) }

// BenchmarkReadFile: see BenchmarkCommand.
func BenchmarkReadFile(b *testing.B) { benchSandboxOp(b, false) }

func benchSandboxOp(b *testing.B, command bool) {
	_, ws := benchEngine(b, nil, nil)
	be, err := linux.New(linux.Config{Executor: executorPath, StateDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	sb, err := be.Create(context.Background(), sandbox.Spec{Workspace: ws})
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Destroy(context.Background())
	b.ResetTimer()
	for range b.N {
		var err error
		if command {
			_, err = sandbox.Run(context.Background(), sb, sandbox.Command{Argv: []string{"sh", "-c", "true"}, Fingerprint: "/workspace"})
		} else {
			_, err = sb.ReadFile(context.Background(), "/workspace/f.txt", 1<<20)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

// timedModel adds the time spent in the model to *total (the scripted
// model validates the whole conversation, as a provider serialises it:
// that is the model's time, not the loop's).
type timedModel struct {
	model.Provider
	total *time.Duration
}

func (m timedModel) Complete(ctx context.Context, req model.Request, stream func(model.Delta)) (model.Response, error) {
	start := time.Now()
	defer func() { *m.total += time.Since(start) }()
	return m.Provider.Complete(ctx, req, stream)
}

func benchEngine(b *testing.B, onEvent func(event.Event), wrap func(model.Provider) model.Provider) (*engine.Engine, string) {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root for real sandboxes")
	}
	dir := b.TempDir()
	ws := filepath.Join(dir, "ws")
	if err := os.MkdirAll(ws, 0o755); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ws, "f.txt"), []byte("hello\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	st, bl, be := openStack(b, dir)
	eng, err := engine.New(engine.Options{Store: st, Blobs: bl, Backend: be, OnEvents: engine.EachEvent(onEvent), WrapProvider: wrap})
	if err != nil {
		b.Fatal(err)
	}
	return eng, ws
}

// BenchmarkStepEdit is a step whose command appends a line to one file,
// and so is followed by a checkpoint, in a copy-on-write workspace of one
// file and in one shaped like a repository (many small text files and a
// few large ones, half compressible; AIRLOCK_BENCH_TREE_MB, default 1024,
// kept between runs under the system's temporary directory). Issue 22's
// target: the step costs at most 1.2x in the large workspace what it
// costs in the small one, and adds at most 1 MiB to the store:
//
//	go test -run '^$' -bench StepEdit -benchtime 20x ./internal/engine
func BenchmarkStepEdit(b *testing.B) {
	mb := 1024
	if v, err := strconv.Atoi(os.Getenv("AIRLOCK_BENCH_TREE_MB")); err == nil && v > 0 {
		mb = v
	}
	for _, bc := range []struct {
		name string
		mb   int
	}{{"1_file", 0}, {fmt.Sprintf("%dMiB", mb), mb}} {
		b.Run(bc.name, func(b *testing.B) {
			var first, last time.Time
			var n int
			var stored int64
			eng, ws := benchEngine(b, func(e event.Event) {
				switch e.Type {
				case event.TypeToolFinished:
					if strings.Contains(string(e.Payload), `"tool":"finish"`) {
						return
					}
					if n++; n == 1 {
						first = time.Now()
					}
					last = time.Now()
				case event.TypeSnapshotTaken:
					var s event.SnapshotTaken
					if err := json.Unmarshal(e.Payload, &s); err == nil && !s.Start && n > 0 {
						stored += s.Size
					}
				}
			}, nil)
			if bc.mb > 0 {
				ws = repoTree(b, bc.mb)
			}
			steps := max(b.N, 2)
			var s strings.Builder
			s.WriteString("turns:\n")
			for range steps {
				s.WriteString("  - tool_calls: [{name: run_command, args: {command: \"echo line >> notes.txt\"}}]\n")
			}
			s.WriteString("  - tool_calls: [{name: finish, args: {summary: done}}]\n")
			r, err := eng.Create(context.Background(), engine.Request{
				Task: "bench", Script: []byte(s.String()),
				Config: engine.Config{Model: "script:bench", MaxSteps: steps + 1, Sandboxes: []engine.SandboxConfig{{Name: "main", Workspace: ws}}},
			})
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			o, err := eng.Drive(context.Background(), r.ID)
			if err != nil || o.Status != event.StatusCompleted {
				b.Fatalf("Drive = %v (%s), %v", o.Status, o.Reason, err)
			}
			b.ReportMetric(float64(last.Sub(first).Microseconds())/1000/float64(n-1), "ms/step")
			b.ReportMetric(float64(stored)/float64(n-1)/1024, "KiB-stored/step")
		})
	}
}

// repoTree returns a directory of about mb MiB shaped like a repository
// with its dependencies: per MiB, twenty text files of 1–20 KiB in nested
// directories (source), and the rest in files of a few MiB, half of them
// random (binaries, packs) and half text. It is made once and kept under
// the system's temporary directory for later runs.
func repoTree(b *testing.B, mb int) string {
	b.Helper()
	dir := filepath.Join(os.TempDir(), fmt.Sprintf("airlock-bench-repo-%dm", mb))
	if _, err := os.Stat(filepath.Join(dir, ".complete")); err == nil {
		return dir
	}
	_ = os.RemoveAll(dir)
	rnd := mrand.New(mrand.NewPCG(1, uint64(mb)))
	text := func(n int) []byte {
		words := []string{"func", "return", "if err != nil {", "}", "package", "import", "the", "value", "\n", "\t"}
		var s []byte
		for len(s) < n {
			s = append(s, words[rnd.IntN(len(words))]...)
			s = append(s, ' ')
		}
		return s[:n]
	}
	var total int64
	limit := int64(mb) << 20
	for i := 0; total < limit*15/100; i++ {
		p := filepath.Join(dir, "src", fmt.Sprintf("m%02d", i%50), fmt.Sprintf("d%02d", i%7), fmt.Sprintf("f%05d.go", i))
		data := text(1<<10 + rnd.IntN(19<<10))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(data))
	}
	for i := 0; total < limit; i++ {
		size := min(int64(2<<20+rnd.IntN(6<<20)), limit-total)
		data := make([]byte, size)
		if i%2 == 0 {
			for j := range data {
				data[j] = byte(rnd.Uint32())
			}
		} else {
			copy(data, text(int(size)))
		}
		p := filepath.Join(dir, "deps", fmt.Sprintf("blob%04d.bin", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			b.Fatal(err)
		}
		total += size
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("notes\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ".complete"), nil, 0o644); err != nil {
		b.Fatal(err)
	}
	return dir
}
