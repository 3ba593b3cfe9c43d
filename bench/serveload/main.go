// Command serveload puts load on a running airlock serve over loopback and
// reports latencies: N scripted runs created at once (the create call's
// latency, sandbox start excluded, and the time until all completed), then
// M SSE subscribers on one run (each event's delivery latency: receipt time
// minus the event's commit time in the log). bench/serve.sh runs it.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/client"
	"github.com/airlockrun/airlock/internal/event"
)

const quick = `turns:
  - tool_calls:
      - name: run_command
        args: {command: "echo hello > out.txt"}
  - tool_calls:
      - name: finish
        args: {summary: done}
`

func main() {
	url := flag.String("url", "http://127.0.0.1:8080", "server")
	key := flag.String("key", os.Getenv("AIRLOCK_API_KEY"), "API key")
	runs := flag.Int("runs", 100, "runs created at once")
	subs := flag.Int("subs", 1000, "SSE subscribers on one run")
	steps := flag.Int("steps", 10, "steps of the streamed run")
	createOnly := flag.Bool("create-only", false, "only create the runs and report the creation latency (a server with no workers: the API's own cost)")
	warmup := flag.Int("warmup", 0, "create (and complete) this many runs at once first, uncounted: the server's first requests pay for its own start")
	metricsKey := flag.String("metrics-key", "", "an admin API key: also report the server's own delivery time (airlock_api_event_delivery_seconds: committed event in the feed to its write on a stream) over the subscriber phase")
	keepAlive := flag.Bool("keep-alive", false, "open one kept-alive connection per run before creating them (a client that reuses connections), so creation is not also a TCP connect")
	cpuProfile := flag.String("cpuprofile", "", "write the load generator's CPU profile to this file")
	probes := flag.Int("probes", 100, "while the runs created at once execute, create this many more one at a time, each timed: the API's creation latency under the load of the runs in flight")
	probeEvery := flag.Duration("probe-every", 20*time.Millisecond, "the interval between two probes (a slower create delays the next)")
	eventsOut := flag.String("events-out", "", "write the streamed run's event log to this file (JSON lines), for bench/ssefloor to replay")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			fail(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fail(err)
		}
		defer pprof.StopCPUProfile()
	}
	// Without -keep-alive, every request dials (the client would keep a
	// few connections).
	opts := client.Options{Timeout: 5 * time.Minute, HTTPClient: &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}}
	if *keepAlive {
		tr := &http.Transport{MaxIdleConns: *runs, MaxIdleConnsPerHost: *runs, IdleConnTimeout: time.Minute}
		opts.HTTPClient = &http.Client{Transport: tr}
		var warm sync.WaitGroup
		for range *runs {
			warm.Go(func() {
				resp, err := opts.HTTPClient.Get(*url + "/healthz")
				if err != nil {
					fail(err)
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			})
		}
		warm.Wait()
	}
	c, err := client.New(*url, *key, opts)
	if err != nil {
		fail(err)
	}
	ctx := context.Background()

	// Phase 1: runs created at once (after a warm-up batch, when asked
	// for, created and completed the same way but not counted).
	var wg sync.WaitGroup
	create := func(n int) ([]time.Duration, []string) {
		lat := make([]time.Duration, n)
		ids := make([]string, n)
		for i := range n {
			wg.Go(func() {
				t := time.Now()
				r, err := c.CreateRun(ctx, api.CreateRunRequest{Task: fmt.Sprintf("load %d", i), Script: quick})
				lat[i] = time.Since(t)
				if err != nil {
					fail(err)
				}
				ids[i] = r.ID
			})
		}
		wg.Wait()
		return lat, ids
	}
	// watch waits for each run in the background, counting those still
	// in flight; on.Wait waits for them all.
	var inFlight atomic.Int64
	watch := func(ids []string, on *sync.WaitGroup) {
		inFlight.Add(int64(len(ids)))
		for _, id := range ids {
			on.Go(func() {
				defer inFlight.Add(-1)
				end, err := c.Follow(ctx, id, 0, func(event.Event) error { return nil })
				if err != nil {
					fail(err)
				}
				if end.Status != event.StatusCompleted {
					fail(fmt.Errorf("run %s ended %s", id, end.Status))
				}
			})
		}
	}
	await := func(ids []string) {
		watch(ids, &wg)
		wg.Wait()
	}
	if *warmup > 0 {
		_, ids := create(*warmup)
		if !*createOnly {
			await(ids)
		}
	}
	// -runs 0 goes straight to the subscribers (bench/ssefloor has
	// nothing else).
	if *runs > 0 {
		start := time.Now()
		lat, ids := create(*runs)
		created := time.Since(start)
		if *createOnly {
			fmt.Printf("runs created at once:   %d in %v, no workers\n", *runs, created.Round(time.Millisecond))
			fmt.Printf("run creation latency:   p50 %v  p99 %v  max %v\n", pct(lat, 50), pct(lat, 99), pct(lat, 100))
			return
		}
		var burst sync.WaitGroup
		watch(ids, &burst)
		// Probes: runs created one at a time while those execute, the
		// latency an API client sees while the server drives them. Their
		// own runs are not in the completion time.
		var probeLat []time.Duration
		var probeIDs []string
		var loads []int
		tick := time.NewTicker(*probeEvery)
		for range *probes {
			loads = append(loads, int(inFlight.Load()))
			t := time.Now()
			r, err := c.CreateRun(ctx, api.CreateRunRequest{Task: "probe", Script: quick})
			probeLat = append(probeLat, time.Since(t))
			if err != nil {
				fail(err)
			}
			probeIDs = append(probeIDs, r.ID)
			<-tick.C
		}
		tick.Stop()
		watch(probeIDs, &wg)
		burst.Wait()
		completed := time.Since(start)
		wg.Wait()
		fmt.Printf("runs created at once:   %d in %v; all completed after %v\n", *runs, created.Round(time.Millisecond), completed.Round(time.Millisecond))
		fmt.Printf("run creation latency:   p50 %v  p99 %v  max %v\n", pct(lat, 50), pct(lat, 99), pct(lat, 100))
		if len(probeLat) > 0 {
			slices.Sort(loads)
			fmt.Printf("  one at a time while they ran (%d, one every %v; runs in flight %d-%d, median %d): p50 %v  p99 %v  max %v\n",
				len(probeLat), *probeEvery, loads[0], loads[len(loads)-1], loads[len(loads)/2], pct(probeLat, 50), pct(probeLat, 99), pct(probeLat, 100))
		}
	}
	if *subs == 0 {
		return
	}

	// Phase 2: subscribers on one run.
	// The first step waits for the subscribers to connect; only events
	// committed after all of them did count.
	script := "turns:\n  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 3\"}\n"
	for range *steps {
		script += "  - tool_calls:\n      - name: run_command\n        args: {command: \"sleep 0.2; echo step\"}\n"
	}
	script += "  - tool_calls:\n      - name: finish\n        args: {summary: done}\n"
	r, err := c.CreateRun(ctx, api.CreateRunRequest{Task: "streamed", Script: script})
	if err != nil {
		fail(err)
	}
	// The server's histogram is read before the subscribers join, and
	// again once the steady state begins (settle after the last joined).
	var before map[float64]float64
	steadyBefore := make(chan map[float64]float64, 1)
	if *metricsKey != "" {
		before = deliveryBuckets(*url, *metricsKey)
	}
	var mu sync.Mutex
	var delivery, steady []time.Duration
	var joined atomic.Int64
	var barrier atomic.Pointer[time.Time]
	for range *subs {
		wg.Go(func() {
			var mine, mineSteady []time.Duration
			first := true
			err := follow(ctx, *url, *key, r.ID, func(at time.Time) {
				now := time.Now()
				if first {
					first = false
					if joined.Add(1) == int64(*subs) {
						barrier.Store(&now)
						if *metricsKey != "" {
							time.AfterFunc(settle, func() { steadyBefore <- deliveryBuckets(*url, *metricsKey) })
						}
					}
				}
				if b := barrier.Load(); b != nil && at.After(*b) {
					mine = append(mine, now.Sub(at))
					if at.After(b.Add(settle)) {
						mineSteady = append(mineSteady, now.Sub(at))
					}
				}
			})
			if err != nil {
				fail(err)
			}
			mu.Lock()
			delivery = append(delivery, mine...)
			steady = append(steady, mineSteady...)
			mu.Unlock()
		})
	}
	wg.Wait()
	if *eventsOut != "" {
		if err := writeLog(ctx, c, r.ID, *eventsOut); err != nil {
			fail(err)
		}
	}
	fmt.Printf("SSE subscribers:        %d on one run, %d deliveries after all had joined\n", *subs, len(delivery))
	fmt.Printf("event delivery latency: p50 %v  p99 %v  max %v\n", pct(delivery, 50), pct(delivery, 99), pct(delivery, 100))
	fmt.Printf("  from %v after the last joined (%d deliveries): p50 %v  p99 %v  max %v  within 20ms %.1f%%\n", settle, len(steady),
		pct(steady, 50), pct(steady, 99), pct(steady, 100), within(steady, 20*time.Millisecond))
	if *metricsKey != "" {
		after := deliveryBuckets(*url, *metricsKey)
		since := func(from map[float64]float64) map[float64]float64 {
			d := maps.Clone(after)
			for le, n := range from {
				d[le] -= n
			}
			return d
		}
		all, st := since(before), since(<-steadyBefore)
		fmt.Printf("server side, committed to written (%.0f writes, joins included): p50 %s  p99 %s\n", all[math.Inf(1)],
			bucketQuantile(all, 0.50), bucketQuantile(all, 0.99))
		fmt.Printf("  from %v after the last joined (%.0f writes): p50 %s  p99 %s  within 20ms %.1f%%\n", settle, st[math.Inf(1)],
			bucketQuantile(st, 0.50), bucketQuantile(st, 0.99), 100*st[0.02]/max(st[math.Inf(1)], 1))
	}
}

