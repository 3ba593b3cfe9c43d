package e2b

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/netip"
	"path"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/gzip"

	"github.com/airlockrun/airlock/internal/execproto"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// Homedir is where an E2B client's relative paths and commands land, as
// in E2B's sandboxes: the home of the user user, which in an E2B
// sandbox is airlock's workspace (bound at /home/user; /workspace shows
// the same files), the one directory a pause keeps.
const Homedir = "/home/user"

// rootHome is root's home, where root's relative paths land: a scratch
// directory that a pause does not keep.
const rootHome = "/root"

// e2bAccount is the sandbox user E2B clients expect: user, whose home
// is the workspace, and root in /root.
var e2bAccount = sandbox.Account{Name: "user", Home: Homedir, HomeIsWorkspace: true, RootHome: true}

// withAccount makes spec an E2B sandbox's: its user is e2bAccount, and
// commands run in its home.
func withAccount(spec sandbox.Spec) sandbox.Spec {
	spec.Account = e2bAccount
	spec.Dir = Homedir
	return spec
}

// envdCall is an authenticated data-plane request.
type envdCall struct {
	b    *box
	lv   *live
	user string // "" is the sandbox's default user
}

// route names the sandbox and port a data-plane request is for: the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers when present, else a Host
// of the form <port>-<id>.<domain>.
func (s *Server) route(r *http.Request) (id string, port int, ok bool) {
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" {
		port := EnvdPort
		if v := r.Header.Get("E2b-Sandbox-Port"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 65535 {
				return "", 0, false
			}
			port = n
		}
		return id, port, true
	}
	return parseHost(r.Host, s.cfg.Domain)
}

// parseHost parses <port>-<id>.<domain>: the port is what comes before
// the first '-', and ids may hold more dashes.
func parseHost(host, domain string) (id string, port int, ok bool) {
	if domain == "" {
		return "", 0, false
	}
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, found := strings.CutSuffix(strings.ToLower(host), "."+strings.ToLower(domain))
	if !found || strings.Contains(label, ".") {
		return "", 0, false
	}
	ps, id, found := strings.Cut(label, "-")
	if !found || id == "" || ps == "" || len(ps) > 5 || ps[0] == '0' || strings.Trim(ps, "0123456789") != "" {
		return "", 0, false
	}
	n, _ := strconv.Atoi(ps)
	if n > 65535 {
		return "", 0, false
	}
	return id, n, true
}

// errGone is the one answer for an unknown, dead or paused sandbox and for
// a wrong token: the SDK reads 502 as "the sandbox is not running".
const goneMessage = "the sandbox is not running or does not exist"

func (s *Server) writeGone(w http.ResponseWriter, r *http.Request) {
	if isConnectPath(r.URL.Path) {
		writeUnaryError(w, http.StatusBadGateway, rpcErrorf(codeUnavailable, goneMessage))
		return
	}
	writeEnvdError(w, http.StatusBadGateway, goneMessage)
}

func isConnectPath(p string) bool {
	return strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/")
}

// envdError is envd's REST error body.
type envdError struct {
	Message string `json:"message"`
	Code    int    `json:"code"`
}

func writeEnvdError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, envdError{Message: msg, Code: status})
}

