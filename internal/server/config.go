package server

import (
	"errors"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/airlockrun/airlock/internal/policy"
)

// Config tunes the API. Its zero value is the default of every field; it
// is the "api" section of airlock serve's configuration file.
type Config struct {
	// MaxBody bounds a JSON request body (default 2M: an inline policy
	// and a script fit).
	MaxBody Size `yaml:"max_body"`
	// MaxUpload bounds an uploaded workspace tarball (default 256M).
	MaxUpload Size `yaml:"max_upload"`
	// MaxHeader bounds a request's header lines (default 64K).
	MaxHeader Size `yaml:"max_header"`
	// Rate is how many requests per second one API key may make over
	// time, Burst how many at once (defaults 20 and 40). Failed
	// authentications are limited the same way per remote address.
	Rate  float64 `yaml:"rate"`
	Burst int     `yaml:"burst"`
	// MaxStreams bounds the event streams one API key holds open at once
	// (default 32).
	MaxStreams int `yaml:"max_streams"`
	// StreamPoll is how often an event stream looks in the store for
	// events other processes appended (default 1s); events this process
	// appends wake it at once. It is also how soon a key revoked, or a
	// UI session ended, elsewhere (another server, the store directly)
	// ends its streams here (revoke.go).
	StreamPoll time.Duration `yaml:"stream_poll"`
	// Keepalive is how often an idle event stream sends a comment line
	// (default 15s).
	Keepalive time.Duration `yaml:"keepalive"`
	// WriteTimeout bounds each write to a client; a client that reads
	// slower is disconnected (default 30s; downloads get it per chunk).
	WriteTimeout time.Duration `yaml:"write_timeout"`
	// RequestTimeout bounds reading a request's body, and twice it
	// writing the answer (default 2m); event streams, uploads and
	// downloads have their own deadlines.
	RequestTimeout time.Duration `yaml:"request_timeout"`
	// TrustTenantPolicies lets tenants' policies name host resources:
	// host directories, mounts, a root filesystem, upstream CA files,
	// pinned addresses, CIDR rules and the host's secrets. Only for a
	// server whose tenants are all trusted with the host (default false).
	TrustTenantPolicies bool `yaml:"trust_tenant_policies"`
}

// Defaults.
const (
	DefaultMaxBody      = 2 << 20
	DefaultMaxUpload    = 256 << 20
	DefaultMaxHeader    = 64 << 10
	DefaultRate         = 20
	DefaultBurst        = 40
	DefaultMaxStreams   = 32
	DefaultStreamPoll   = time.Second
	DefaultKeepalive    = 15 * time.Second
	DefaultWriteTimeout = 30 * time.Second
	DefaultRequest      = 2 * time.Minute
)

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.MaxBody == 0 {
		c.MaxBody = DefaultMaxBody
	}
	if c.MaxUpload == 0 {
		c.MaxUpload = DefaultMaxUpload
	}
	if c.MaxHeader == 0 {
		c.MaxHeader = DefaultMaxHeader
	}
	if c.Rate == 0 {
		c.Rate = DefaultRate
	}
	if c.Burst == 0 {
		c.Burst = DefaultBurst
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.StreamPoll == 0 {
		c.StreamPoll = DefaultStreamPoll
	}
	if c.Keepalive == 0 {
		c.Keepalive = DefaultKeepalive
	}
	if c.WriteTimeout == 0 {
		c.WriteTimeout = DefaultWriteTimeout
	}
	if c.RequestTimeout == 0 {
		c.RequestTimeout = DefaultRequest
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
	check(c.MaxBody >= 1<<10 && c.MaxBody <= 1<<30, "api.max_body %s: want 1K to 1G", c.MaxBody)
	check(c.MaxUpload >= 1<<10 && c.MaxUpload <= 1<<40, "api.max_upload %s: want 1K to 1T", c.MaxUpload)
	check(c.MaxHeader >= 4<<10 && c.MaxHeader <= 1<<20, "api.max_header %s: want 4K to 1M", c.MaxHeader)
	check(c.Rate > 0 && c.Rate <= 1e6, "api.rate %g: want more than 0 and at most 1000000 per second", c.Rate)
	check(c.Burst >= 1 && c.Burst <= 1e6, "api.burst %d: want 1 to 1000000", c.Burst)
	check(c.MaxStreams >= 1 && c.MaxStreams <= 1e5, "api.max_streams %d: want 1 to 100000", c.MaxStreams)
	check(c.StreamPoll >= 10*time.Millisecond && c.StreamPoll <= time.Minute, "api.stream_poll %s: want 10ms to 1m", c.StreamPoll)
	check(c.Keepalive >= 100*time.Millisecond && c.Keepalive <= 10*time.Minute, "api.keepalive %s: want 100ms to 10m", c.Keepalive)
	check(c.WriteTimeout >= 100*time.Millisecond && c.WriteTimeout <= time.Hour, "api.write_timeout %s: want 100ms to 1h", c.WriteTimeout)
	check(c.RequestTimeout >= 100*time.Millisecond && c.RequestTimeout <= time.Hour, "api.request_timeout %s: want 100ms to 1h", c.RequestTimeout)
	return errors.Join(errs...)
}

// Size is a number of bytes, written in configuration as an integer or
// with a K, M, G or T suffix (powers of 1024), like policy sizes.
type Size int64

// String writes s the way UnmarshalYAML reads it.
func (s Size) String() string { return policy.Size(s).String() }

// MarshalYAML writes s as String does.
func (s Size) MarshalYAML() (any, error) { return s.String(), nil }

// UnmarshalYAML reads "512K", "2M", "1G" or a number of bytes.
func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: want a size like 2M", n.Line)
	}
	v, err := policy.ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}
