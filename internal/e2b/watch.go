package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// The filesystem service's watch methods: WatchDir streams a directory's
// changes; CreateWatcher, GetWatcherEvents and RemoveWatcher are its
// polling form. The watching itself is done inside the sandbox, by its
// executor (sandbox.Sandbox.Watch), with the sandbox user's rights.

type watchDirRequest struct {
	Path      string `json:"path"`
	Recursive bool   `json:"recursive"`
	// IncludeEntry asks for each event's EntryInfo (envd 0.6.3; the SDK
	// sends it only to newer envds, but other clients may).
	IncludeEntry bool `json:"includeEntry"`
}

// watcherRequest names a polling watcher; proto3 JSON parsers take the
// field's proto name as well as its JSON name.
type watcherRequest struct {
	WatcherID  string `json:"watcherId"`
	WatcherID2 string `json:"watcher_id"`
}

func (r watcherRequest) id() string {
	if r.WatcherID != "" {
		return r.WatcherID
	}
	return r.WatcherID2
}

type createWatcherResponse struct {
	WatcherID string `json:"watcherId"`
}

type watcherEventsResponse struct {
	Events []fsEvent `json:"events"`
}

// fsEvent is a FilesystemEvent: name is the path relative to the watched
// directory ("." for the directory itself), as envd sends it.
type fsEvent struct {
	Name  string     `json:"name"`
	Type  string     `json:"type"`
	Entry *entryInfo `json:"entry,omitempty"`
}

// watchDirResponse is a WatchDirResponse: a oneof, whose case is the one
// field set.
type watchDirResponse struct {
	Start      *struct{} `json:"start,omitempty"`
	Filesystem *fsEvent  `json:"filesystem,omitempty"`
	Keepalive  *struct{} `json:"keepalive,omitempty"`
}

// eventTypes maps the sandbox's events to the EventType enum.
var eventTypes = map[sandbox.WatchOp]string{
	sandbox.WatchCreate: "EVENT_TYPE_CREATE",
	sandbox.WatchWrite:  "EVENT_TYPE_WRITE",
	sandbox.WatchRemove: "EVENT_TYPE_REMOVE",
	sandbox.WatchRename: "EVENT_TYPE_RENAME",
	sandbox.WatchChmod:  "EVENT_TYPE_CHMOD",
}

// eventName is ev's path relative to the watched directory root.
func eventName(root, p string) string {
	if p == root {
		return "."
	}
	if root == "/" {
		return strings.TrimPrefix(p, "/")
	}
	return strings.TrimPrefix(p, root+"/")
}

// Bounds on polling watchers.
const (
	// maxPollWatchers bounds one sandbox's polling watchers.
	maxPollWatchers = 16
	// maxPollEvents bounds the events a polling watcher holds between two
	// GetWatcherEvents; past it they are counted as lost.
	maxPollEvents = 1000
)

// errEventsLost ends a stream, or answers a poll, whose events were lost
// (the sandbox dropped some, or a poller fell behind).
func errEventsLost(p string) *rpcError {
	return rpcErrorf(codeResourceExhaust, "%s: events were lost (too many changes at once, or a directory could not be watched); list the directory again", clip(p))
}

// watchError maps an error of sandbox.Watch to a Connect error; envd
// answers a path that is not a directory with not_found too.
func watchError(err error, p string) *rpcError {
	var fe *sandbox.FileError
	switch {
	case errors.As(err, &fe) && fe.Errno == "ENOTDIR":
		return rpcErrorf(codeNotFound, "%s: not a directory", clip(p))
	case errors.As(err, &fe) && (fe.Errno == "EMFILE" || fe.Errno == "ENOSPC"):
		return rpcErrorf(codeResourceExhaust, "%s: too many watches in this sandbox", clip(p))
	case errors.Is(err, sandbox.ErrLost):
		return rpcErrorf(codeUnavailable, "the sandbox is gone")
	case errors.Is(err, context.Canceled):
		return rpcErrorf(codeCanceled, "the request ended")
	}
	return fsError(err, p)
}