// serveEnvd routes and authenticates a data-plane request.
func (s *Server) serveEnvd(w http.ResponseWriter, r *http.Request) {
	id, port, ok := s.route(r)
	signed := r.URL.Path == "/files" && r.URL.Query().Get("signature") != "" && r.Header.Get("X-Access-Token") == ""
	if signed && s.signatureExpired(r) {
		// As envd answers; it tells nothing of any sandbox.
		s.audit.record(Record{Sandbox: clip(id), Op: "envd", Outcome: "refused", Detail: "expired signature"})
		writeEnvdError(w, http.StatusUnauthorized, "signature is already expired")
		return
	}
	if !ok && signed {
		// A signed upload or download URL carries no sandbox identity
		// when the client uses E2B_SANDBOX_URL: the signature, which only
		// the token's holder can make, names the sandbox. One that names
		// none is envd's 401 (no sandbox was named, so none is told of).
		b := s.bySignature(r)
		if b == nil {
			s.audit.record(Record{Op: "envd", Outcome: "refused", Detail: "invalid signature"})
			writeEnvdError(w, http.StatusUnauthorized, "invalid signature")
			return
		}
		id, port, ok = b.id, EnvdPort, true
	}
	if !ok {
		s.audit.record(Record{Op: "envd", Outcome: "no_route"})
		writeEnvdError(w, http.StatusBadRequest, "no sandbox named: send E2b-Sandbox-Id and E2b-Sandbox-Port, or address <port>-<sandbox id>."+cmpOr(s.cfg.Domain, "<domain>"))
		return
	}
	if s.o.Ports != nil && !s.holds(id) {
		// Another service's sandbox (an MCP session's): its ports are
		// its to serve, with its own access rules; the data plane's
		// routing headers are the data plane's, not the sandbox's.
		rr := r.Clone(r.Context())
		for _, h := range routingHeaders {
			rr.Header.Del(h)
		}
		if s.o.Ports.ServePort(w, rr, id, port) {
			return
		}
	}
	if !s.holds(id) && s.relayEnvd(w, r, id, port) {
		return // another replica's sandbox: that replica answered
	}
	if port != EnvdPort {
		// A preview URL: the port's own access rules, not envd's token.
		s.servePort(w, r, id, port)
		return
	}
	s.mu.Lock()
	b := s.boxes[id]
	s.mu.Unlock()
	var lv *live
	if b != nil {
		lv = s.wake(r, b, func() bool { return s.envdAuthorized(r, b) })
	}
	if b == nil || lv == nil || !s.envdAuthorized(r, b) {
		s.audit.record(Record{Sandbox: clip(id), Op: "envd", Outcome: "refused", Detail: clip(r.URL.Path)})
		s.writeGone(w, r)
		return
	}
	user, err := userOf(r)
	if err != nil {
		if isConnectPath(r.URL.Path) {
			writeUnaryError(w, 0, rpcErrorf(codeInvalidArgument, "%s", err.Error()))
		} else {
			writeEnvdError(w, http.StatusBadRequest, err.Error())
		}
		return
	}
	c := envdCall{b: b, lv: lv, user: user}
	if user != "" {
		// File operations act as the user asked, as envd's do.
		r = r.WithContext(sandbox.WithFileUser(r.Context(), user))
	}
	switch p := r.URL.Path; {
	case p == "/health":
		w.WriteHeader(http.StatusNoContent)
	case p == "/metrics" && r.Method == http.MethodGet:
		s.handleEnvdMetrics(w, r, c)
	case p == "/files" && r.Method == http.MethodGet:
		s.handleDownload(w, r, c)
	case p == "/files" && r.Method == http.MethodPost:
		s.handleUpload(w, r, c)
	case strings.HasPrefix(p, "/process.Process/"):
		s.serveProcess(w, r, c, strings.TrimPrefix(p, "/process.Process/"))
	case strings.HasPrefix(p, "/filesystem.Filesystem/"):
		s.serveFilesystem(w, r, c, strings.TrimPrefix(p, "/filesystem.Filesystem/"))
	default:
		writeEnvdError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not served by airlock's envd", r.Method, clip(p)))
	}
}

