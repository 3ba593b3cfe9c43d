package execconn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Process is a command running in the sandbox.
type Process struct {
	s        *stream
	inputErr chan error
}

// Start runs req (an exec request). Output goes to stdout and stderr as it
// arrives; stdin, if not nil, is copied to the command and then closed.
func (c *Conn) Start(req execproto.Request, stdin io.Reader, stdout, stderr io.Writer) (*Process, error) {
	req.Op = execproto.OpExec
	req.Stdin = stdin != nil
	if err := req.Validate(); err != nil {
		return nil, err
	}
	s, err := c.open(&req, stdout, stderr)
	if err != nil {
		return nil, err
	}
	p := &Process{s: s, inputErr: make(chan error, 1)}
	if stdin != nil {
		go func() { p.inputErr <- s.sendInput(stdin) }()
	} else {
		p.inputErr <- nil
	}
	return p, nil
}

// Signal delivers sig to the command's main process.
func (p *Process) Signal(sig unix.Signal) error {
	if sig <= 0 || sig > 64 {
		return fmt.Errorf("signal %d out of range", sig)
	}
	return p.s.send(execproto.Frame{Type: execproto.TSignal, Stream: p.s.id, Payload: []byte{byte(sig)}})
}

// Resize changes the command's terminal size.
func (p *Process) Resize(rows, cols uint16) error {
	return p.s.send(execproto.ResizeFrame(p.s.id, rows, cols))
}

// Cancel kills the command's process tree.
func (p *Process) Cancel() error {
	return p.s.send(execproto.Frame{Type: execproto.TCancel, Stream: p.s.id})
}

// Done is closed when the command has ended and its output is delivered.
func (p *Process) Done() <-chan struct{} { return p.s.done }

// Wait waits for the command. Cancelling ctx kills the command's tree.
func (p *Process) Wait(ctx context.Context) (execproto.Result, error) {
	return p.s.wait(ctx)
}

// do runs a file request and returns its result; data sent by the executor
// goes to out, and in (if not nil) is sent as the request's input.
func (c *Conn) do(ctx context.Context, req execproto.Request, in io.Reader, out io.Writer) (execproto.Result, error) {
	if req.User == "" {
		req.User = sandbox.FileUser(ctx)
	}
	if err := req.Validate(); err != nil {
		return execproto.Result{}, err
	}
	s, err := c.open(&req, out, nil)
	if err != nil {
		return execproto.Result{}, err
	}
	if in != nil {
		go func() { _ = s.sendInput(in) }()
	} else if req.Op == execproto.OpWrite || req.Op == execproto.OpImport {
		_ = s.send(execproto.CloseFrame(s.id, execproto.Stdin))
	}
	r, err := s.wait(ctx)
	if err != nil {
		return r, fmt.Errorf("%s %s: %w", req.Op, req.Path, err)
	}
	if r.Error != "" {
		return r, &sandbox.FileError{Op: req.Op, Path: req.Path, Errno: r.Errno, Msg: r.Error}
	}
	return r, nil
}

// ReadFile returns the content of a file; limit > 0 caps it.
func (c *Conn) ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	var buf bytes.Buffer
	_, err := c.do(ctx, execproto.Request{Op: execproto.OpRead, Path: path, Limit: limit}, nil, &buf)
	return buf.Bytes(), err
}

// WriteFile creates or truncates path with the content of r.
func (c *Conn) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	if r == nil {
		r = bytes.NewReader(nil)
	}
	prefix, attrs := sandbox.WriteXattrs(ctx)
	_, err := c.do(ctx, execproto.Request{Op: execproto.OpWrite, Path: path, Mode: uint32(mode.Perm()), XattrPrefix: prefix, Xattrs: attrs}, r, nil)
	return err
}

func infos(es []execproto.Entry) []sandbox.FileInfo {
	out := make([]sandbox.FileInfo, len(es))
	for i, e := range es {
		out[i] = sandbox.FileInfo{Name: e.Name, Size: e.Size, Mode: fs.FileMode(e.Mode), ModTime: time.Unix(0, e.ModTime), Link: e.Link, Owner: e.Owner, Group: e.Group, Xattrs: e.Xattrs}
	}
	return out
}

// List returns the entries of a directory.
func (c *Conn) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	r, err := c.do(ctx, execproto.Request{Op: execproto.OpList, Path: path}, nil, nil)
	return infos(r.Entries), err
}

// Stat describes path without following a final symlink.
func (c *Conn) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	r, err := c.do(ctx, execproto.Request{Op: execproto.OpStat, Path: path}, nil, nil)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	if len(r.Entries) != 1 {
		return sandbox.FileInfo{}, errors.New("stat: malformed result")
	}
	return infos(r.Entries)[0], nil
}

