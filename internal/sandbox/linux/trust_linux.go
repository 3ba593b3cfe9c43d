package linux

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// hostBundles are where distributions keep the system's CA bundle; each one
// the host has is replaced inside the sandbox by the bundle plus the
// sandbox's extra CAs.
var hostBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt", // Debian, Ubuntu, Alpine, Arch
	"/etc/pki/tls/certs/ca-bundle.crt",   // Fedora, RHEL
	"/etc/ssl/ca-bundle.pem",             // openSUSE
	"/etc/ssl/cert.pem",                  // Alpine, macOS-like layouts
}

// extraCAPath is where the sandbox's extra CAs alone are shown, for tools
// that add to their built-in store (NODE_EXTRA_CA_CERTS).
const extraCAPath = "/etc/airlock/ca.pem"

// trustStore writes the files that put spec.TrustedCAs into the sandbox's
// trust store under dir, and returns the mounts and environment that show
// them. The files are world-readable: they hold only certificates.
func trustStore(dir string, spec *sandbox.Spec) error {
	if len(spec.TrustedCAs) == 0 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	cas := append(bytes.TrimSpace(append([]byte(nil), spec.TrustedCAs...)), '\n')
	extra := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(extra, cas, 0o644); err != nil {
		return fmt.Errorf("trust store: %w", err)
	}
	spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: extra, Target: extraCAPath, ReadOnly: true})
	bundlePath := ""
	// The host's bundle with the extra CAs goes over the system bundle of
	// the host's root, and of an image's too: its tools reach hosts the
	// proxy only tunnels to as well as those it inspects, and public roots
	// are public. (A template root keeps its own; see below.)
	if spec.RootFS == "" {
		for i, p := range hostBundles {
			fi, err := os.Stat(p)
			if err != nil || !fi.Mode().IsRegular() {
				continue
			}
			sys, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("trust store: %w", err)
			}
			combined := filepath.Join(dir, fmt.Sprintf("bundle-%d.pem", i))
			data := append(append(bytes.TrimRight(sys, "\n"), '\n'), cas...)
			if err := os.WriteFile(combined, data, 0o644); err != nil {
				return fmt.Errorf("trust store: %w", err)
			}
			spec.Mounts = append(spec.Mounts, sandbox.Mount{Source: combined, Target: p, ReadOnly: true})
			if bundlePath == "" {
				bundlePath = p
			}
		}
	}
	if bundlePath == "" {
		// A template root keeps its own bundle; point tools at ours alone
		// plus whatever they trust by default.
		bundlePath = extraCAPath
	}
	set := map[string]bool{}
	for _, e := range spec.Env {
		k, _, _ := strings.Cut(e, "=")
		set[k] = true
	}
	for _, kv := range [][2]string{
		{"SSL_CERT_FILE", bundlePath},
		{"REQUESTS_CA_BUNDLE", bundlePath},
		{"CURL_CA_BUNDLE", bundlePath},
		{"GIT_SSL_CAINFO", bundlePath},
		{"PIP_CERT", bundlePath},
		{"NODE_EXTRA_CA_CERTS", extraCAPath},
	} {
		if !set[kv[0]] {
			spec.Env = append(spec.Env, kv[0]+"="+kv[1])
		}
	}
	return nil
}