// wake returns b's running boot; a sandbox paused at its timeout with
// autoResume is resumed first, for a request that authorized says may
// reach it (envd's: its token or a signature; a port's: the port's own
// access): the request is served, not refused, as E2B's auto-resume does.
// Otherwise it is current().
func (s *Server) wake(r *http.Request, b *box, authorized func() bool) *live {
	if lv := b.current(); lv != nil || !b.autoResume || !authorized() {
		return lv
	}
	b.mu.Lock()
	paused := b.state == statePaused
	b.mu.Unlock()
	if !paused {
		return nil
	}
	lifetime := b.lifetime
	if lifetime <= 0 {
		lifetime = s.cfg.DefaultTimeout // paused by a server that did not keep it
	}
	if err := s.resume(r.Context(), b, lifetime); err != nil {
		s.log.Warn("e2b: auto-resume", "sandbox_id", b.id, "err", err)
		return nil
	}
	s.audit.record(Record{Tenant: b.tenant, Sandbox: b.id, Op: "sandbox.resume", Outcome: "ok", Detail: "auto-resume on a request to " + clip(r.URL.Path)})
	return b.current()
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// envdAuthorized checks X-Access-Token, or for /files a valid, unexpired
// URL signature.
func (s *Server) envdAuthorized(r *http.Request, b *box) bool {
	if t := r.Header.Get("X-Access-Token"); t != "" {
		return b.tokenOK(t)
	}
	if r.URL.Path != "/files" {
		return false
	}
	return s.signatureOK(r, b)
}

// signatureOK verifies the v1 signature scheme: "v1_" and the unpadded
// base64 SHA-256 of "path:operation:user:token[:expiration]".
func (s *Server) signatureOK(r *http.Request, b *box) bool {
	q := r.URL.Query()
	sig := q.Get("signature")
	if !strings.HasPrefix(sig, "v1_") || len(sig) > 100 {
		return false
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + b.token
	if exp := q.Get("signature_expiration"); exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || s.now().Unix() > n {
			return false
		}
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	want := "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
	return subtle.ConstantTimeCompare([]byte(sig), []byte(want)) == 1
}

// signatureExpired reports whether r's URL signature has an expiration
// that has passed (or is not a number).
func (s *Server) signatureExpired(r *http.Request) bool {
	exp := r.URL.Query().Get("signature_expiration")
	if exp == "" {
		return false
	}
	n, err := strconv.ParseInt(exp, 10, 64)
	return err != nil || s.now().Unix() > n
}

// bySignature finds the running sandbox whose token signs r.
func (s *Server) bySignature(r *http.Request) *box {
	s.mu.Lock()
	all := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		all = append(all, b)
	}
	s.mu.Unlock()
	for _, b := range all {
		if s.signatureOK(r, b) {
			return b
		}
	}
	return nil
}

// userOf reads the user a request acts as: Basic auth "<user>:" on RPCs,
// the username query parameter on /files. "user" (E2B's default user)
// and no user are the sandbox's default user; "root" is root.
func userOf(r *http.Request) (string, error) {
	u := r.URL.Query().Get("username")
	if name, _, ok := r.BasicAuth(); ok {
		u = name
	}
	switch u {
	case "", "user":
		return "", nil
	case "root":
		return "root", nil
	}
	return "", fmt.Errorf("user %q: this sandbox has the users user (the default) and root", clip(u))
}

// resolve makes a client's path absolute, as the user c acts as sees it.
func (c envdCall) resolve(p string) (string, error) {
	home := Homedir
	if c.user == "root" {
		home = rootHome
	}
	return resolvePath(p, home)
}

// resolvePath makes a client's path absolute: relative ones and ~ are
// under home.
func resolvePath(p, home string) (string, error) {
	if p == "" {
		return "", errors.New("path: required")
	}
	if len(p) > 4096 || strings.ContainsRune(p, 0) {
		return "", errors.New("path: too long or contains NUL")
	}
	switch {
	case p == "~":
		p = home
	case strings.HasPrefix(p, "~/"):
		p = path.Join(home, p[2:])
	case !path.IsAbs(p):
		p = path.Join(home, p)
	}
	return path.Clean(p), nil
}

// opContext bounds one file operation.
func opContext(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), 5*time.Minute)
}

