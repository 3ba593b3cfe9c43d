package engine

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/airlockrun/airlock/internal/event"
	"github.com/airlockrun/airlock/internal/sandbox"
)

// A git source is fetched inside the run's own sandbox, before the model
// runs anything there: git talks to the repository through the sandbox's
// egress proxy, so the run's network policy decides whether the repository
// is reachable (and injects any credential it needs), and the host never
// parses what the repository sends. The fetched tree is kept as a tar blob
// and recorded (workspace.fetched); from then on it is the sandbox's
// source, exactly like an uploaded tar, so a recovery never fetches again.

// GitSource names a repository a sandbox's /workspace starts as.
type GitSource struct {
	// URL is the repository: http or https, with no user information,
	// query or fragment (a credential belongs in the policy, which the
	// proxy injects; it is never in the run's record).
	URL string `json:"url"`
	// Ref is a branch, tag or commit id to check out; empty means the
	// repository's default branch.
	Ref string `json:"ref,omitempty"`
}

const (
	// MaxGitURLLen bounds a git source's URL.
	MaxGitURLLen = 2048
	// gitFetchTimeout bounds the whole fetch of a git source.
	gitFetchTimeout = 10 * time.Minute
)

// gitRef is what a ref may look like: no leading dash (never an option),
// no colon (never a refspec), nothing a shell or git would read twice.
var gitRef = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._/-]{0,254}$`)

// Validate checks g.
func (g GitSource) Validate() error {
	if len(g.URL) > MaxGitURLLen {
		return fmt.Errorf("git url: longer than %d bytes", MaxGitURLLen)
	}
	if strings.ContainsFunc(g.URL, func(r rune) bool { return unicode.IsControl(r) || unicode.IsSpace(r) }) {
		return errors.New("git url: contains a space or control character")
	}
	u, err := url.Parse(g.URL)
	if err != nil {
		return errors.New("git url: does not parse")
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("git url: scheme %q: want http or https (the only ways through the egress proxy)", u.Scheme)
	case u.Host == "" || u.Hostname() == "":
		return errors.New("git url: no host")
	case u.User != nil:
		return errors.New("git url: has user information; put the credential in the policy's network.credentials")
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return errors.New("git url: has a query or fragment")
	}
	if g.Ref != "" && (!gitRef.MatchString(g.Ref) || strings.Contains(g.Ref, "..") || strings.HasSuffix(g.Ref, ".lock") || strings.HasSuffix(g.Ref, "/")) {
		return fmt.Errorf("git ref %q: want a branch, tag or commit id of [A-Za-z0-9._/-]", g.Ref)
	}
	return nil
}

// gitEnv makes git in the sandbox non-interactive and blind to any
// configuration but its own.
var gitEnv = []string{
	"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/tmp",
	"GIT_ADVICE=0", "GIT_ASKPASS=/bin/false", "SSH_ASKPASS=/bin/false",
}

// fetchGit fetches sandbox name's git source into sb's empty /workspace,
// keeps the tree as a blob and records it.
func (d *driver) fetchGit(ctx context.Context, sb sandbox.Sandbox, name string, g GitSource) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, gitFetchTimeout)
	defer cancel()
	ref := g.Ref
	if ref == "" {
		ref = "HEAD"
	}
	steps := [][]string{
		{"git", "init", "-q", "/workspace"},
		{"git", "-C", "/workspace", "remote", "add", "origin", "--", g.URL},
		{"git", "-C", "/workspace", "fetch", "-q", "--depth", "1", "--no-tags", "origin", "--", ref},
		{"git", "-C", "/workspace", "checkout", "-q", "--detach", "FETCH_HEAD"},
		{"git", "-C", "/workspace", "rev-parse", "HEAD"},
	}
	var commit string
	for _, argv := range steps {
		var out tailBuffer
		res, err := sandbox.Run(ctx, sb, sandbox.Command{
			Argv: argv, Env: gitEnv, Stdout: &out, Stderr: &out,
			MaxOutput: 1 << 20,
		})
		if err != nil {
			return fmt.Errorf("git source %s: %s: %w", g.URL, argv[len(argv)-2], err)
		}
		if res.Outcome != sandbox.OutcomeExited || res.ExitCode != 0 {
			msg := strings.TrimSpace(out.String())
			if res.Outcome != sandbox.OutcomeExited {
				msg = string(res.Outcome) + ": " + res.Message + " " + msg
			}
			return fmt.Errorf("git source %s (ref %s): %s failed: %s", g.URL, ref, strings.Join(argv[3:], " "), clipLine(msg))
		}
		commit = strings.TrimSpace(out.String())
	}
	digest, size, err := d.export(ctx, sb)
	if err != nil {
		return fmt.Errorf("git source %s: keep the tree: %w", g.URL, err)
	}
	_, err = d.record(ctx, event.WorkspaceFetched{
		Sandbox: name, URL: g.URL, Ref: g.Ref, Commit: clipLine(commit), Digest: digest,
		Size: size, DurationMS: time.Since(start).Milliseconds(),
	})
	return err
}

// clipLine keeps the last 512 bytes of s on one line: enough of git's
// complaint to say why.
func clipLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 512 {
		s = "…" + s[len(s)-512:]
	}
	return s
}

// sourceTar returns the tar blob sandbox name's workspace started as: an
// uploaded tar, or the tree its git source gave; "" for a host directory
// or an empty workspace.
func (d *driver) sourceTar(name string) string {
	sc, _ := d.cfg.sandbox(name)
	if sc.Tar != "" {
		return sc.Tar
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.shared.fetched[name]
}
