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
	// MaxTimeout bounds the lifetime a client may ask for (default 1h):
	// a longer timeout is refused (400), as E2B refuses one over its
	// plan's hours. Tenants may set it per tenant.
	MaxTimeout time.Duration `yaml:"max_timeout"`
	// Tenants are per-tenant settings, by tenant name: a tenant's plan.
	// A tenant not named here has the settings above.
	Tenants map[string]TenantConfig `yaml:"tenants"`
	// MaxSandboxes bounds one tenant's sandboxes, running and paused
	// (default 20).
	MaxSandboxes int `yaml:"max_sandboxes"`
	// MaxMessage bounds a Connect message or a JSON request body, in
	// bytes (default 4 MiB).
	MaxMessage int64 `yaml:"max_message"`
	// MaxFile bounds an uploaded or downloaded file, in bytes (default
	// 100 MiB).
	MaxFile int64 `yaml:"max_file"`
	// MaxSnapshot bounds what a pause or a snapshot keeps of a sandbox's
	// workspace, in bytes: the change it reads and the tree it makes
	// (default 1 GiB).
	MaxSnapshot int64 `yaml:"max_snapshot"`
	// Keepalive is how often an idle stream sends a keepalive event when
	// the client asks for none (default 50s, what the SDK asks for).
	Keepalive time.Duration `yaml:"keepalive"`
	// MetricsInterval is how often every running sandbox's CPU, memory
	// and disk use is sampled for GET /sandboxes/{id}/metrics (default
	// 5s, as E2B's).
	MetricsInterval time.Duration `yaml:"metrics_interval"`

	// Price is what sandboxes cost a metered tenant (one whose credit
	// ledger has entries), by the host's measure.
	Price Price `yaml:"price"`
	// MeterInterval is how often each running sandbox's usage is recorded
	// (a sandbox.usage event) and debited (default 30s); a boot's last
	// usage is recorded when it ends. A metered tenant whose balance is
	// spent has its running sandboxes killed at the next one.
	MeterInterval time.Duration `yaml:"meter_interval"`
	// APIRate and APIBurst are the control plane's token bucket per API
	// key: APIBurst calls at once, APIRate a second after that (defaults
	// 50 and 100). Over it, a call gets 429 with Retry-After.
	APIRate  float64 `yaml:"api_rate"`
	APIBurst int     `yaml:"api_burst"`
	// SandboxRate and SandboxBurst are the data plane's token bucket per
	// sandbox (defaults 500 and 1000).
	SandboxRate  float64 `yaml:"sandbox_rate"`
	SandboxBurst int     `yaml:"sandbox_burst"`
	// MemoryPauseMax is how long a pause that keeps memory (the SDKs'
	// default) may hold the sandbox's processes frozen in the host's RAM
	// (default 15m); then it degrades to the filesystem pause it also
	// took: the processes end, the workspace stays. Negative makes every
	// pause filesystem-only.
	MemoryPauseMax time.Duration `yaml:"memory_pause_max"`
	// MemoryPauseMinAvailable is the host's memory pressure policy, a
	// fraction of its memory (default 0.1): while MemAvailable is under
	// it, no pause keeps memory and the oldest frozen sandbox degrades to
	// its filesystem pause, one a second.
	MemoryPauseMinAvailable float64 `yaml:"memory_pause_min_available"`

	// AdvertiseHost is the host name or IP address at which the other
	// replicas of this service (airlock serve processes sharing one
	// PostgreSQL) reach this one's E2B listeners, on their ports: a
	// request for a sandbox this replica holds that reaches another
	// replica is relayed here (a pod's IP on Kubernetes). Empty: this
	// replica advertises no address, and the others answer 503 for its
	// sandboxes, naming it. Relaying also needs SealKeyFile.
	AdvertiseHost string `yaml:"advertise_host"`
	// SealKeyFile names a file holding the key the replicas share (at
	// least 32 bytes, e.g. 64 hex digits; mounted from a Secret, never
	// kept in the store): each sandbox's secrets (its tokens, create's
	// envs) are sealed under it in its record, so that another replica
	// can take a sandbox over when its replica dies, and the replicas'
	// advertised addresses are authenticated with it, so that no one
	// who can only write the store can make a replica relay requests
	// (and their keys) elsewhere. Empty: no sealing, no relaying.
	SealKeyFile string `yaml:"seal_key_file"`
}

