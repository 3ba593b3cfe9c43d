package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/airlockrun/airlock/internal/api"
	"github.com/airlockrun/airlock/internal/sandbox"
	"github.com/airlockrun/airlock/internal/store"
	"github.com/airlockrun/airlock/internal/store/blob"
)

// An uploaded workspace is a blob, the gzipped tar, and a row of the
// store's uploads (store.Uploads) naming it, its tenant and its size. The
// upload id is random, so it cannot be guessed, and a tenant can only use
// its own uploads: the row says whose it is. The tar's own digest, which
// anyone with the same bytes could compute, is never accepted from a
// client. Uploads are kept under the data policy: their tenant's budget
// (Options.UploadBudget) bounds what it keeps at once, and a retention
// pass deletes them after their TTL (host.Retention.Uploads).

// uploadTimeout bounds the time an upload's body may take.
const uploadTimeout = 30 * time.Minute

// uploadPrefix starts every upload id.
const uploadPrefix = "upl_"

// validUploadID reports whether id has an upload id's form.
func validUploadID(id string) bool {
	h, ok := strings.CutPrefix(id, uploadPrefix)
	return ok && blob.ValidDigest("sha256:"+h) == nil
}

// upload stores a workspace tarball: the body is a tar or a gzipped tar,
// of at most Config.MaxUpload bytes. A plain tar is gzipped on the way to
// the blob store; nothing is unpacked on the host (the run's sandbox
// unpacks it). Its entries are checked as it streams in
// (sandbox.CheckWorkspaceTar): a tar the sandbox could not unpack into a
// workspace (an entry outside it, a link out of it, a device...) is
// refused with 400 naming the entry, not left to fail the run it starts.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, c *call) error {
	ctx := r.Context()
	rc := http.NewResponseController(w)
	// Uploads may be large: deadlines of their own.
	_ = rc.SetReadDeadline(time.Now().Add(uploadTimeout))
	_ = rc.SetWriteDeadline(time.Now().Add(uploadTimeout + time.Minute))
	budget := s.uploadBudget(c.p.Tenant)
	if budget > 0 {
		// Full already: refused before the body is read.
		if _, used, err := c.view.UploadUsage(ctx); err != nil {
			return err
		} else if used >= budget {
			return overBudget(budget)
		}
	}
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, int64(s.cfg.MaxUpload))}
	br := bufio.NewReaderSize(body, 1024)
	head, err := br.Peek(512)
	if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, bufio.ErrBufferFull) {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			return err
		}
		return badRequest("could not read the upload")
	}
	var gzipped bool
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		gzipped = true
	case len(head) >= 262 && bytes.Equal(head[257:262], []byte("ustar")):
	default:
		return badRequest("the upload is neither a tar nor a gzipped tar")
	}
	// The checker reads what the body brings as the blob store takes it
	// (through a pipe: the store waits for the check, never the reverse
	// for more than a read). A refusal ends the pipe with its error, and
	// so the store's read.
	vr, vw := io.Pipe()
	checked := make(chan error, 1)
	go func() {
		err := checkUpload(vr, gzipped, sandbox.TarLimits{Bytes: min(16*int64(s.cfg.MaxUpload), sandbox.DefaultTarBytes)})
		if err != nil {
			vr.CloseWithError(err)
		} else {
			_, _ = io.Copy(io.Discard, vr) // what follows the archive
		}
		checked <- err
	}()
	teed := io.TeeReader(br, vw)
	src := teed
	if !gzipped {
		pr, pw := io.Pipe()
		done := make(chan struct{})
		go func() {
			defer close(done)
			zw := gzip.NewWriter(pw)
			_, err := io.Copy(zw, teed)
			if err == nil {
				err = zw.Close()
			}
			pw.CloseWithError(err)
		}()
		// The body must not be read after the handler returns: stop the
		// copy and wait for it.
		defer func() {
			pr.Close()
			<-done
		}()
		src = pr
	}
	digest, size, err := s.o.Blobs.Put(ctx, src)
	vw.CloseWithError(err) // the end of the body for the checker: nil is EOF
	cerr := <-checked
	var (
		bad      *sandbox.TarEntryError
		tooLarge *http.MaxBytesError
	)
	switch {
	case errors.As(cerr, &bad):
		return badRequest("the upload cannot be a workspace: %s", clientText(bad))
	case errors.As(err, &tooLarge), errors.Is(err, blob.ErrTooLarge):
		return publicf(api.CodeTooLarge, "the upload is over %d bytes", int64(s.cfg.MaxUpload))
	case err != nil && (ctx.Err() != nil || errors.Is(err, io.ErrUnexpectedEOF)):
		return badRequest("the upload was interrupted")
	case cerr != nil:
		// The body arrived whole (or its read failed for the check's
		// refusal): it is no whole tar.
		return badRequest("the upload is not a whole tar: %s", clientText(cerr))
	case err != nil:
		return err
	}
	var random [32]byte
	_, _ = rand.Read(random[:])
	id := uploadPrefix + hex.EncodeToString(random[:])
	// Refused past the budget, the blob stays until a blob collection
	// (airlock gc) finds nothing naming it: other uploads may share its
	// bytes, so it is not deleted here.
	if _, err := c.view.PutUpload(ctx, store.Upload{ID: id, Digest: digest, Size: size}, budget); err != nil {
		if errors.Is(err, store.ErrOverBudget) {
			return overBudget(budget)
		}
		return err
	}
	c.log.Info("workspace uploaded", "upload", id, "size", size)
	writeJSON(w, http.StatusCreated, api.Upload{ID: id, Size: size, Received: body.n, Gzipped: gzipped})
	return nil
}

// checkUpload checks the upload's tar, gzipped or not, as it streams in.
func checkUpload(r io.Reader, gzipped bool, l sandbox.TarLimits) error {
	if gzipped {
		zr, err := gzip.NewReader(r)
		if err != nil {
			return fmt.Errorf("gzip: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	return sandbox.CheckWorkspaceTar(r, l)
}

// uploadBudget is tenant's upload budget in bytes (0: none).
func (s *Server) uploadBudget(tenant string) int64 {
	if s.o.UploadBudget == nil {
		return 0
	}
	return s.o.UploadBudget(tenant)
}

// overBudget is the refusal of an upload past its tenant's budget.
func overBudget(budget int64) error {
	return publicf(api.CodeTooLarge, "the tenant's uploads would be over their budget of %d bytes: older uploads go when their retention ends", budget)
}

// openUpload returns the digest of the gzipped tar upload id names, if
// tenant uploaded it (and it was not deleted, nor its blob); any other id
// is not found.
func (s *Server) openUpload(ctx context.Context, view *store.TenantStore, id string) (string, error) {
	if !validUploadID(id) {
		return "", errNoUpload
	}
	u, err := view.GetUpload(ctx, id)
	if errors.Is(err, store.ErrNotFound) {
		return "", errNoUpload
	}
	if err != nil {
		return "", err
	}
	if ok, err := s.o.Blobs.Has(ctx, u.Digest); err != nil || !ok {
		return "", errNoUpload
	}
	return u.Digest, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
