package execconn

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// Files is the part of a sandbox that only forwards to its executor: file
// and tree operations, watches, events, disk use and connections. Every
// backend whose sandbox speaks to an executor (linux and its gvisor
// runtime, kubernetes) embeds it, so that they forward alike. Each
// operation first calls Alive and fails with its error once the sandbox is
// gone.
type Files struct {
	// Conn is the executor connection; set before the sandbox is handed
	// out.
	Conn *Conn
	// Alive returns nil while the sandbox lives, and an error wrapping
	// sandbox.ErrLost once it is gone.
	Alive func() error
	// ID names the sandbox in errors.
	ID string
	// Workspace is the host directory /workspace was made from, which Diff
	// compares against; "" means none, and every file is new.
	Workspace string
}

// ReadFile reads a file inside the sandbox.
func (f *Files) ReadFile(ctx context.Context, path string, limit int64) ([]byte, error) {
	if err := f.Alive(); err != nil {
		return nil, err
	}
	return f.Conn.ReadFile(ctx, path, limit)
}

// Open opens a file inside the sandbox to stream its content.
func (f *Files) Open(ctx context.Context, path string, limit int64) (sandbox.FileReader, error) {
	if err := f.Alive(); err != nil {
		return nil, err
	}
	return f.Conn.Open(ctx, path, limit)
}

// WriteFile writes a file inside the sandbox as the sandbox user.
func (f *Files) WriteFile(ctx context.Context, path string, r io.Reader, mode fs.FileMode) error {
	if err := f.Alive(); err != nil {
		return err
	}
	return f.Conn.WriteFile(ctx, path, r, mode)
}

// List lists a directory inside the sandbox.
func (f *Files) List(ctx context.Context, path string) ([]sandbox.FileInfo, error) {
	if err := f.Alive(); err != nil {
		return nil, err
	}
	return f.Conn.List(ctx, path)
}

// Stat describes a file inside the sandbox.
func (f *Files) Stat(ctx context.Context, path string) (sandbox.FileInfo, error) {
	if err := f.Alive(); err != nil {
		return sandbox.FileInfo{}, err
	}
	return f.Conn.Stat(ctx, path)
}

// Mkdir creates a directory inside the sandbox.
func (f *Files) Mkdir(ctx context.Context, path string, mode fs.FileMode, recursive bool) error {
	if err := f.Alive(); err != nil {
		return err
	}
	return f.Conn.Mkdir(ctx, path, mode, recursive)
}

// Remove deletes a file or tree inside the sandbox.
func (f *Files) Remove(ctx context.Context, path string, recursive bool) error {
	if err := f.Alive(); err != nil {
		return err
	}
	return f.Conn.Remove(ctx, path, recursive)
}

// Rename moves a file inside the sandbox.
func (f *Files) Rename(ctx context.Context, oldPath, newPath string) error {
	if err := f.Alive(); err != nil {
		return err
	}
	return f.Conn.Rename(ctx, oldPath, newPath)
}

// Export writes a tar stream of a tree inside the sandbox.
func (f *Files) Export(ctx context.Context, path string, w io.Writer) error {
	if err := f.Alive(); err != nil {
		return err
	}
	return f.Conn.Export(ctx, path, w)
}

// Import unpacks a tar stream into a directory inside the sandbox, as the
// sandbox user.
func (f *Files) Import(ctx context.Context, path string, r io.Reader) error {
	if err := f.Alive(); err != nil {
		return err
	}
	return f.Conn.Import(ctx, path, r)
}

// Diff writes a unified diff of /workspace against Workspace.
func (f *Files) Diff(ctx context.Context, w io.Writer) error {
	if err := f.Alive(); err != nil {
		return err
	}
	pr, pw := io.Pipe()
	errc := make(chan error, 1)
	go func() {
		err := f.Conn.Export(ctx, "/workspace", pw)
		pw.CloseWithError(err)
		errc <- err
	}()
	derr := sandbox.WriteDiff(w, f.Workspace, pr)
	pr.CloseWithError(errors.New("diff ended"))
	if err := <-errc; err != nil {
		return err
	}
	return derr
}

// Watch reports changes under a directory inside the sandbox; see
// sandbox.Sandbox.
func (f *Files) Watch(ctx context.Context, path string, recursive bool) (<-chan sandbox.WatchEvent, error) {
	if err := f.Alive(); err != nil {
		return nil, err
	}
	return f.Conn.Watch(ctx, path, recursive)
}

// Events implements sandbox.EventSource: the executor's event socket.
func (f *Files) Events(ctx context.Context) (<-chan sandbox.EventLine, func(), error) {
	if err := f.Alive(); err != nil {
		return nil, nil, err
	}
	return f.Conn.Events(ctx)
}

// MeasureDisk implements sandbox.DiskMeasurer: the executor reads how full
// the sandbox's writable places are.
func (f *Files) MeasureDisk(ctx context.Context) (sandbox.DiskUsage, error) {
	if err := f.Alive(); err != nil {
		return sandbox.DiskUsage{}, err
	}
	d, err := f.Conn.DiskUsage(ctx)
	if err != nil {
		return sandbox.DiskUsage{}, fmt.Errorf("sandbox %s: %w", f.ID, err)
	}
	return sandbox.DiskUsage{Used: d.Used, Total: d.Total}, nil
}

// Connect implements sandbox.Connector: the executor dials port on the
// sandbox's loopback and relays the connection.
func (f *Files) Connect(ctx context.Context, port int) (net.Conn, error) {
	if err := f.Alive(); err != nil {
		return nil, err
	}
	c, err := f.Conn.Connect(ctx, f.ID, port)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", f.ID, err)
	}
	return c, nil
}

// ConnectEarly implements sandbox.EarlyConnector: Connect without the
// wait for the executor's dial (Conn.ConnectEarly).
func (f *Files) ConnectEarly(port int) (net.Conn, error) {
	if err := f.Alive(); err != nil {
		return nil, err
	}
	c, err := f.Conn.ConnectEarly(f.ID, port)
	if err != nil {
		return nil, fmt.Errorf("sandbox %s: %w", f.ID, err)
	}
	return c, nil
}

// NotStartedMessage says why command argv0 did not start, from the
// executor's reason and errno name (execproto.Result's NotStarted and
// Errno); it quotes nothing else the executor sent.
func NotStartedMessage(argv0, reason, errno string) string {
	switch {
	case reason == sandbox.CommandNotFound && strings.Contains(argv0, "/"):
		return argv0 + ": no such file in the sandbox"
	case reason == sandbox.CommandNotFound:
		return argv0 + ": command not found in the sandbox"
	case errno == "EACCES" || errno == "EPERM":
		return argv0 + ": permission denied in the sandbox"
	}
	for e := unix.Errno(1); e < 256; e++ {
		if errno != "" && unix.ErrnoName(e) == errno {
			return argv0 + ": cannot execute in the sandbox: " + e.Error()
		}
	}
	return argv0 + ": cannot execute in the sandbox"
}