// TenantConfig is one tenant's plan: a zero field takes the section's
// setting.
type TenantConfig struct {
	// MaxTimeout bounds the lifetime this tenant's clients may ask for.
	MaxTimeout time.Duration `yaml:"max_timeout"`
}

// maxTimeout is tenant's bound on a sandbox's lifetime.
func (c Config) maxTimeout(tenant string) time.Duration {
	if t, ok := c.Tenants[tenant]; ok && t.MaxTimeout > 0 {
		return t.MaxTimeout
	}
	return c.MaxTimeout
}

// Price is the host's price of sandbox use, in micro-credits (millionths
// of a credit). A zero field takes its default; a negative one makes that
// use free.
type Price struct {
	// SandboxSecond is charged per second a sandbox is up, whatever it
	// does (default 10).
	SandboxSecond int64 `yaml:"sandbox_second"`
	// CPUSecond is charged per second of CPU time its processes use, as
	// the host's cgroup counts it (default 20).
	CPUSecond int64 `yaml:"cpu_second"`
	// MemoryGiBSecond is charged per GiB of the sandbox's memory limit
	// per second it is up (default 5).
	MemoryGiBSecond int64 `yaml:"memory_gib_second"`
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
	// DefaultMetricsInterval is MetricsInterval's default.
	DefaultMetricsInterval = 5 * time.Second

	DefaultPriceSandboxSecond   = 10
	DefaultPriceCPUSecond       = 20
	DefaultPriceMemoryGiBSecond = 5
	DefaultMeterInterval        = 30 * time.Second
	DefaultAPIRate              = 50
	DefaultAPIBurst             = 100
	DefaultSandboxRate          = 500
	DefaultSandboxBurst         = 1000
	// DefaultMemoryPauseMax is MemoryPauseMax's default.
	DefaultMemoryPauseMax = 15 * time.Minute
	// DefaultMemoryPauseMinAvailable is MemoryPauseMinAvailable's default.
	DefaultMemoryPauseMinAvailable = 0.1
)

// maxPrice bounds each price, in micro-credits (a thousand credits a
// second), so a usage's cost is far from overflowing.
const maxPrice = 1_000_000_000

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
	if c.MetricsInterval == 0 {
		c.MetricsInterval = DefaultMetricsInterval
	}
	c.Price = c.Price.withDefaults()
	if c.MeterInterval == 0 {
		c.MeterInterval = DefaultMeterInterval
	}
	if c.APIRate == 0 {
		c.APIRate = DefaultAPIRate
	}
	if c.APIBurst == 0 {
		c.APIBurst = DefaultAPIBurst
	}
	if c.SandboxRate == 0 {
		c.SandboxRate = DefaultSandboxRate
	}
	if c.SandboxBurst == 0 {
		c.SandboxBurst = DefaultSandboxBurst
	}
	if c.MemoryPauseMax == 0 {
		c.MemoryPauseMax = DefaultMemoryPauseMax
	}
	if c.MemoryPauseMinAvailable == 0 {
		c.MemoryPauseMinAvailable = DefaultMemoryPauseMinAvailable
	}
	return c
}

