package execproto

import "errors"

// The sandbox's event channel. Processes in the sandbox connect to the unix
// stream socket EventSocket and write newline-terminated lines (JSON, by
// convention: the host decides what a line means, the executor only frames
// them). The executor holds at most MaxEventQueue lines (MaxEventQueueBytes
// bytes) that the host has not taken, accepts at most EventRate lines a second (bursts of EventBurst) from
// the whole sandbox, and at most MaxEventConns connections at once; a line
// longer than MaxEventLine bytes is dropped whole. What does not fit is
// dropped and counted, never waited for: a writer in the sandbox is never
// blocked by a host that reads slowly or not at all.
//
// An events stream (OpEvents) hands the host the queued lines, one per Data
// frame on Stdout, without the newline, and, on Stderr, an EventDrops with
// the counts since the executor started whenever they change. One events
// stream runs at a time; a second is refused with EBUSY.
const (
	// EventSocket is the socket's path inside the sandbox.
	EventSocket = "/run/airlock/events"
	// EventHelper is the path of the airlock-event command inside the
	// sandbox (the executor's own binary, bound read-only; it acts as the
	// helper when called by that name). Its directory is on every
	// command's default PATH.
	EventHelper = "/run/airlock/bin/airlock-event"

	MaxEventLine  = 16 << 10
	MaxEventQueue = 1024
	// MaxEventQueueBytes bounds the bytes of the queued lines: the
	// executor's memory, charged to the sandbox, stays small whatever
	// the lines' length.
	MaxEventQueueBytes = 1 << 20
	MaxEventConns      = 64
	EventRate          = 200
	EventBurst         = 1000
)

// EventDrops counts lines the executor dropped, since it started, by reason.
type EventDrops struct {
	// Oversize lines were longer than MaxEventLine.
	Oversize int64 `json:"oversize,omitempty"`
	// Rate lines came faster than EventRate (beyond EventBurst).
	Rate int64 `json:"rate,omitempty"`
	// Queue lines found the queue for the host full (MaxEventQueue lines
	// or MaxEventQueueBytes bytes).
	Queue int64 `json:"queue,omitempty"`
	// Conns counts connections refused because MaxEventConns were open.
	Conns int64 `json:"conns,omitempty"`
}

// Total is the number of lines and connections dropped.
func (d EventDrops) Total() int64 { return d.Oversize + d.Rate + d.Queue + d.Conns }

// Validate checks counts the host read from the executor.
func (d *EventDrops) Validate() error {
	if d.Oversize < 0 || d.Rate < 0 || d.Queue < 0 || d.Conns < 0 {
		return errors.New("event drops: negative count")
	}
	return nil
}
