package report

import (
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/secret/scan"
)

// DefaultLogSize is how many events a Log keeps when NewLog is given no
// size: the last ones, older ones are forgotten (and counted).
const DefaultLogSize = 1000

// Entry is one event a Log kept: its number in the sandbox's log (from 1,
// never reused) and when the host accepted it.
type Entry struct {
	Seq   uint64             `json:"seq"`
	Time  time.Time          `json:"time"`
	Event event.SandboxEvent `json:"event"`
}

// Log keeps the last events of a sandbox that runs outside any run (an
// MCP session's, an E2B sandbox), for the APIs that serve them: each line
// passes the same Filter a run's lines do (the policy's kinds, size and
// rate caps), and what is kept is marked as the sandbox's (untrusted data).
// It is safe for concurrent use: one goroutine adds lines, any number
// read and wait.
type Log struct {
	mu      sync.Mutex
	f       *Filter       // guarded by mu
	scan    *scan.Scanner // nil: the policy keeps secrets in results
	size    int           // ring's capacity
	ring    []Entry       // guarded by mu: the last size entries, oldest first
	next    uint64        // guarded by mu: the Seq of the next entry
	evicted uint64        // guarded by mu: entries forgotten for newer ones
	changed chan struct{} // guarded by mu: closed and replaced at each change
	ended   bool          // guarded by mu
	keep    func(Entry)   // guarded by mu: Persist's
}

// Persist makes l hand each entry it keeps from now on to keep, in order,
// once it is in the log: where the host stores a sandbox's events beyond
// its memory (the store, the audit log). keep runs outside l's lock, on
// the goroutine that adds lines.
func (l *Log) Persist(keep func(Entry)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.keep = keep
}

// Follow adds the entries of es (oldest first) newer than what l holds:
// entries of the same sandbox stored before (a log made again after a
// restart) or that another process keeps (a replica that holds the
// sandbox stores each as it comes), numbered as they were there: the
// numbering goes on after the last, a gap before one counts as evicted,
// and only the last size are kept. It hands none to Persist's keep; an
// ended log takes nothing.
func (l *Log) Follow(es []Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	added := false
	for _, e := range es {
		if l.ended || e.Seq < l.next {
			continue
		}
		l.evicted += e.Seq - l.next
		l.ring = append(l.ring, e)
		l.next = e.Seq + 1
		added = true
	}
	if !added {
		return
	}
	if drop := len(l.ring) - l.size; drop > 0 {
		l.evicted += uint64(drop)
		l.ring = append(l.ring[:0:0], l.ring[drop:]...)
	}
	l.notify()
}

// NewLog returns the log of sandbox under cfg, which keeps the last size
// events (DefaultLogSize when size is not positive), each redacted by sc
// as a run's are (Redact; nil keeps them as they came).
func NewLog(cfg policy.Events, sandbox string, size int, sc *scan.Scanner) *Log {
	if size <= 0 {
		size = DefaultLogSize
	}
	return &Log{f: NewFilter(cfg, sandbox), scan: sc, size: size, next: 1, changed: make(chan struct{})}
}

// Line takes a line the sandbox wrote at now: kept when the filter accepts
// it, counted when it refuses it. An artifact declaration is kept with
// Refused set: a sandbox outside a run has no artifact store, the file
// stays in the sandbox for its client to read.
func (l *Log) Line(line []byte, now time.Time) {
	e, keep, ok := l.line(line, now)
	if ok && keep != nil {
		keep(e)
	}
}

// line is Line under l's lock: the entry kept, if any, and Persist's keep.
func (l *Log) line(line []byte, now time.Time) (Entry, func(Entry), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return Entry{}, nil, false
	}
	ev, err := l.f.Accept(line, now)
	if err != nil {
		l.notify()
		return Entry{}, nil, false
	}
	Redact(l.scan, &ev)
	if ev.Kind == "artifact" {
		ev.Refused = "not stored: a sandbox outside a run keeps its files; read the path with the sandbox's file operations"
		l.f.RefuseArtifact()
	}
	e := Entry{Seq: l.next, Time: now.UTC(), Event: ev}
	l.ring = append(l.ring, e)
	l.next++
	if len(l.ring) > l.size {
		drop := len(l.ring) - l.size
		l.evicted += uint64(drop)
		l.ring = append(l.ring[:0:0], l.ring[drop:]...)
	}
	l.notify()
	return e, l.keep, true
}

// Executor takes the executor's drop counts (Filter.Executor).
func (l *Log) Executor(oversize, rate, queue, conns int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Executor(oversize, rate, queue, conns)
	l.notify()
}

// End marks the log ended (the sandbox is gone): nothing is added from
// then on, and waiters are woken.
func (l *Log) End() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.ended {
		l.ended = true
		l.notify()
	}
}

func (l *Log) notify() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// Snapshot is what a Log holds after a point.
type Snapshot struct {
	// Events are the kept entries of Seq above the asked one, oldest
	// first.
	Events []Entry
	// Next is the Seq the next event will get: ask for entries after
	// Next-1 to get only newer ones.
	Next uint64
	// Evicted counts events forgotten for newer ones (the log keeps the
	// last size).
	Evicted uint64
	// Dropped counts what the sandbox sent that was not kept.
	Dropped event.SandboxEventsDropped
	// Ended says the sandbox is gone: no event will follow.
	Ended bool
	// Changed is closed at the log's next change.
	Changed <-chan struct{}
}

// After returns the kept entries of Seq above after, at most limit of them
// (the oldest; all when limit is not positive).
func (l *Log) After(after uint64, limit int) Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := Snapshot{Next: l.next, Evicted: l.evicted, Dropped: l.f.Dropped(), Ended: l.ended, Changed: l.changed}
	for _, e := range l.ring {
		if e.Seq <= after {
			continue
		}
		if limit > 0 && len(s.Events) >= limit {
			break
		}
		s.Events = append(s.Events, e)
	}
	return s
}
