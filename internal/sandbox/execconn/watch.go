package execconn

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Watch reports changes under the directory at path (and every directory
// below it, including ones made later, if recursive) on the returned
// channel. It returns once the watches are in place, so a change made after
// it returns is reported. The channel is closed when ctx ends, the
// connection ends, or the directory itself is removed or moved (after the
// event that says so). The caller must read the channel until it is closed
// or cancel ctx: an unread event holds the executor's send window, and the
// executor drops what does not fit its queue (sandbox.WatchOverflow).
//
// A path that does not exist is a *sandbox.FileError matching fs.ErrNotExist; one
// that is not a directory has Errno ENOTDIR.
func (c *Conn) Watch(ctx context.Context, path string, recursive bool) (<-chan sandbox.WatchEvent, error) {
	req := execproto.Request{Op: execproto.OpWatch, Path: path, Recursive: recursive}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	// The watch's own context also ends when the executor breaks the
	// protocol on it (watchWriter).
	wctx, cancel := context.WithCancel(ctx)
	ww := &watchWriter{ctx: wctx, cancel: cancel, ending: c.ending, events: make(chan sandbox.WatchEvent), started: make(chan struct{})}
	s, err := c.open(&req, ww, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	var res execproto.Result
	var werr error
	c.watchers.Add(1)
	go func() {
		defer c.watchers.Done()
		defer cancel()
		res, werr = s.wait(wctx)
		close(ww.events)
	}()
	select {
	case <-ww.started:
		return ww.events, nil
	case <-s.done:
	case <-ctx.Done():
	}
	if isClosed(ww.started) {
		// Started and already ending (the directory went away, say):
		// what it said is still to be read.
		return ww.events, nil
	}
	// Ended before it started: nothing comes before the start event, so
	// this only waits for the goroutine above.
	for range ww.events {
	}
	switch {
	case ctx.Err() != nil:
		return nil, fmt.Errorf("watch %s: %w", path, ctx.Err())
	case ww.bad:
		return nil, fmt.Errorf("watch %s: %w: a malformed event", path, execproto.ErrFrame)
	case werr != nil:
		return nil, fmt.Errorf("watch %s: %w", path, werr)
	case res.Error != "":
		return nil, &sandbox.FileError{Op: execproto.OpWatch, Path: path, Errno: res.Errno, Msg: res.Error}
	}
	return nil, fmt.Errorf("watch %s: %w: the executor ended the watch before it started", path, execproto.ErrFrame)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// watchWriter decodes a watch stream's data frames, one event each, and
// hands them to the consumer. The executor is untrusted: a frame that is
// not a valid event, or an event before the start event, cancels the watch.
// Write is called by the stream's one writer goroutine only.
type watchWriter struct {
	ctx     context.Context // the watch's: an event nobody reads any more is dropped
	cancel  func()          // ends ctx, which asks the executor to end the watch
	ending  <-chan struct{} // the connection's: nothing more comes
	events  chan sandbox.WatchEvent
	started chan struct{} // closed at the start event

	once sync.Once
	bad  bool // a protocol violation was seen; ignore the rest
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if w.bad {
		return len(p), nil
	}
	var ev execproto.WatchEvent
	err := execproto.Decode(p, &ev)
	if err == nil {
		err = ev.Validate()
	}
	started := isClosed(w.started)
	switch {
	case err == nil && ev.Op == execproto.WatchStart && !started:
		w.once.Do(func() { close(w.started) })
		return len(p), nil
	case err == nil && (ev.Op == execproto.WatchStart || !started):
		err = errors.New("start event out of place")
	}
	if err != nil {
		w.bad = true
		w.cancel()
		return len(p), nil
	}
	select {
	case w.events <- sandbox.WatchEvent{Op: sandbox.WatchOp(ev.Op), Path: ev.Path, Dir: ev.Dir}:
	case <-w.ctx.Done():
	case <-w.ending:
	}
	return len(p), nil
}

// DiskUsage reports how full the sandbox's writable layers are.
func (c *Conn) DiskUsage(ctx context.Context) (execproto.DiskUsage, error) {
	r, err := c.do(ctx, execproto.Request{Op: execproto.OpDiskUsage}, nil, nil)
	if err != nil {
		return execproto.DiskUsage{}, err
	}
	if r.Disk == nil || r.Disk.Used < 0 || r.Disk.Total < 0 {
		return execproto.DiskUsage{}, fmt.Errorf("disk usage: %w: malformed result", execproto.ErrFrame)
	}
	return *r.Disk, nil
}