// writeLog writes run id's event log to path, an event a line.
func writeLog(ctx context.Context, c *client.Client, id, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for after := int64(0); ; {
		page, err := c.Events(ctx, id, after, 0)
		if err != nil {
			f.Close()
			return err
		}
		for _, ev := range page.Events {
			if err := enc.Encode(ev); err != nil {
				f.Close()
				return err
			}
		}
		after = page.NextAfter
		if !page.More {
			break
		}
	}
	return f.Close()
}

// within returns the percentage of d at most limit.
func within(d []time.Duration, limit time.Duration) float64 {
	n := 0
	for _, v := range d {
		if v <= limit {
			n++
		}
	}
	return 100 * float64(n) / float64(max(len(d), 1))
}

// deliveryBuckets reads the server's event delivery histogram: cumulative
// counts by upper bound.
func deliveryBuckets(base, key string) map[float64]float64 {
	req, err := http.NewRequest("GET", base+"/metrics", nil)
	if err != nil {
		fail(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		fail(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fail(fmt.Errorf("/metrics: %s", resp.Status))
	}
	const prefix = `airlock_api_event_delivery_seconds_bucket{le="`
	buckets := map[float64]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), prefix)
		if !ok {
			continue
		}
		le, count, _ := strings.Cut(rest, `"} `)
		bound, err1 := strconv.ParseFloat(le, 64)
		n, err2 := strconv.ParseFloat(count, 64)
		if err1 != nil || err2 != nil {
			fail(fmt.Errorf("/metrics: %q", sc.Text()))
		}
		buckets[bound] = n
	}
	if err := sc.Err(); err != nil {
		fail(err)
	}
	return buckets
}