// serveWatch dispatches the watch methods of the filesystem service.
func (s *Server) serveWatch(w http.ResponseWriter, r *http.Request, c envdCall, method string) {
	audit := func(op, detail string, err *rpcError) {
		outcome := "ok"
		if err != nil {
			outcome = err.Code
		}
		s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: op, Outcome: outcome, Detail: clipDetail(detail)})
	}
	switch method {
	case "WatchDir":
		s.streamCall(w, r, func(ctx context.Context, msg []byte, st *stream) *rpcError {
			return s.watchDir(ctx, r, c, msg, st, audit)
		})
	case "CreateWatcher":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req watchDirRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			p, err := c.resolve(req.Path)
			if err != nil {
				return nil, rpcErrorf(codeInvalidArgument, "%s", err.Error())
			}
			id, rerr := s.createWatcher(ctx, c, p, req.Recursive)
			audit("files.watch", "poll "+p, rerr)
			if rerr != nil {
				return nil, rerr
			}
			return createWatcherResponse{WatcherID: id}, nil
		})
	case "GetWatcherEvents":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			pw, rerr := s.watcherOf(c, body)
			if rerr != nil {
				return nil, rerr
			}
			evs, rerr := pw.take()
			if pw.over() {
				s.watchers.remove(pw)
			}
			if rerr != nil {
				return nil, rerr
			}
			return watcherEventsResponse{Events: evs}, nil
		})
	case "RemoveWatcher":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			pw, rerr := s.watcherOf(c, body)
			if rerr != nil {
				return nil, rerr
			}
			s.watchers.remove(pw)
			audit("files.unwatch", "poll "+pw.path, nil)
			return struct{}{}, nil
		})
	}
}

// watchDir streams the changes under a directory: a start event once the
// watch is in place, then one event per change and keepalives when idle,
// until the client's deadline (Connect-Timeout-Ms: deadline_exceeded), the
// client's going, the sandbox's end (unavailable), or the directory's own
// removal (a clean end).
func (s *Server) watchDir(ctx context.Context, r *http.Request, c envdCall, msg []byte, st *stream, audit func(op, detail string, err *rpcError)) *rpcError {
	var req watchDirRequest
	if err := decodeMessage(msg, &req); err != nil {
		return err
	}
	p, err := c.resolve(req.Path)
	if err != nil {
		return rpcErrorf(codeInvalidArgument, "%s", err.Error())
	}
	d, rerr := connectTimeout(r)
	if rerr != nil {
		return rerr
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if d > 0 {
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	sb := c.lv.sb
	events, err := sb.Watch(ctx, p, req.Recursive)
	if err != nil {
		rerr := watchError(err, p)
		if errors.Is(err, context.DeadlineExceeded) {
			rerr = rpcErrorf(codeDeadlineExceeded, "the stream reached its timeout")
		}
		audit("files.watch", p, rerr)
		return rerr
	}
	audit("files.watch", p, nil)
	if st.send(watchDirResponse{Start: &struct{}{}}) != nil {
		return nil // the client is gone
	}
	every := s.keepaliveOf(r)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		var err error
		select {
		case ev, ok := <-events:
			if !ok {
				return watchEnd(ctx, sb, p)
			}
			if ev.Op == sandbox.WatchOverflow {
				return errEventsLost(p)
			}
			fe := fsEvent{Name: eventName(p, ev.Path), Type: eventTypes[ev.Op]}
			if req.IncludeEntry && ev.Op != sandbox.WatchRemove && ev.Op != sandbox.WatchRename {
				if fi, err := sb.Stat(ctx, ev.Path); err == nil {
					e := entryOf(ev.Path, fi)
					fe.Entry = &e
				}
			}
			err = st.send(watchDirResponse{Filesystem: &fe})
			tick.Reset(every)
		case <-tick.C:
			err = st.send(watchDirResponse{Keepalive: &struct{}{}})
		}
		if err != nil {
			return nil // the client is gone; nothing to tell it
		}
	}
}

// watchEnd says why a watch's channel was closed: the stream's deadline
// or end, the sandbox's end (its executor no longer answers), or else the
// watched directory's removal or move, a clean end.
func watchEnd(ctx context.Context, sb sandbox.Sandbox, p string) *rpcError {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return rpcErrorf(codeDeadlineExceeded, "the stream reached its timeout")
	case ctx.Err() != nil:
		return rpcErrorf(codeCanceled, "the request ended")
	}
	sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := sb.Stat(sctx, p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return rpcErrorf(codeUnavailable, "the sandbox is gone")
	}
	return nil
}

