package e2b

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config is the "e2b" section of airlock serve's configuration. The E2B
// API is off unless both addresses are set.
type Config struct {
	// APIAddr is the control plane's listen address (what E2B_API_URL
	// points at), e.g. 127.0.0.1:3000.
	APIAddr string `yaml:"api_addr"`
	// SandboxAddr is the data plane's listen address (what
	// E2B_SANDBOX_URL points at), e.g. 127.0.0.1:49983.
	SandboxAddr string `yaml:"sandbox_addr"`
	// Domain, when set, is returned as each sandbox's domain and routes
	// data-plane requests by Host <port>-<sandbox id>.<domain> (for
	// clients that set E2B_DOMAIN rather than E2B_SANDBOX_URL).
	Domain string `yaml:"domain"`
	// DefaultTimeout is a sandbox's lifetime when create gives none
	// (default 300s, as E2B's).
	DefaultTimeout time.Duration `yaml:"default_timeout"`
	// MaxTimeout bounds the lifetime a client may ask for (default 1h).
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// MaxSandboxes bounds one tenant's sandboxes, running and paused
	// (default 20).
	MaxSandboxes int `yaml:"max_sandboxes"`
	// MaxMessage bounds a Connect message or a JSON request body, in
	// bytes (default 4 MiB).
	MaxMessage int64 `yaml:"max_message"`
	// MaxFile bounds an uploaded or downloaded file, in bytes (default
	// 100 MiB).
	MaxFile int64 `yaml:"max_file"`
	// MaxSnapshot bounds a paused sandbox's workspace snapshot, in bytes
	// (default 1 GiB).
	MaxSnapshot int64 `yaml:"max_snapshot"`
	// Keepalive is how often an idle stream sends a keepalive event when
	// the client asks for none (default 50s, what the SDK asks for).
	Keepalive time.Duration `yaml:"keepalive"`
}

// Defaults.
const (
	DefaultTimeout      = 300 * time.Second
	DefaultMaxTimeout   = time.Hour
	DefaultMaxSandboxes = 20
	DefaultMaxMessage   = 4 << 20
	DefaultMaxFile      = 100 << 20
	DefaultMaxSnapshot  = 1 << 30
	DefaultKeepalive    = 50 * time.Second
)

// Enabled reports whether the configuration turns the E2B API on.
func (c Config) Enabled() bool { return c.APIAddr != "" || c.SandboxAddr != "" }

// WithDefaults returns c with every zero field but the addresses and the
// domain set to its default.
func (c Config) WithDefaults() Config {
	if c.DefaultTimeout == 0 {
		c.DefaultTimeout = DefaultTimeout
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = DefaultMaxTimeout
	}
	if c.MaxSandboxes == 0 {
		c.MaxSandboxes = DefaultMaxSandboxes
	}
	if c.MaxMessage == 0 {
		c.MaxMessage = DefaultMaxMessage
	}
	if c.MaxFile == 0 {
		c.MaxFile = DefaultMaxFile
	}
	if c.MaxSnapshot == 0 {
		c.MaxSnapshot = DefaultMaxSnapshot
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	return c
}

// Validate reports every problem of c (after WithDefaults).
func (c Config) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	if c.Enabled() {
		check(c.APIAddr != "" && c.SandboxAddr != "", "e2b: give both api_addr and sandbox_addr, or neither")
		for _, a := range []struct{ name, addr string }{{"api_addr", c.APIAddr}, {"sandbox_addr", c.SandboxAddr}} {
			if a.addr == "" {
				continue
			}
			host, port, err := net.SplitHostPort(a.addr)
			n, perr := strconv.Atoi(port)
			check(err == nil && host != "" && perr == nil && n >= 0 && n <= 65535, "e2b.%s %q: want HOST:PORT", a.name, a.addr)
		}
	}
	if c.Domain != "" {
		check(validDomain(c.Domain), "e2b.domain %q: want a DNS name like sandboxes.example.org", c.Domain)
	}
	check(c.DefaultTimeout >= time.Second && c.DefaultTimeout <= c.MaxTimeout, "e2b.default_timeout %s: want 1s to max_timeout", c.DefaultTimeout)
	check(c.MaxTimeout >= time.Second && c.MaxTimeout <= 30*24*time.Hour, "e2b.max_timeout %s: want 1s to 720h", c.MaxTimeout)
	check(c.MaxSandboxes >= 1 && c.MaxSandboxes <= 100000, "e2b.max_sandboxes %d: want 1 to 100000", c.MaxSandboxes)
	check(c.MaxMessage >= 64<<10 && c.MaxMessage <= 1<<30, "e2b.max_message %d: want 64K to 1G bytes", c.MaxMessage)
	check(c.MaxFile >= 1<<10 && c.MaxFile <= 1<<40, "e2b.max_file %d: want 1K to 1T bytes", c.MaxFile)
	check(c.MaxSnapshot >= 1<<20 && c.MaxSnapshot <= 1<<40, "e2b.max_snapshot %d: want 1M to 1T bytes", c.MaxSnapshot)
	check(c.Keepalive >= time.Second && c.Keepalive <= 10*time.Minute, "e2b.keepalive %s: want 1s to 10m", c.Keepalive)
	return errors.Join(errs...)
}

// validDomain accepts dot-separated labels of letters, digits and dashes.
func validDomain(d string) bool {
	if len(d) > 200 {
		return false
	}
	for _, l := range strings.Split(d, ".") {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return false
		}
		for i := 0; i < len(l); i++ {
			c := l[i]
			if (c < 'a' || c > 'z') && (c < 'A' || c > 'Z') && (c < '0' || c > '9') && c != '-' {
				return false
			}
		}
	}
	return true
}