// bucketQuantile estimates quantile q of a cumulative histogram by linear
// interpolation within the bucket that holds it.
func bucketQuantile(buckets map[float64]float64, q float64) string {
	bounds := slices.Sorted(maps.Keys(buckets))
	total := buckets[math.Inf(1)]
	if total == 0 {
		return "-"
	}
	want := q * total
	prevBound, prevCount := 0.0, 0.0
	for _, b := range bounds {
		n := buckets[b]
		if n >= want {
			if math.IsInf(b, 1) {
				return fmt.Sprintf("> %v", time.Duration(prevBound*float64(time.Second)))
			}
			v := prevBound + (b-prevBound)*(want-prevCount)/max(n-prevCount, 1)
			return time.Duration(v * float64(time.Second)).Round(10 * time.Microsecond).String()
		}
		prevBound, prevCount = b, n
	}
	return "-"
}

// follow reads run id's event stream until its end event and calls fn with
// each event's recorded time. It is a load generator's reader, lean on
// purpose: it parses the SSE lines and the event's "time" field only, so
// that a thousand of them on the server's own cores cost little beside the
// server (client.Follow decodes and checks every event in full).
func follow(ctx context.Context, base, key, id string, fn func(time.Time)) error {
	req, err := http.NewRequestWithContext(ctx, "GET", base+"/v1/runs/"+id+"/events/stream", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := streamClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("stream of %s: %s", id, resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	end := false
	for sc.Scan() {
		line := sc.Bytes()
		switch {
		case bytes.Equal(line, []byte("event: end")):
			end = true
		case end && bytes.HasPrefix(line, []byte("data: ")):
			return nil
		case bytes.HasPrefix(line, []byte("data: ")):
			_, rest, ok := bytes.Cut(line, []byte(`"time":"`))
			v, _, ok2 := bytes.Cut(rest, []byte(`"`))
			if !ok || !ok2 {
				return fmt.Errorf("stream of %s: an event without a time: %.80s", id, line)
			}
			t, err := time.Parse(time.RFC3339Nano, string(v))
			if err != nil {
				return fmt.Errorf("stream of %s: %w", id, err)
			}
			fn(t)
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}
	return fmt.Errorf("stream of %s ended without its end event", id)
}

// streamClient keeps no idle connections: each subscriber has its own.
var streamClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: -1, DisableCompression: true}}

// settle is how long after the last subscriber joined the steady state is
// taken to begin: the thousand streams' catch-up reads are done by then.
const settle = time.Second

func pct(d []time.Duration, p int) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := (len(s) - 1) * p / 100
	return s[i].Round(10 * time.Microsecond)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "serveload:", err)
	os.Exit(1)
}
