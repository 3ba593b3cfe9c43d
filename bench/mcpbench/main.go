// Command mcpbench measures a run_command of `true` through `airlock mcp`
// over stdio (one session, one sandbox, the official Go SDK's client)
// against `airlock sandbox exec ID -- true` in a sandbox of `airlock
// sandbox create`, and prints the p50 and p90 of each and the ratio of
// the p50s. bench/mcp.sh runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

func main() {
	bin := flag.String("airlock", "bin/airlock", "the airlock binary")
	n := flag.Int("n", 200, "calls of each")
	flag.Parse()
	if err := run(*bin, *n); err != nil {
		fmt.Fprintln(os.Stderr, "mcpbench:", err)
		os.Exit(1)
	}
}

func run(bin string, n int) error {
	ctx := context.Background()
	cs, err := sdk.NewClient(&sdk.Implementation{Name: "mcpbench", Version: "1"}, nil).
		Connect(ctx, &sdk.CommandTransport{Command: exec.Command(bin, "mcp")}, nil)
	if err != nil {
		return fmt.Errorf("connect to airlock mcp: %w", err)
	}
	defer cs.Close()
	call := func() error {
		res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": "true"}})
		if err == nil && res.IsError {
			err = fmt.Errorf("run_command failed: %v", res.Content)
		}
		return err
	}
	if err := call(); err != nil { // creates the session's sandbox
		return err
	}
	viaMCP, err := measure(n, call)
	if err != nil {
		return err
	}

	out, err := exec.Command(bin, "sandbox", "create").Output()
	if err != nil {
		return fmt.Errorf("airlock sandbox create: %w", err)
	}
	id := strings.TrimSpace(string(out))
	defer exec.Command(bin, "sandbox", "rm", id).Run()
	viaExec, err := measure(n, func() error { return exec.Command(bin, "sandbox", "exec", id, "--", "true").Run() })
	if err != nil {
		return err
	}
	fmt.Printf("airlock mcp run_command true:  p50 %v  p90 %v  (n=%d)\n", pct(viaMCP, 50), pct(viaMCP, 90), n)
	fmt.Printf("airlock sandbox exec -- true:  p50 %v  p90 %v  (n=%d)\n", pct(viaExec, 50), pct(viaExec, 90), n)
	fmt.Printf("p50 ratio mcp/exec: %.2f (target <= 1.5)\n", float64(pct(viaMCP, 50))/float64(pct(viaExec, 50)))
	return nil
}

func measure(n int, f func() error) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t0))
	}
	slices.Sort(d)
	return d, nil
}

func pct(d []time.Duration, p int) time.Duration {
	return d[(len(d)-1)*p/100].Round(10 * time.Microsecond)
}
