// Command idle measures what idle sandboxes cost the host: it creates N
// sandboxes in one process (as airlock serve and the run engine hold them),
// leaves them idle, and reports the proportional set size (PSS) of their
// executors plus the growth of this process, per sandbox. Run as root:
//
//	go run ./bench/idle -n 500 -exec bin/airlock-exec
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/sandbox/linux"
)

func main() {
	n := flag.Int("n", 500, "number of idle sandboxes")
	workers := flag.Int("workers", 4, "concurrent creates")
	execPath := flag.String("exec", "bin/airlock-exec", "executor binary")
	spawner := flag.Bool("spawner", true, "start the sandboxes through a spawner process, as airlock serve does")
	flag.Parse()
	if err := run(*n, *workers, *execPath, *spawner); err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
}

func run(n, workers int, execPath string, spawner bool) error {
	execPath, err := filepath.Abs(execPath)
	if err != nil {
		return err
	}
	state, err := os.MkdirTemp("", "airlock-idle-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(state)
	defer func() { _ = linux.Forget(state) }() // its cgroup parent, once the sandboxes are gone
	b, err := linux.New(linux.Config{Executor: execPath, StateDir: state, Spawner: spawner})
	if err != nil {
		return err
	}
	runtime.GC()
	selfBefore, err := pss(os.Getpid())
	if err != nil {
		return err
	}
	ctx := context.Background()
	// Small limits: an idle sandbox needs little, and 500 of them must fit.
	spec := sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 64 << 20, Pids: 64, CPUs: 1, DiskBytes: 64 << 20, RequireHard: true}}
	var (
		mu   sync.Mutex
		sbs  []sandbox.Sandbox
		errs []error
	)
	start := time.Now()
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range jobs {
				sb, err := b.Create(ctx, spec)
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else {
					sbs = append(sbs, sb)
				}
				mu.Unlock()
			}
		}()
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	created := time.Since(start)
	defer func() {
		for _, sb := range sbs {
			_ = sb.Destroy(ctx)
		}
	}()
	if len(errs) > 0 {
		return fmt.Errorf("%d of %d creates failed, first: %w", len(errs), n, errs[0])
	}
	// Every sandbox answers, then all sit idle for a moment.
	for _, sb := range sbs {
		r, err := sandbox.Run(ctx, sb, sandbox.Command{Argv: []string{"/bin/true"}})
		if err != nil {
			return fmt.Errorf("sandbox %s: /bin/true: %w", sb.ID(), err)
		}
		if r.ExitCode != 0 {
			return fmt.Errorf("sandbox %s: /bin/true: %+v", sb.ID(), r)
		}
	}
	time.Sleep(2 * time.Second)
	runtime.GC()
	execs, helpers, err := executorPIDs(os.Getpid())
	if err != nil {
		return err
	}
	sum := func(pids []int) (int64, error) {
		var kib int64
		for _, p := range pids {
			k, err := pss(p)
			if err != nil {
				return 0, err
			}
			kib += k
		}
		return kib, nil
	}
	execKiB, err := sum(execs)
	if err != nil {
		return err
	}
	spawnerKiB, err := sum(helpers)
	if err != nil {
		return err
	}
	selfAfter, err := pss(os.Getpid())
	if err != nil {
		return err
	}
	per := func(kib int64) float64 { return float64(kib) / 1024 / float64(len(sbs)) }
	fmt.Printf("idle sandboxes:            %d (created in %.1fs, %d workers)\n", len(sbs), created.Seconds(), workers)
	fmt.Printf("executors found:           %d\n", len(execs))
	fmt.Printf("executor PSS per sandbox:  %.2f MiB\n", per(execKiB))
	fmt.Printf("host growth per sandbox:   %.2f MiB (PSS of this process: %.1f -> %.1f MiB)\n",
		per(selfAfter-selfBefore), float64(selfBefore)/1024, float64(selfAfter)/1024)
	if spawner {
		fmt.Printf("spawner per sandbox:       %.3f MiB (its PSS: %.1f MiB)\n", per(spawnerKiB), float64(spawnerKiB)/1024)
	}
	fmt.Printf("total per idle sandbox:    %.2f MiB (target: at most 2 MiB)\n", per(execKiB+spawnerKiB+selfAfter-selfBefore))
	return nil
}

// pss returns a process's proportional set size in KiB.
func pss(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "Pss:" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, errors.New("no Pss line")
}

// executorPIDs lists the executors among the descendants of parent: its
// airlock-exec children, or with a spawner (an airlock-exec child of
// parent), the spawner's children; helpers holds the spawner.
func executorPIDs(parent int) (execs, helpers []int, err error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, nil, err
	}
	children := map[int][]int{} // airlock-exec processes by parent
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...
		s := string(st)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || !strings.Contains(s[:i], "(airlock-exec") {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if pp, err := strconv.Atoi(f[1]); err == nil {
				children[pp] = append(children[pp], p)
			}
		}
	}
	for _, p := range children[parent] {
		if kids := children[p]; len(kids) > 0 {
			helpers = append(helpers, p)
			execs = append(execs, kids...)
		} else {
			execs = append(execs, p)
		}
	}
	return execs, helpers, nil
}
