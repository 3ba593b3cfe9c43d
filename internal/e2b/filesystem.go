package e2b

import (
	"context"
	"errors"
	"io/fs"
	"net/http"
	"path"
	"strconv"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// The filesystem service's messages, in proto3 JSON.

type pathRequest struct {
	Path  string `json:"path"`
	Depth *u32   `json:"depth"`
}

type moveRequest struct {
	Source      string `json:"source"`
	Destination string `json:"destination"`
}

type entryInfo struct {
	Name          string  `json:"name"`
	Type          string  `json:"type"`
	Path          string  `json:"path"`
	Size          string  `json:"size"`
	Mode          uint32  `json:"mode"`
	Permissions   string  `json:"permissions"`
	Owner         string  `json:"owner,omitempty"`
	Group         string  `json:"group,omitempty"`
	ModifiedTime  string  `json:"modifiedTime,omitempty"`
	SymlinkTarget *string `json:"symlinkTarget,omitempty"`
	// Metadata is the file's user.e2b.* attributes (envd 0.6.2).
	Metadata map[string]string `json:"metadata,omitempty"`
}

type entryResponse struct {
	Entry *entryInfo `json:"entry,omitempty"`
}

type listDirResponse struct {
	Entries []entryInfo `json:"entries"`
}

// Bounds on listings.
const (
	maxListDepth   = 16
	maxListEntries = 10000
)

// entryOf describes fi, found at p.
func entryOf(p string, fi sandbox.FileInfo) entryInfo {
	// As envd: mode is the permission bits alone (0o755, not Go's
	// ModeDir with them), the owner and group are names.
	e := entryInfo{
		Name: path.Base(p), Path: p, Size: strconv.FormatInt(fi.Size, 10), Mode: uint32(fi.Mode.Perm()),
		Permissions: fi.Mode.String(), Owner: fi.Owner, Group: fi.Group, Metadata: metadataOf(fi.Xattrs),
	}
	if fi.Name != "" {
		e.Name = fi.Name
	}
	switch {
	case fi.Mode&fs.ModeSymlink != 0:
		e.Type = "FILE_TYPE_SYMLINK"
		// envd gives the target as an absolute path: a relative one is
		// taken from the link's directory.
		link := fi.Link
		if link != "" && !path.IsAbs(link) {
			link = path.Join(path.Dir(p), link)
		}
		e.SymlinkTarget = &link
	case fi.Mode.IsDir():
		e.Type = "FILE_TYPE_DIRECTORY"
	default:
		// Regular files and the rest (devices, sockets, pipes): the SDK
		// drops entries of an unspecified type.
		e.Type = "FILE_TYPE_FILE"
	}
	if !fi.ModTime.IsZero() {
		e.ModifiedTime = fi.ModTime.UTC().Format(time.RFC3339Nano)
	}
	return e
}

// fsError maps a sandbox file error to a Connect error.
func fsError(err error, p string) *rpcError {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return rpcErrorf(codeNotFound, "%s: no such file or directory", clip(p))
	case errors.Is(err, fs.ErrExist):
		return rpcErrorf(codeAlreadyExists, "%s: already exists", clip(p))
	case errors.Is(err, fs.ErrPermission):
		return rpcErrorf(codePermissionDenied, "%s: permission denied", clip(p))
	case errors.Is(err, context.DeadlineExceeded):
		return rpcErrorf(codeDeadlineExceeded, "%s: the operation timed out", clip(p))
	case isNoSpace(err):
		return rpcErrorf(codeResourceExhaust, "%s: no space left in the sandbox", clip(p))
	}
	var fe *sandbox.FileError
	if errors.As(err, &fe) && fe.Errno != "" {
		return rpcErrorf(codeInvalidArgument, "%s: %s", clip(p), fe.Errno)
	}
	return rpcErrorf(codeInternal, "%s: the operation failed", clip(p))
}