// withDefaults sets zero prices to their defaults and negative ones to 0.
func (p Price) withDefaults() Price {
	for _, f := range []struct {
		v   *int64
		def int64
	}{{&p.SandboxSecond, DefaultPriceSandboxSecond}, {&p.CPUSecond, DefaultPriceCPUSecond}, {&p.MemoryGiBSecond, DefaultPriceMemoryGiBSecond}} {
		switch {
		case *f.v == 0:
			*f.v = f.def
		case *f.v < 0:
			*f.v = 0
		}
	}
	return p
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
	for name, t := range c.Tenants {
		check(t.MaxTimeout >= 0 && t.MaxTimeout <= 30*24*time.Hour, "e2b.tenants.%s.max_timeout %s: want 0 (max_timeout's) to 720h", name, t.MaxTimeout)
		check(t.MaxTimeout == 0 || t.MaxTimeout >= c.DefaultTimeout, "e2b.tenants.%s.max_timeout %s: want at least default_timeout (%s)", name, t.MaxTimeout, c.DefaultTimeout)
	}
	check(c.MaxSandboxes >= 1 && c.MaxSandboxes <= 100000, "e2b.max_sandboxes %d: want 1 to 100000", c.MaxSandboxes)
	check(c.MaxMessage >= 64<<10 && c.MaxMessage <= 1<<30, "e2b.max_message %d: want 64K to 1G bytes", c.MaxMessage)
	check(c.MaxFile >= 1<<10 && c.MaxFile <= 1<<40, "e2b.max_file %d: want 1K to 1T bytes", c.MaxFile)
	check(c.MaxSnapshot >= 1<<20 && c.MaxSnapshot <= 1<<40, "e2b.max_snapshot %d: want 1M to 1T bytes", c.MaxSnapshot)
	check(c.Keepalive >= time.Second && c.Keepalive <= 10*time.Minute, "e2b.keepalive %s: want 1s to 10m", c.Keepalive)
	check(c.MetricsInterval >= time.Second && c.MetricsInterval <= 10*time.Minute, "e2b.metrics_interval %s: want 1s to 10m", c.MetricsInterval)
	for _, p := range []struct {
		name string
		v    int64
	}{{"sandbox_second", c.Price.SandboxSecond}, {"cpu_second", c.Price.CPUSecond}, {"memory_gib_second", c.Price.MemoryGiBSecond}} {
		check(p.v >= 0 && p.v <= maxPrice, "e2b.price.%s %d: want 0 to %d micro-credits", p.name, p.v, maxPrice)
	}
	check(c.MeterInterval >= time.Second && c.MeterInterval <= time.Hour, "e2b.meter_interval %s: want 1s to 1h", c.MeterInterval)
	check(c.APIRate > 0 && c.APIRate <= 1e6, "e2b.api_rate %v: want above 0, at most 1000000 a second", c.APIRate)
	check(c.APIBurst >= 1 && c.APIBurst <= 1e6, "e2b.api_burst %d: want 1 to 1000000", c.APIBurst)
	check(c.SandboxRate > 0 && c.SandboxRate <= 1e6, "e2b.sandbox_rate %v: want above 0, at most 1000000 a second", c.SandboxRate)
	check(c.SandboxBurst >= 1 && c.SandboxBurst <= 1e6, "e2b.sandbox_burst %d: want 1 to 1000000", c.SandboxBurst)
	check(c.MemoryPauseMax <= 30*24*time.Hour, "e2b.memory_pause_max %s: want at most 720h (negative: no memory pauses)", c.MemoryPauseMax)
	check(c.AdvertiseHost == "" || validAdvertise(c.AdvertiseHost), "e2b.advertise_host %q: want a host name or an IP address, without a port", c.AdvertiseHost)
	check(c.MemoryPauseMinAvailable >= 0 && c.MemoryPauseMinAvailable < 1, "e2b.memory_pause_min_available %v: want 0 to below 1", c.MemoryPauseMinAvailable)
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

// validAdvertise accepts a DNS name or an IP address (an IPv6 one bare or
// in brackets).
func validAdvertise(h string) bool {
	if ip := net.ParseIP(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")); ip != nil {
		return true
	}
	return validDomain(h)
}
