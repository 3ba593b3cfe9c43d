package sandbox

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ownEnv are the environment variables a sandbox sets for its own
// workings: those pointing tools at its egress proxy (the only way out of
// a proxy-mode sandbox) and at its trust store (which holds the proxy's
// CA; see Spec.TrustedCAs). A value of the caller's would break either
// one, or, with two entries of one name, leave each program to pick one.
var ownEnv = []string{
	"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PIP_CERT", "NODE_EXTRA_CA_CERTS",
}

// OwnEnv reports whether the sandbox sets variable key for its own
// workings (its egress proxy, its trust store): a value from elsewhere (an
// image's config, say) must not take its place.
func OwnEnv(key string) bool { return slices.Contains(ownEnv, key) }

// CheckEnv checks environment entries a caller gives a sandbox or its
// commands (the --env flags): each must be KEY=VALUE and name none of the
// variables the sandbox sets itself, nor any of reserved, which the caller
// sets itself. It reports every bad entry at once. Other defaults (PATH,
// HOME, LANG…) may be overridden.
func CheckEnv(env []string, reserved ...string) error {
	var errs []error
	for _, e := range env {
		k, _, ok := strings.Cut(e, "=")
		switch {
		case !ok || k == "" || strings.ContainsRune(e, 0):
			errs = append(errs, fmt.Errorf("%q: want KEY=VALUE", e))
		case slices.Contains(ownEnv, k) || slices.Contains(reserved, k):
			errs = append(errs, fmt.Errorf("%s: airlock sets it in the sandbox", k))
		}
	}
	return errors.Join(errs...)
}
