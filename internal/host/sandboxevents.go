package host

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/policy"
	"github.com/airlockrun/airlock/internal/report"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// SandboxEventsFile is the file, in an `airlock sandbox create` sandbox's
// state directory, where its supervisor keeps what the sandbox reported
// through its event channel (airlock-event): JSON lines of
// SandboxEventLine, appended as they come, for `airlock sandbox events`.
// It goes with the state directory when the sandbox ends.
const SandboxEventsFile = "events.jsonl"

// MaxSandboxEventsFile bounds the file: past it, events are counted in
// the last line's Omitted, not written.
const MaxSandboxEventsFile = 16 << 20

// SandboxEventLine is one line of SandboxEventsFile: an event the host
// accepted (seq, time, event), or the drop counts when they changed, or,
// last, Ended with the final counts.
type SandboxEventLine struct {
	*api.SandboxEvent
	Dropped *event.SandboxEventsDropped `json:"dropped,omitempty"`
	// Omitted counts accepted events not written: the file was full.
	Omitted uint64 `json:"omitted,omitempty"`
	Ended   bool   `json:"ended,omitempty"`
}

// sandboxEventFile is the EventSink of an `airlock sandbox create`
// sandbox: lines pass the default policy's filter and secret scanner in a
// report.Log (as an MCP sandbox's do), and what it keeps is appended to
// the file.
type sandboxEventFile struct {
	log *report.Log
	mu  sync.Mutex
	f   *os.File // guarded by mu
	// seen is the Seq of the last entry handled; dropped the counts last
	// written; size the file's; omitted what did not fit.
	seen    uint64
	dropped event.SandboxEventsDropped
	size    int64
	omitted uint64
}

// OpenSandboxEvents creates SandboxEventsFile in dir, the state directory
// of sandbox id, and returns the sink that fills it and end, which writes
// the last line and closes it once nothing more comes.
func OpenSandboxEvents(dir, id string) (sandbox.EventSink, func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, SandboxEventsFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, fmt.Errorf("sandbox events: %w", err)
	}
	d := policy.Default()
	e := &sandboxEventFile{log: report.NewLog(d.Events, id, 0, d.ResultScanner()), f: f}
	e.dropped = e.log.After(0, 0).Dropped
	return e, e.end, nil
}

func (e *sandboxEventFile) Line(line []byte, now time.Time) {
	e.log.Line(line, now)
	e.write(false)
}

func (e *sandboxEventFile) Executor(oversize, rate, queue, conns int64) {
	e.log.Executor(oversize, rate, queue, conns)
	e.write(false)
}

func (e *sandboxEventFile) end() {
	e.log.End()
	e.write(true)
	e.mu.Lock()
	defer e.mu.Unlock()
	_ = e.f.Close()
}

// write appends what the log holds that the file lacks; with ended, the
// last line.
func (e *sandboxEventFile) write(ended bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	snap := e.log.After(e.seen, 0)
	var buf []byte
	add := func(l SandboxEventLine, always bool) {
		b, err := json.Marshal(l)
		if err != nil {
			return
		}
		if !always && e.size+int64(len(buf)+len(b)+1) > MaxSandboxEventsFile {
			if l.SandboxEvent != nil {
				e.omitted++
			}
			return
		}
		buf = append(append(buf, b...), '\n')
	}
	for _, en := range snap.Events {
		add(SandboxEventLine{SandboxEvent: &api.SandboxEvent{Seq: en.Seq, Time: en.Time, Event: en.Event}}, false)
		e.seen = en.Seq
	}
	if ended {
		d := snap.Dropped
		add(SandboxEventLine{Dropped: &d, Omitted: e.omitted, Ended: true}, true)
	} else if snap.Dropped != e.dropped {
		d := snap.Dropped
		add(SandboxEventLine{Dropped: &d}, false)
		e.dropped = d
	}
	if len(buf) > 0 {
		n, _ := e.f.Write(buf)
		e.size += int64(n)
	}
}
