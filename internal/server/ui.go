package server

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

// The web UI: hand-written HTML, CSS and JavaScript modules in web/,
// embedded in the binary and served under /ui/. The pages call the JSON
// API with the session cookie (session.go); the server renders no page
// and puts no data into one, so the only script a page runs is the files
// below, which the Content-Security-Policy enforces.

//go:embed web
var webFiles embed.FS

// uiCSP is the UI's Content-Security-Policy: only this server's own
// files, no inline script or style, no eval, no framing, no plugins, and
// no way to post a form or open a connection elsewhere. Trusted Types
// make any script that writes HTML into the page throw rather than
// render it: the UI builds its DOM with textContent only.
const uiCSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; font-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'; " +
	"require-trusted-types-for 'script'; trusted-types 'none'"

// setUIHeaders sets the security headers of every UI response.
func setUIHeaders(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
	if r.TLS != nil {
		h.Set("Strict-Transport-Security", "max-age=31536000")
	}
}

// uiAsset is one embedded file, ready to serve.
type uiAsset struct {
	body  []byte
	etag  string
	ctype string
}

// uiAssets reads the embedded files into memory, with their ETags.
func uiAssets() (map[string]uiAsset, error) {
	out := map[string]uiAsset{}
	err := fs.WalkDir(webFiles, "web", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := webFiles.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		case ".js":
			ctype = "text/javascript; charset=utf-8"
		case ".svg":
			ctype = "image/svg+xml"
		}
		if ctype == "" {
			ctype = "application/octet-stream"
		}
		out[strings.TrimPrefix(p, "web/")] = uiAsset{body: b, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ctype}
		return nil
	})
	return out, err
}

// routeUI registers the web UI: its pages and files under /ui/, login,
// logout and the session under /ui/, and / redirecting to /ui/. None of
// these is in the API's table (nor in its OpenAPI document).
func (s *Server) routeUI() error {
	assets, err := uiAssets()
	if err != nil {
		return err
	}
	s.sessions = newSessions(s.o.Store, s.o.Now, s.log)
	for _, rt := range []route{
		{method: "GET", pattern: "/{$}", public: true, h: s.uiRoot},
		{method: "GET", pattern: "/ui/", public: true, h: s.uiPage(assets)},
		{method: "POST", pattern: "/ui/login", public: true, body: maxLoginBody, h: s.uiLogin},
		{method: "POST", pattern: "/ui/logout", public: true, h: s.uiLogout},
		{method: "GET", pattern: "/ui/session", public: true, h: s.uiSession},
	} {
		s.mux.Handle(rt.method+" "+rt.pattern, s.wrap(rt))
	}
	return nil
}

func (s *Server) uiRoot(w http.ResponseWriter, r *http.Request, _ *call) error {
	setUIHeaders(w, r)
	http.Redirect(w, r, "/ui/", http.StatusFound)
	return nil
}

// uiPage serves /ui/static/FILE from the embedded files, and the page
// (index.html) for every other path under /ui/: the page reads its path
// to show a run, the approvals inbox and so on.
func (s *Server) uiPage(assets map[string]uiAsset) handler {
	return func(w http.ResponseWriter, r *http.Request, _ *call) error {
		setUIHeaders(w, r)
		name := "index.html"
		if rest, ok := strings.CutPrefix(r.URL.Path, "/ui/static/"); ok {
			name = "static/" + rest
			if rest == "" || strings.Contains(rest, "..") {
				return errNoRoute
			}
		}
		a, ok := assets[name]
		if !ok {
			return errNoRoute
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("ETag", a.etag)
		// Revalidated on every load (a 304 when unchanged), so a new
		// binary's files are used at once.
		h.Set("Cache-Control", "no-cache")
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
		return nil
	}
}
