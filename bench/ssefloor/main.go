// Command ssefloor is the floor of bench/serve.sh's event delivery on the
// machine it runs on: a bare net/http server that replays a run's event
// log, recorded from airlock serve (serveload -events-out), to server-sent
// event subscribers with the log's own timing and commit batches, and
// nothing else: no store, no engine, no sandbox, no authentication. Each
// subscriber's handler is woken by a channel and writes and flushes the
// frames it has not sent, as airlock's streams do. It speaks just enough
// of the API for serveload's subscriber phase: POST /v1/runs starts the
// replay, GET /v1/runs/{id}/events/stream streams it, and /metrics has the
// delivery histogram airlock serve has, measured the same way (an event
// published to its write on a stream open at the time).
//
// An event's time is when the replay publishes it: the floor has no commit
// to wait for, so it is a floor of the end-to-end delivery too.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/server"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:0", "address")
	events := flag.String("events", "", "the run's event log: JSON lines, one event each (serveload -events-out)")
	flag.Parse()
	batches, err := load(*events)
	if err != nil {
		log.Fatal(err)
	}
	f := &floor{
		batches: batches, wake: map[chan struct{}]struct{}{},
		delivery: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "airlock_api_event_delivery_seconds",
			Help:    "Time from an event's publication to its write on an event stream open at the time (as airlock serve's).",
			Buckets: server.DeliveryBuckets,
		}),
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(f.delivery)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /readyz", func(http.ResponseWriter, *http.Request) {})
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("POST /v1/runs", f.create)
	mux.HandleFunc("GET /v1/runs/{id}/events/stream", f.stream)
	log.Fatal(http.ListenAndServe(*listen, mux))
}

// batch is a commit of the recorded run: its events, and when it came
// after the log's first.
type batch struct {
	after  time.Duration
	events []event.Event
}

// load reads a log and groups its events into commits: the engine gives a
// commit's events one time.
func load(path string) ([]batch, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []batch
	var first time.Time
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), event.MaxEncodedSize+1)
	for sc.Scan() {
		var ev event.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if first.IsZero() {
			first = ev.Time
		}
		if n := len(out); n > 0 && out[n-1].events[0].Time.Equal(ev.Time) {
			out[n-1].events = append(out[n-1].events, ev)
			continue
		}
		out = append(out, batch{after: ev.Time.Sub(first), events: []event.Event{ev}})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no events", path)
	}
	return out, nil
}

type floor struct {
	batches  []batch
	delivery prometheus.Histogram
	started  sync.Once

	mu sync.Mutex
	// frames are the events published so far, encoded; at[i] is when
	// frames[i] was; done is set once the last is.
	frames [][]byte
	at     []time.Time
	done   bool
	wake   map[chan struct{}]struct{}
}

func (f *floor) create(w http.ResponseWriter, _ *http.Request) {
	ev := f.batches[0].events[0]
	f.started.Do(func() { go f.replay() }) // one run: a second create gets the same one
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	json.NewEncoder(w).Encode(api.Run{ID: ev.RunID, Status: event.StatusQueued, Created: time.Now(), Updated: time.Now()})
}

// replay publishes the log's commits with their recorded spacing, each
// event stamped with the time it is published.
func (f *floor) replay() {
	start := time.Now()
	for _, b := range f.batches {
		time.Sleep(time.Until(start.Add(b.after)))
		now := time.Now()
		var frames [][]byte
		for _, ev := range b.events {
			ev.Time = now
			data, err := json.Marshal(ev)
			if err != nil {
				log.Fatal(err)
			}
			frames = append(frames, fmt.Appendf(nil, "id: %d\nevent: %s\ndata: %s\n\n", ev.Seq, ev.Type, data))
		}
		f.mu.Lock()
		f.frames = append(f.frames, frames...)
		for range frames {
			f.at = append(f.at, now)
		}
		for ch := range f.wake {
			select {
			case ch <- struct{}{}:
			default:
			}
		}
		f.mu.Unlock()
	}
	f.mu.Lock()
	f.done = true
	for ch := range f.wake {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	f.mu.Unlock()
}

func (f *floor) stream(w http.ResponseWriter, r *http.Request) {
	ch := make(chan struct{}, 1)
	ch <- struct{}{} // what was published before it joined
	f.mu.Lock()
	f.wake[ch] = struct{}{}
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		delete(f.wake, ch)
		f.mu.Unlock()
	}()
	joined := time.Now()
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, 32<<10)
	flusher := w.(http.Flusher)
	sent := 0
	for {
		select {
		case <-r.Context().Done():
			return
		case <-ch:
		}
		f.mu.Lock()
		frames, at, done := f.frames[sent:], f.at[sent:], f.done
		f.mu.Unlock()
		for _, fr := range frames {
			bw.Write(fr)
		}
		if done {
			fmt.Fprintf(bw, "event: end\ndata: {\"status\":\"completed\"}\n\n")
		}
		if err := bw.Flush(); err != nil {
			return
		}
		flusher.Flush()
		now := time.Now()
		for _, t := range at {
			if t.After(joined) {
				f.delivery.Observe(now.Sub(t).Seconds())
			}
		}
		sent += len(frames)
		if done {
			return
		}
	}
}