// fileStatus maps a sandbox file error to envd's REST status.
func fileStatus(err error) (int, string) {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return http.StatusNotFound, "no such file or directory"
	case errors.Is(err, fs.ErrPermission):
		return http.StatusForbidden, "permission denied"
	case errors.Is(err, fs.ErrExist):
		return http.StatusConflict, "already exists"
	case isNoSpace(err):
		return http.StatusInsufficientStorage, "no space left in the sandbox"
	}
	return http.StatusInternalServerError, "the file operation failed"
}

func isNoSpace(err error) bool {
	return strings.Contains(err.Error(), "no space left") || strings.Contains(err.Error(), "quota exceeded")
}

func (s *Server) handleDownload(w http.ResponseWriter, r *http.Request, c envdCall) {
	p, err := c.resolve(r.URL.Query().Get("path"))
	if err != nil {
		writeEnvdError(w, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := opContext(r)
	defer cancel()
	rec := Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "files.read", Outcome: "ok", Detail: clipDetail(p)}
	defer func() { s.audit.record(rec) }()
	// The file is streamed from the sandbox as the client takes it: the
	// server holds a flow window of it, whatever its size, and sends its
	// first bytes before the sandbox read the rest.
	f, err := c.lv.sb.Open(ctx, p, s.cfg.MaxFile)
	if err != nil {
		status, msg := downloadStatus(err, s.cfg.MaxFile)
		rec.Outcome = outcomeOf(status)
		writeEnvdError(w, status, msg)
		return
	}
	defer f.Close()
	size := f.Stat().Size // 0: unknown (a /proc file)
	// The first bytes, to judge whether gzip is worth it, are read before
	// the answer's status: a read that fails this early still gets an
	// error status.
	buf := downloadBuffers.Get().(*[]byte)
	defer downloadBuffers.Put(buf)
	sample := (*buf)[:gzipSample]
	n, err := io.ReadFull(f, sample)
	whole := err != nil // the file ended within the sample
	if whole && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
		status, msg := downloadStatus(err, s.cfg.MaxFile)
		rec.Outcome = outcomeOf(status)
		writeEnvdError(w, status, msg)
		return
	}
	sample = sample[:n]
	// The server has no write timeout (streams last); a download gets
	// its own.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(5 * time.Minute))
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": path.Base(p)}))
	h.Add("Vary", "Accept-Encoding")
	known := max(size, int64(n))
	if whole {
		known = int64(n)
	}
	var out io.Writer = w
	var gz *gzip.Writer
	if acceptsGzip(r) && !nearby(r) && worthGzip(p, known, sample) {
		h.Set("Content-Encoding", "gzip")
		gz, _ = gzip.NewWriterLevel(w, gzip.BestSpeed)
		out = gz
	} else if size > 0 || whole {
		h.Set("Content-Length", strconv.FormatInt(known, 10))
	}
	w.WriteHeader(http.StatusOK)
	_, err = out.Write(sample)
	if err == nil && !whole {
		// Through a plain writer: the ResponseWriter's ReadFrom would
		// copy in its own small buffer.
		_, err = io.CopyBuffer(struct{ io.Writer }{out}, f, *buf)
	}
	if err == nil && gz != nil {
		err = gz.Close()
	}
	if err != nil {
		// The status is sent: the client learns of the failure by a
		// body cut short (its Content-Length, or chunks without their
		// end), never by a body that looks whole.
		rec.Outcome = "error"
		if status, _ := downloadStatus(err, s.cfg.MaxFile); status != http.StatusInternalServerError {
			rec.Outcome = outcomeOf(status)
		}
		rec.Detail = clipDetail(p + ": " + err.Error())
		panic(http.ErrAbortHandler)
	}
}

// downloadBuffers are a download's copy buffers: a bulk frame of the
// executor's (execproto.BulkChunkSize) at a time.
var downloadBuffers = sync.Pool{New: func() any {
	b := make([]byte, execproto.BulkChunkSize)
	return &b
}}

