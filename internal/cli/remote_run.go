package cli

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/host"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// defaultContextWindow is --context-window's default.
const defaultContextWindow = 200000

// create uploads q's workspace directory as a gzipped tar, and creates the
// run; the server's workers drive it.
func (b *remoteBackend) create(ctx context.Context, q host.RunRequest) (string, error) {
	if q.UploadDir != "" {
		id, err := b.upload(ctx, q.UploadDir)
		if err != nil {
			return "", err
		}
		q.Workspace = &api.WorkspaceSource{Upload: id}
	}
	r, err := b.c.CreateRun(ctx, q.CreateRunRequest)
	if err != nil {
		return "", b.fail(err)
	}
	return r.ID, nil
}

// upload sends dir as a gzipped tar, made as it is sent.
func (b *remoteBackend) upload(ctx context.Context, dir string) (string, error) {
	pr, pw := io.Pipe()
	var werr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		werr = writeTarGz(pw, dir)
		pw.CloseWithError(werr)
	}()
	u, err := b.c.Upload(ctx, pr)
	// The upload may end before the tar does (a refusal): stop the
	// writer, then wait for it.
	pr.CloseWithError(errUploadEnded)
	wg.Wait()
	var bad *sandbox.TarEntryError
	switch {
	case errors.As(werr, &bad):
		// A tree the server's sandbox could not unpack: bad input.
		return "", usageError{Err: fmt.Errorf("--workspace %s: %w", dir, werr)}
	case werr != nil && !errors.Is(werr, errUploadEnded):
		return "", fmt.Errorf("--workspace %s: %w", dir, werr)
	case err != nil:
		return "", b.fail(err)
	}
	return u.ID, nil
}

var errUploadEnded = errors.New("the upload ended")

// writeTarGz writes the tree under dir to w as a gzipped tar: directories,
// regular files and symbolic links (as links), with names relative to dir
// and no owner; other files (sockets, devices) are left out. Files are
// opened through an os.Root, so a file swapped for a link while the tree
// is walked cannot make it read outside dir. Each entry passes the check
// the server's uploads pass (sandbox.TarChecker): a link that points out
// of dir is an error naming it, here rather than from the server.
func writeTarGz(w io.Writer, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	zw := gzip.NewWriter(w)
	tw := tar.NewWriter(zw)
	check := sandbox.NewTarChecker(sandbox.TarLimits{})
	err = fs.WalkDir(root.FS(), ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || name == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		switch {
		case info.Mode()&fs.ModeSymlink != 0:
			if link, err = root.Readlink(name); err != nil {
				return err
			}
		case !info.Mode().IsRegular() && !info.IsDir():
			return nil
		}
		h, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return err
		}
		h.Name, h.Uid, h.Gid, h.Uname, h.Gname = filepath.ToSlash(name), 0, 0, "", ""
		if info.IsDir() {
			h.Name += "/"
		}
		if err := check.Check(h); err != nil {
			return err
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := root.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.CopyN(tw, f, h.Size); err != nil {
			return fmt.Errorf("%s: %d of %d bytes read (did it change?): %w", name, n, h.Size, err)
		}
		return nil
	})
	if err == nil {
		err = tw.Close()
	}
	if err == nil {
		err = zw.Close()
	}
	return err
}

// errPaused ends the following of a run that was paused.
var errPaused = errors.New("the run was paused")

// drive follows run id as the server's workers drive it (resume: asks
// them to resume it first), printing its events with the timeline, then
// downloads the artifacts and reports as a local drive does. Ctrl-C asks
// the server to cancel the run (and a second one stops following);
// SIGTERM or SIGHUP stops following, the run goes on.
func (b *remoteBackend) drive(id, out string, resume bool) error {
	ctx := b.env.Ctx
	var after int64
	if resume {
		r, err := b.c.Run(ctx, id)
		if err != nil {
			return b.fail(err)
		}
		after = r.Events
		if _, err := b.c.ResumeRun(ctx, id); err != nil {
			return b.ended(ctx, id, err)
		}
	}
	fctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	endSignals := b.onSignals(fctx, id, stop)
	_, err := b.c.Follow(fctx, id, after, func(ev event.Event) error {
		if b.tl != nil {
			b.tl.event(ev)
		}
		if ev.Type == event.TypeRunPaused {
			return errPaused
		}
		return nil
	})
	endSignals()
	switch {
	case errors.Is(context.Cause(fctx), errDetached):
		fmt.Fprintf(b.env.Stderr, "airlock: stopped following run %s; the server goes on with it (airlock runs show %s)\n", id, id)
		return exitCode(1)
	case err != nil && !errors.Is(err, errPaused):
		return b.fail(err)
	}
	o, arts, err := b.outcome(ctx, id)
	if err != nil {
		return err
	}
	return report(b.env, o, arts, out, func(a api.Artifact, w io.Writer) error {
		_, err := b.c.Download(ctx, id, a.Name, w)
		return err
	})
}

// onSignals handles the signals while run id is followed: the first
// SIGINT cancels the run on the server, and the stream shows it end; a
// second one, SIGTERM and SIGHUP detach (stop(errDetached)). The returned
// function stops the handling and waits for it.
func (b *remoteBackend) onSignals(ctx context.Context, id string, stop context.CancelCauseFunc) func() {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, unix.SIGINT, unix.SIGTERM, unix.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		cancelled := false
		for {
			select {
			case s := <-ch:
				if s == unix.SIGINT && !cancelled {
					cancelled = true
					cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), detachWait)
					_, err := b.c.CancelRun(cctx, id, "interrupted")
					cancel()
					if err == nil {
						continue
					}
				}
				stop(errDetached)
				return
			case <-done:
				return
			}
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
		wg.Wait()
	}
}
