// Package testgit serves throwaway git repositories over git's smart HTTP
// protocol on loopback, for tests of git workspaces. Only tests import it.
package testgit

import (
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Server serves the bare repositories under a directory with
// git-http-backend (as a CGI) and counts the requests it got.
type Server struct {
	*httptest.Server
	// Root holds the bare repositories, NAME.git.
	Root string
	hits atomic.Int32
}

// Hits returns the number of requests served.
func (s *Server) Hits() int32 { return s.hits.Load() }

// ResetHits sets the request count to zero.
func (s *Server) ResetHits() { s.hits.Store(0) }

// NewServer starts a server on loopback; tb skips when git or its HTTP
// backend is missing (scripts/ci-deps.sh installs git).
func NewServer(tb testing.TB) *Server {
	tb.Helper()
	execPath, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		tb.Skipf("needs git (scripts/ci-deps.sh installs it): %v", err)
	}
	backend := filepath.Join(strings.TrimSpace(string(execPath)), "git-http-backend")
	if _, err := os.Stat(backend); err != nil {
		tb.Skipf("needs git-http-backend: %v", err)
	}
	s := &Server{Root: tb.TempDir()}
	h := &cgi.Handler{Path: backend, Env: []string{"GIT_PROJECT_ROOT=" + s.Root, "GIT_HTTP_EXPORT_ALL=1"}}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.hits.Add(1)
		h.ServeHTTP(w, r)
	}))
	tb.Cleanup(s.Close)
	return s
}

// Repo makes the bare repository NAME.git with two commits: the first,
// tagged v1, has README "first"; the second "second". It returns the
// commit ids, first then second.
func (s *Server) Repo(tb testing.TB, name string) (first, second string) {
	tb.Helper()
	work := tb.TempDir()
	git := func(args ...string) string {
		tb.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = work
		cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t",
			"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
		out, err := cmd.CombinedOutput()
		if err != nil {
			tb.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(body string) {
		tb.Helper()
		if err := os.WriteFile(filepath.Join(work, "README"), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	git("init", "-q", "-b", "main", ".")
	write("first\n")
	git("add", "README")
	git("commit", "-q", "-m", "one")
	git("tag", "v1")
	first = git("rev-parse", "HEAD")
	write("second\n")
	git("commit", "-q", "-am", "two")
	second = git("rev-parse", "HEAD")
	git("clone", "-q", "--bare", ".", filepath.Join(s.Root, name+".git"))
	return first, second
}