// pollWatcher is a watch whose events wait for GetWatcherEvents.
type pollWatcher struct {
	id     string
	box    string          // the sandbox's id
	sb     sandbox.Sandbox // the boot it watches: it dies with it
	path   string
	cancel context.CancelFunc

	mu sync.Mutex
	// events, lost and ended are guarded by mu.
	events []fsEvent
	lost   int  // events dropped since the last take
	ended  bool // the watch ended; what is left is the last to take
}

// take returns and forgets the events held, or the loss since the last
// take as an error (the events held then are dropped too: the client
// lists the directory again).
func (w *pollWatcher) take() ([]fsEvent, *rpcError) {
	w.mu.Lock()
	defer w.mu.Unlock()
	evs, lost := w.events, w.lost
	w.events, w.lost = nil, 0
	if lost > 0 {
		return nil, errEventsLost(w.path)
	}
	if evs == nil {
		evs = []fsEvent{}
	}
	return evs, nil
}

// over reports whether the watch has ended and everything was taken.
func (w *pollWatcher) over() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.ended && len(w.events) == 0 && w.lost == 0
}

// collect keeps what the watch reports until it ends.
func (w *pollWatcher) collect(events <-chan sandbox.WatchEvent) {
	for ev := range events {
		w.mu.Lock()
		switch {
		case ev.Op == sandbox.WatchOverflow || len(w.events) >= maxPollEvents:
			w.lost++
		default:
			w.events = append(w.events, fsEvent{Name: eventName(w.path, ev.Path), Type: eventTypes[ev.Op]})
		}
		w.mu.Unlock()
	}
	w.mu.Lock()
	w.ended = true
	w.mu.Unlock()
}

// watcherTable holds the polling watchers of every sandbox.
type watcherTable struct {
	mu sync.Mutex
	// byID is guarded by mu.
	byID map[string]*pollWatcher
}

func newWatcherTable() *watcherTable { return &watcherTable{byID: map[string]*pollWatcher{}} }

// find returns the watcher id of the sandbox and boot c is for; any other
// sandbox's is as absent as one that never existed.
func (t *watcherTable) find(c envdCall, id string) *pollWatcher {
	t.mu.Lock()
	defer t.mu.Unlock()
	w := t.byID[id]
	if w == nil || w.box != c.b.id || w.sb != c.lv.sb {
		return nil
	}
	return w
}

// remove ends w and forgets it.
func (t *watcherTable) remove(w *pollWatcher) {
	t.mu.Lock()
	delete(t.byID, w.id)
	t.mu.Unlock()
	w.cancel()
}

// prune forgets the watchers whose sandbox is gone.
func (t *watcherTable) prune() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id, w := range t.byID {
		if isDone(w.sb.Done()) {
			delete(t.byID, id)
			w.cancel()
		}
	}
}

// watcherOf finds the polled watcher a GetWatcherEvents or RemoveWatcher
// request (body) of caller c names.
func (s *Server) watcherOf(c envdCall, body []byte) (*pollWatcher, *rpcError) {
	var req watcherRequest
	if err := decodeMessage(body, &req); err != nil {
		return nil, err
	}
	pw := s.watchers.find(c, req.id())
	if pw == nil {
		return nil, rpcErrorf(codeNotFound, "watcher %q not found", clip(req.id()))
	}
	return pw, nil
}

// createWatcher starts a polling watcher of p in c's sandbox.
func (s *Server) createWatcher(ctx context.Context, c envdCall, p string, recursive bool) (string, *rpcError) {
	t := s.watchers
	t.prune()
	// The watch outlives the request that made it; the sandbox's end,
	// RemoveWatcher, or the Server's end (which destroys the sandbox)
	// ends it.
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	events, err := c.lv.sb.Watch(wctx, p, recursive)
	if err != nil {
		cancel()
		return "", watchError(err, p)
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	w := &pollWatcher{id: hex.EncodeToString(b[:]), box: c.b.id, sb: c.lv.sb, path: p, cancel: cancel}
	t.mu.Lock()
	n := 0
	for _, o := range t.byID {
		if o.box == c.b.id {
			n++
		}
	}
	if n < maxPollWatchers {
		t.byID[w.id] = w
	}
	t.mu.Unlock()
	if n >= maxPollWatchers {
		cancel()
		for range events {
		}
		return "", rpcErrorf(codeResourceExhaust, "this sandbox has %d watchers, the most it may; remove one first", n)
	}
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		w.collect(events)
	}()
	return w.id, nil
}
