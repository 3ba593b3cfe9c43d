package sandbox_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

func testCertPEM(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestSpecTrustedCAs(t *testing.T) {
	cert := testCertPEM(t)
	tests := []struct {
		name string
		cas  string
		err  string // substring; empty: valid
	}{
		{"one", string(cert), ""},
		{"two, with space around", "\n" + string(cert) + "\n" + string(cert) + "\n\n", ""},
		{"a key", string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte{1}})), "CERTIFICATE blocks only"},
		{"not PEM", "hello", "CERTIFICATE blocks only"},
		{"trailing garbage", string(cert) + "garbage", "CERTIFICATE blocks only"},
		{"headers", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Headers: map[string]string{"a": "b"}, Bytes: []byte{1}})), "CERTIFICATE blocks only"},
		{"empty block", string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE"})), "is empty"},
		{"too big", strings.Repeat(string(cert), 1<<20/len(cert)+1), "at most"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := sandbox.Spec{Network: sandbox.NetworkProxy, ProxySocket: "/run/x.sock", TrustedCAs: []byte(tt.cas)}
			err := spec.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("Validate() = %v, want an error with %q", err, tt.err)
			}
		})
	}
}

// TestSpecLayers: an image root's layers are clean absolute host paths, at
// most MaxLayers, never with a template root; a default working directory
// is a clean absolute path.
func TestSpecLayers(t *testing.T) {
	tests := []struct {
		name string
		spec sandbox.Spec
		err  string // substring; empty: valid
	}{
		{"layers", sandbox.Spec{Layers: []string{"/var/lib/airlock/images/layers/a", "/var/lib/airlock/images/layers/b"}, Dir: "/app"}, ""},
		{"with a template root", sandbox.Spec{Layers: []string{"/l/a"}, RootFS: "/srv/root"}, "exclude each other"},
		{"relative layer", sandbox.Spec{Layers: []string{"layers/a"}}, "clean absolute host path"},
		{"unclean layer", sandbox.Spec{Layers: []string{"/l/../etc"}}, "clean absolute host path"},
		{"too many layers", sandbox.Spec{Layers: slices.Repeat([]string{"/l/a"}, sandbox.MaxLayers+1)}, "at most"},
		{"writable image root", sandbox.Spec{Layers: []string{"/l/a"}, WritableRoot: true}, ""},
		{"writable template root", sandbox.Spec{RootFS: "/srv/root", WritableRoot: true}, ""},
		{"writable host root", sandbox.Spec{WritableRoot: true}, ""},
		{"relative dir", sandbox.Spec{Dir: "app"}, "working directory"},
		{"unclean dir", sandbox.Spec{Dir: "/app/"}, "working directory"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			switch {
			case tt.err == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Errorf("Validate() = %v, want an error with %q", err, tt.err)
			}
		})
	}
}
