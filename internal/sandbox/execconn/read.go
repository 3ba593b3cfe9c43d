package execconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sync"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// maxHead bounds a read's head: an Entry without extended attributes,
// whose name is at most a path's last element.
const maxHead = 8 << 10

// errReaderClosed is what a Read of a closed file reader returns.
var errReaderClosed = errors.New("read of a closed file reader")

// Open opens the file at path to stream its content (sandbox.Sandbox.Open):
// a read with a head (execproto.Request.Head) in bulk frames. The stream
// is detached, as a relayed connection's is: the reader takes the data
// from the stream's inbox itself and returns the executor's credit as it
// does, so the host holds at most the stream's window of the file, and a
// reader that stops reading holds up only its own read (the connection's
// reader never waits for it). What the executor sends is checked against
// its head: no more than the size it gave (or than limit), and exactly
// that size before a successful end.
func (c *Conn) Open(ctx context.Context, path string, limit int64) (sandbox.FileReader, error) {
	req := execproto.Request{
		Op: execproto.OpRead, Path: path, Limit: limit, Head: true, User: sandbox.FileUser(ctx),
		Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize,
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s, err := c.openOutputs(&req, &outputs{detached: true})
	if err != nil {
		return nil, err
	}
	window, _ := req.Flow()
	r := &fileReader{s: s, ctx: ctx, path: path, limit: limit, credit: newStdoutCredit(window), closing: make(chan struct{})}
	r.stopCtx = context.AfterFunc(ctx, r.cancel)
	en, err := r.head()
	if err != nil {
		r.Close()
		return nil, err
	}
	r.size = en.Size
	r.info = infos([]execproto.Entry{en})[0]
	return r, nil
}

// fileReader is a file's content streamed from the executor (Open).
type fileReader struct {
	s       *stream
	ctx     context.Context
	stopCtx func() bool
	path    string
	limit   int64
	info    sandbox.FileInfo
	size    int64 // the head's: 0, to the end

	mu     sync.Mutex   // one Read at a time
	rest   []byte       // of the chunk being read
	got    int64        // bytes received
	credit stdoutCredit // what Read returned and has not credited
	err    error        // sticky: the read's end or failure

	closing    chan struct{}
	closeOnce  sync.Once
	cancelOnce sync.Once
}

// head waits for the read's head, the opened file's Entry on Stderr.
func (r *fileReader) head() (execproto.Entry, error) {
	var b []byte
	out := r.s.out
	for {
		c, ok, ended := out.TryGet()
		switch {
		case ok && c.Close && c.Channel == execproto.Stderr:
			var en execproto.Entry
			err := execproto.DecodeMessage(b, &en)
			if err == nil {
				err = checkHead(en, r.limit)
			}
			if err != nil {
				return en, fmt.Errorf("read %s: head: %w", r.path, err)
			}
			return en, nil
		case ok && c.Channel == execproto.Stderr && !c.Close:
			if len(b)+len(c.Data) > maxHead {
				return execproto.Entry{}, fmt.Errorf("read %s: %w: a head over %d bytes", r.path, execproto.ErrFrame, maxHead)
			}
			b = append(b, c.Data...)
			_ = r.s.send(execproto.AckFrame(r.s.id, c.Channel, uint32(len(c.Data))))
			continue
		case ok:
			return execproto.Entry{}, fmt.Errorf("read %s: %w: data before the head", r.path, execproto.ErrFrame)
		case ended:
			if err := readError(r.path, r.s.result, r.s.err); err != nil {
				return execproto.Entry{}, err
			}
			return execproto.Entry{}, fmt.Errorf("read %s: %w: the read ended without its head", r.path, execproto.ErrFrame)
		}
		select {
		case <-out.Ready():
		case <-r.ctx.Done():
			return execproto.Entry{}, fmt.Errorf("read %s: %w", r.path, r.ctx.Err())
		}
	}
}

// checkHead checks a read's head: a regular file within the limit.
func checkHead(en execproto.Entry, limit int64) error {
	switch {
	case !fs.FileMode(en.Mode).IsRegular():
		return fmt.Errorf("%w: mode %v, not a regular file", execproto.ErrFrame, fs.FileMode(en.Mode))
	case en.Size < 0:
		return fmt.Errorf("%w: size %d", execproto.ErrFrame, en.Size)
	case limit > 0 && en.Size > limit:
		return fmt.Errorf("%w: size %d over the limit of %d", execproto.ErrFrame, en.Size, limit)
	}
	return nil
}

// readError is the error of a read that ended with res and err, nil for
// a success.
func readError(path string, res execproto.Result, err error) error {
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	if res.Error != "" {
		return &sandbox.FileError{Op: execproto.OpRead, Path: path, Errno: res.Errno, Msg: res.Error}
	}
	return nil
}

func (r *fileReader) Stat() sandbox.FileInfo { return r.info }

// Read reads the file's content: io.EOF once the read ended well and all
// of it is read, else the read's error.
func (r *fileReader) Read(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if isClosed(r.closing) {
		return 0, errReaderClosed
	}
	if len(b) == 0 {
		return 0, nil
	}
	out := r.s.out
	for {
		if len(r.rest) > 0 {
			n := copy(b, r.rest)
			r.rest = r.rest[n:]
			r.credit.took(r.s, n)
			return n, nil
		}
		if r.err != nil {
			return 0, r.err
		}
		c, ok, ended := out.TryGet()
		switch {
		case ok && c.Close:
			continue
		case ok && c.Channel == execproto.Stdout:
			r.got += int64(len(c.Data))
			if (r.size > 0 && r.got > r.size) || (r.limit > 0 && r.got > r.limit) {
				r.err = fmt.Errorf("read %s: %w: the executor sent %d bytes or more, over the file's %d or the limit %d", r.path, execproto.ErrFrame, r.got, r.size, r.limit)
				r.cancel()
				return 0, r.err
			}
			r.rest = c.Data
			continue
		case ok:
			_ = r.s.send(execproto.AckFrame(r.s.id, c.Channel, uint32(len(c.Data))))
			continue
		case ended:
			// The stream ended and its data is all taken.
			r.err = readError(r.path, r.s.result, r.s.err)
			if r.err == nil && r.size > 0 && r.got != r.size {
				r.err = fmt.Errorf("read %s: %w: %d bytes of the %d the head gave", r.path, execproto.ErrFrame, r.got, r.size)
			}
			if r.err == nil {
				r.err = io.EOF
			}
			return 0, r.err
		}
		select {
		case <-out.Ready():
		case <-r.closing:
			return 0, errReaderClosed
		}
	}
}

// cancel asks the executor to stop the read, once.
func (r *fileReader) cancel() {
	r.cancelOnce.Do(func() {
		if !isClosed(r.s.done) {
			_ = r.s.send(execproto.Frame{Type: execproto.TCancel, Stream: r.s.id})
		}
	})
}

// Close cancels what is left of the read and waits for its stream to end,
// which the executor confirms at its next chunk (it gets no more credit).
// A Read in progress returns.
func (r *fileReader) Close() error {
	r.closeOnce.Do(func() {
		close(r.closing)
		r.stopCtx()
		r.cancel()
		<-r.s.done
	})
	return nil
}