// Mkdir creates a directory (and its parents if recursive).
func (c *Conn) Mkdir(ctx context.Context, path string, mode fs.FileMode, recursive bool) error {
	req := execproto.Request{Op: execproto.OpMkdir, Path: path, Mode: uint32(mode.Perm()), Recursive: recursive}
	req.MkdirAsRoot = recursive && sandbox.MkdirAsRoot(ctx)
	_, err := c.do(ctx, req, nil, nil)
	return err
}

// Remove deletes a file or an empty directory, or a whole tree if recursive.
func (c *Conn) Remove(ctx context.Context, path string, recursive bool) error {
	_, err := c.do(ctx, execproto.Request{Op: execproto.OpRemove, Path: path, Recursive: recursive}, nil, nil)
	return err
}

// Rename moves oldPath to newPath.
func (c *Conn) Rename(ctx context.Context, oldPath, newPath string) error {
	_, err := c.do(ctx, execproto.Request{Op: execproto.OpRename, Path: oldPath, NewPath: newPath}, nil, nil)
	return err
}

// Export writes a tar stream of the tree at path to w.
func (c *Conn) Export(ctx context.Context, path string, w io.Writer) error {
	req := execproto.Request{Op: execproto.OpExport, Path: path, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}
	_, err := c.do(ctx, req, nil, w)
	return err
}

// Import unpacks the tar stream r into the directory at path, as the
// request's user (execproto.OpImport).
func (c *Conn) Import(ctx context.Context, path string, r io.Reader) error {
	req := execproto.Request{Op: execproto.OpImport, Path: path, Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize}
	_, err := c.do(ctx, req, r, nil)
	return err
}

// Checkpoint writes the delta stream of tree (execproto.TreeWorkspace or
// TreeRoot) since the baseline since
// to w (nothing with markOnly) and returns what the executor recorded. A
// failing w cancels the checkpoint, and its error is returned.
func (c *Conn) Checkpoint(ctx context.Context, tree, since string, markOnly bool, w io.Writer) (execproto.CheckpointResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cw := &cancelWriter{w: w, cancel: cancel}
	if w == nil {
		cw.w = io.Discard
	}
	req := execproto.Request{
		Op: execproto.OpCheckpoint, Since: since, MarkOnly: markOnly, Tree: tree,
		Window: execproto.BulkWindow, ChunkSize: execproto.BulkChunkSize,
	}
	r, err := c.do(ctx, req, nil, cw)
	if cw.err != nil {
		return execproto.CheckpointResult{}, fmt.Errorf("checkpoint: write the stream: %w", cw.err)
	}
	var fe *sandbox.FileError
	if errors.As(err, &fe) {
		// The executor's message names the file; the request names none.
		fe.Path = "/workspace"
		if tree == execproto.TreeRoot {
			fe.Path = "/"
		}
	}
	if err != nil {
		return execproto.CheckpointResult{}, err
	}
	if r.Checkpoint == nil {
		return execproto.CheckpointResult{}, fmt.Errorf("%w: checkpoint: no result", execproto.ErrFrame)
	}
	if err := r.Checkpoint.Validate(markOnly); err != nil {
		return execproto.CheckpointResult{}, fmt.Errorf("%w: %w", execproto.ErrFrame, err)
	}
	if markOnly && cw.n > 0 {
		return execproto.CheckpointResult{}, fmt.Errorf("%w: checkpoint: a mark-only checkpoint sent %d bytes", execproto.ErrFrame, cw.n)
	}
	return *r.Checkpoint, nil
}

// cancelWriter passes writes to w until one fails; then it keeps the error,
// cancels the request and drops the rest, so the executor stops and the
// stream's output, acknowledged as dropped, never stalls the connection.
// The stream's writer goroutine is its only caller.
type cancelWriter struct {
	w      io.Writer
	cancel context.CancelFunc
	err    error
	n      int64
}

func (c *cancelWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return len(p), nil
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	if err != nil {
		c.err = err
		c.cancel()
	}
	return len(p), nil
}

// maxSpecials bounds what SpecialFiles reads: about 170,000 FIFOs of
// 300-byte paths.
const maxSpecials = 64 << 20

// SpecialFiles returns the FIFOs of /workspace as the sandbox sees them
// (execproto.OpSpecialFiles), in walk order.
func (c *Conn) SpecialFiles(ctx context.Context) ([]execproto.Special, error) {
	buf := &cappedBuffer{max: maxSpecials}
	if _, err := c.do(ctx, execproto.Request{Op: execproto.OpSpecialFiles}, nil, buf); err != nil {
		return nil, err
	}
	if buf.over {
		return nil, fmt.Errorf("special files: more than %d bytes", maxSpecials)
	}
	return execproto.ParseSpecials(buf.b.Bytes())
}

// cappedBuffer keeps the first max bytes written to it and notes more.
type cappedBuffer struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (w *cappedBuffer) Write(p []byte) (int, error) {
	if w.b.Len()+len(p) > w.max {
		w.over = true
		return len(p), nil
	}
	return w.b.Write(p)
}