// downloadStatus maps a download's error to envd's status and message.
func downloadStatus(err error, maxFile int64) (int, string) {
	var fe *sandbox.FileError
	switch {
	case errors.Is(err, sandbox.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, fmt.Sprintf("the file is over the %d bytes a download serves", maxFile)
	case errors.Is(err, sandbox.ErrNotRegular):
		return http.StatusBadRequest, "not a regular file (a FIFO, socket or device)"
	case errors.As(err, &fe) && fe.Errno == "EISDIR":
		return http.StatusBadRequest, "path is a directory"
	}
	return fileStatus(err)
}

// nearby reports whether r's client is on this machine: its peer is a
// loopback address and no proxy says it forwarded the request (Forwarded,
// X-Forwarded-For, X-Real-Ip). Such a client is not gzipped for: over
// loopback the bytes cost next to nothing and inflating them costs the
// client more than they save (node's fetch, which the SDK uses, read
// 20 MiB of text gzipped several times slower than as it is, in one run
// of bench/e2b-download.sh; docs/benchmarks.md). A TLS terminator or
// proxy on this machine that says it forwarded still gets gzip for its
// remote client.
func nearby(r *http.Request) bool {
	for _, h := range []string{"Forwarded", "X-Forwarded-For", "X-Real-Ip"} {
		if r.Header.Get(h) != "" {
			return false
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return false
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		if enc, _, _ := strings.Cut(strings.TrimSpace(part), ";"); enc == "gzip" {
			return true
		}
	}
	return false
}

// writeInfo is one written file, as envd answers an upload.
type writeInfo struct {
	Name     string            `json:"name"`
	Type     string            `json:"type"`
	Path     string            `json:"path"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// File metadata (envd 0.6.2): an upload's X-Metadata-<key> headers are
// the file's metadata, kept as its user.e2b.<key> extended attributes;
// each upload replaces what it had. EntryInfo.metadata reports them,
// whoever set them.
const (
	metadataHeader = "X-Metadata-"
	metadataXattr  = "e2b." // after "user."
	// maxMetadataKey is envd's bound: the VFS's 255-byte xattr name less
	// "user.e2b.".
	maxMetadataKey = 246
)

// uploadMetadata reads an upload's metadata from its headers (the first
// value of each; keys lowercased), checked as envd checks it.
func uploadMetadata(h http.Header) (map[string]string, error) {
	var md map[string]string
	size := 0
	for name, vals := range h {
		key, ok := cutPrefixFold(name, metadataHeader)
		if !ok {
			continue
		}
		key = strings.ToLower(key)
		v := vals[0]
		if key == "" || len(key) > maxMetadataKey || !printableASCII(key) || !printableASCII(v) {
			return nil, fmt.Errorf("metadata %q: keys of 1 to %d and values of printable US-ASCII", clip(key), maxMetadataKey)
		}
		size += len("user."+metadataXattr) + len(key) + len(v)
		if md == nil {
			md = map[string]string{}
		}
		md[key] = v
	}
	if size > execproto.MaxXattrBytes {
		return nil, fmt.Errorf("metadata: %d bytes, at most %d", size, execproto.MaxXattrBytes)
	}
	return md, nil
}

// cutPrefixFold is strings.CutPrefix, ignoring ASCII case.
func cutPrefixFold(s, prefix string) (string, bool) {
	if len(s) < len(prefix) || !strings.EqualFold(s[:len(prefix)], prefix) {
		return s, false
	}
	return s[len(prefix):], true
}

func printableASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// metadataOf is a file's metadata: its user.e2b.* attributes.
func metadataOf(xattrs map[string]string) map[string]string {
	var md map[string]string
	for k, v := range xattrs {
		if key, ok := strings.CutPrefix(k, metadataXattr); ok && key != "" {
			if md == nil {
				md = map[string]string{}
			}
			md[key] = v
		}
	}
	return md
}

// maxUploadParts bounds the files of one multipart upload.
const maxUploadParts = 1000

func (s *Server) handleUpload(w http.ResponseWriter, r *http.Request, c envdCall) {
	ctx, cancel := opContext(r)
	defer cancel()
	mt, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []writeInfo
	fail := func(status int, msg, p string) {
		s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "files.write", Outcome: outcomeOf(status), Detail: clipDetail(p + ": " + msg)})
		writeEnvdError(w, status, msg)
	}
	md, err := uploadMetadata(r.Header)
	if err != nil {
		fail(http.StatusBadRequest, err.Error(), "")
		return
	}
	attrs := make(map[string]string, len(md))
	for k, v := range md {
		attrs[metadataXattr+k] = v
	}
	wctx := sandbox.WithWriteXattrs(ctx, metadataXattr, attrs)
	write := func(rawPath string, body io.Reader) bool {
		p, err := c.resolve(rawPath)
		if err != nil {
			fail(http.StatusBadRequest, err.Error(), rawPath)
			return false
		}
		lim := &limitReader{r: body, left: s.cfg.MaxFile}
		if err := c.lv.sb.Mkdir(sandbox.WithMkdirAsRoot(ctx), path.Dir(p), 0o755, true); err != nil && !errors.Is(err, fs.ErrExist) {
			status, msg := fileStatus(err)
			fail(status, msg, p)
			return false
		}
		err = c.lv.sb.WriteFile(wctx, p, lim, 0o644)
		if lim.over {
			fail(http.StatusRequestEntityTooLarge, fmt.Sprintf("the file is over %d bytes, the most an upload takes", s.cfg.MaxFile), p)
			return false
		}
		if err != nil {
			status, msg := fileStatus(err)
			fail(status, msg, p)
			return false
		}
		s.audit.record(Record{Tenant: c.b.tenant, Sandbox: c.b.id, Op: "files.write", Outcome: "ok", Detail: clipDetail(p)})
		written = append(written, writeInfo{Name: path.Base(p), Type: "file", Path: p, Metadata: md})
		return true
	}
	switch mt {
	case "multipart/form-data":
		if params["boundary"] == "" {
			fail(http.StatusBadRequest, "multipart body without a boundary", "")
			return
		}
		mr := multipart.NewReader(r.Body, params["boundary"])
		for n := 0; ; n++ {
			part, err := mr.NextPart()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil || n >= maxUploadParts {
				fail(http.StatusBadRequest, "malformed multipart body", "")
				return
			}
			if part.FormName() != "file" {
				part.Close()
				continue
			}
			// The part's filename carries the destination path; Go's
			// Part.FileName would cut it to its base name.
			_, dp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			dest := dp["filename"]
			if dest == "" {
				dest = r.URL.Query().Get("path")
			}
			ok := write(dest, part)
			part.Close()
			if !ok {
				return
			}
		}
	case "application/octet-stream", "":
		var body io.Reader = r.Body
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			gz, err := gzip.NewReader(r.Body)
			if err != nil {
				fail(http.StatusBadRequest, "malformed gzip body", "")
				return
			}
			defer gz.Close()
			body = gz
		default:
			fail(http.StatusBadRequest, fmt.Sprintf("Content-Encoding %q: want gzip or none", clip(enc)), "")
			return
		}
		if !write(r.URL.Query().Get("path"), body) {
			return
		}
	default:
		fail(http.StatusUnsupportedMediaType, fmt.Sprintf("content type %q: want multipart/form-data or application/octet-stream", clip(mt)), "")
		return
	}
	if len(written) == 0 {
		fail(http.StatusBadRequest, "no file in the upload", "")
		return
	}
	writeJSON(w, http.StatusOK, written)
}

// limitReader fails reads past its budget (and says so), so an oversized
// upload is cut off, not truncated silently.
type limitReader struct {
	r    io.Reader
	left int64
	over bool
}

func (l *limitReader) Read(p []byte) (int, error) {
	if int64(len(p)) > l.left+1 {
		p = p[:l.left+1]
	}
	n, err := l.r.Read(p)
	if int64(n) > l.left {
		l.over = true
		return 0, errors.New("upload over its limit")
	}
	l.left -= int64(n)
	return n, err
}
