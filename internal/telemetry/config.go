package telemetry

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Config is the "telemetry" section of airlock serve's configuration. Its
// zero value exports nothing (metrics are still served at /metrics).
type Config struct {
	// OTLPEndpoint is where traces go, over OTLP/HTTP (protobuf): a base
	// URL like http://collector:4318, to which /v1/traces is added, or the
	// full URL of the traces endpoint (any URL with a path). Empty: no
	// traces are made at all. The serve command fills it from
	// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT;
	// the exporter reads the other standard OTEL_EXPORTER_OTLP_*
	// variables (headers, compression, certificates) itself.
	OTLPEndpoint string `yaml:"otlp_endpoint"`
	// ServiceName is the service.name of every span (default "airlock").
	ServiceName string `yaml:"service_name"`
}

// DefaultServiceName is the service.name of spans when Config names none.
const DefaultServiceName = "airlock"

// WithDefaults returns c with every zero field that has a default set.
func (c Config) WithDefaults() Config {
	if c.ServiceName == "" {
		c.ServiceName = DefaultServiceName
	}
	return c
}

// Validate reports every problem of c.
func (c Config) Validate() error {
	var errs []error
	if c.OTLPEndpoint != "" {
		if _, err := c.TracesURL(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(c.ServiceName) > 256 || strings.ContainsFunc(c.ServiceName, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		errs = append(errs, errors.New("telemetry.service_name: want at most 256 printable characters"))
	}
	return errors.Join(errs...)
}

// TracesURL returns the URL traces are posted to: OTLPEndpoint with
// /v1/traces added when it has no path.
func (c Config) TracesURL() (string, error) {
	u, err := url.Parse(c.OTLPEndpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.Opaque != "" {
		return "", fmt.Errorf("telemetry.otlp_endpoint %q: want an http:// or https:// URL like http://collector:4318", clipURL(c.OTLPEndpoint))
	}
	if u.Path == "" || u.Path == "/" {
		u.Path = "/v1/traces"
	}
	return u.String(), nil
}

// clipURL shortens a URL quoted in an error and drops its password, also
// from one that does not parse.
func clipURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil:
		if i := strings.LastIndex(s, "@"); i >= 0 {
			s = "xxxxx" + s[i:]
		}
	case u.User != nil:
		if _, ok := u.User.Password(); ok {
			u.User = url.UserPassword(u.User.Username(), "xxxxx")
			s = u.String()
		}
	}
	return clip(s, 200)
}

// clip bounds s to n bytes of valid UTF-8.
func clip(s string, n int) string {
	s = strings.ToValidUTF8(s, "?")
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