// serveFilesystem dispatches the filesystem service's methods.
func (s *Server) serveFilesystem(w http.ResponseWriter, r *http.Request, c envdCall, method string) {
	sb := c.lv.sb
	audit := func(op, p string, err *rpcError) {
		outcome := "ok"
		if err != nil {
			outcome = err.Code
		}
		s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: op, Outcome: outcome, Detail: clipDetail(p)})
	}
	withPath := func(op string, f func(ctx context.Context, p string, req pathRequest) (any, *rpcError)) {
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req pathRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			p, err := c.resolve(req.Path)
			if err != nil {
				return nil, rpcErrorf(codeInvalidArgument, "%s", err.Error())
			}
			out, rerr := f(ctx, p, req)
			audit(op, p, rerr)
			return out, rerr
		})
	}
	switch method {
	case "Stat":
		withPath("files.stat", func(ctx context.Context, p string, _ pathRequest) (any, *rpcError) {
			fi, err := sb.Stat(ctx, p)
			if err != nil {
				return nil, fsError(err, p)
			}
			e := entryOf(p, fi)
			return entryResponse{Entry: &e}, nil
		})
	case "ListDir":
		withPath("files.list", func(ctx context.Context, p string, req pathRequest) (any, *rpcError) {
			depth := 1
			if req.Depth != nil && *req.Depth > 0 {
				depth = int(min(*req.Depth, maxListDepth))
			}
			fi, err := sb.Stat(ctx, p)
			if err != nil {
				return nil, fsError(err, p)
			}
			if !fi.Mode.IsDir() {
				return nil, rpcErrorf(codeInvalidArgument, "%s: not a directory", clip(p))
			}
			out := listDirResponse{Entries: []entryInfo{}}
			if rerr := listTree(ctx, sb, p, depth, &out.Entries); rerr != nil {
				return nil, rerr
			}
			return out, nil
		})
	case "MakeDir":
		withPath("files.mkdir", func(ctx context.Context, p string, _ pathRequest) (any, *rpcError) {
			if _, err := sb.Stat(ctx, p); err == nil {
				return nil, rpcErrorf(codeAlreadyExists, "%s: already exists", clip(p))
			}
			if err := sb.Mkdir(sandbox.WithMkdirAsRoot(ctx), p, 0o755, true); err != nil {
				return nil, fsError(err, p)
			}
			fi, err := sb.Stat(ctx, p)
			if err != nil {
				return nil, fsError(err, p)
			}
			e := entryOf(p, fi)
			return entryResponse{Entry: &e}, nil
		})
	case "Remove":
		withPath("files.remove", func(ctx context.Context, p string, _ pathRequest) (any, *rpcError) {
			if err := sb.Remove(ctx, p, true); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fsError(err, p)
			}
			return struct{}{}, nil
		})
	case "Move":
		s.unaryCall(w, r, func(ctx context.Context, body []byte) (any, *rpcError) {
			var req moveRequest
			if err := decodeMessage(body, &req); err != nil {
				return nil, err
			}
			src, err1 := c.resolve(req.Source)
			dst, err2 := c.resolve(req.Destination)
			if err := errors.Join(err1, err2); err != nil {
				return nil, rpcErrorf(codeInvalidArgument, "%s", err.Error())
			}
			rerr := func() *rpcError {
				if err := sb.Mkdir(sandbox.WithMkdirAsRoot(ctx), path.Dir(dst), 0o755, true); err != nil && !errors.Is(err, fs.ErrExist) {
					return fsError(err, dst)
				}
				if err := sb.Rename(ctx, src, dst); err != nil {
					return fsError(err, src)
				}
				return nil
			}()
			audit("files.move", src+" -> "+dst, rerr)
			if rerr != nil {
				return nil, rerr
			}
			fi, err := sb.Stat(ctx, dst)
			if err != nil {
				return nil, fsError(err, dst)
			}
			e := entryOf(dst, fi)
			return entryResponse{Entry: &e}, nil
		})
	case "WatchDir", "CreateWatcher", "GetWatcherEvents", "RemoveWatcher":
		s.serveWatch(w, r, c, method) // watch.go
	default:
		writeUnaryError(w, http.StatusNotFound, rpcErrorf(codeUnimplemented, "filesystem.Filesystem/%s is not implemented", clip(method)))
	}
}

// listTree appends the entries under dir, depth levels deep, to out.
func listTree(ctx context.Context, sb sandbox.Sandbox, dir string, depth int, out *[]entryInfo) *rpcError {
	fis, err := sb.List(ctx, dir)
	if err != nil {
		return fsError(err, dir)
	}
	for _, fi := range fis {
		if len(*out) >= maxListEntries {
			return rpcErrorf(codeResourceExhaust, "%s: over %d entries; list a smaller tree", clip(dir), maxListEntries)
		}
		p := path.Join(dir, fi.Name)
		*out = append(*out, entryOf(p, fi))
		if depth > 1 && fi.Mode.IsDir() {
			if rerr := listTree(ctx, sb, p, depth-1, out); rerr != nil {
				return rerr
			}
		}
	}
	return nil
}
