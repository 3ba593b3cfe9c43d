package linux_test

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"testing"
	"time"

	"github.com/airlockrun/airlock/internal/sandbox"
)

// testCA returns a self-signed CA certificate named name, as PEM.
func testCA(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestTrustStoreDuplicateID: a Create refused because its id is live
// leaves the live sandbox's trust store as it was.
func TestTrustStoreDuplicateID(t *testing.T) {
	t.Parallel()
	b := attackBackend(t)
	id := sandbox.NewID()
	mine, other := testCA(t, "mine"), testCA(t, "other")
	sb := attackCreate(t, b, sandbox.Spec{ID: id, TrustedCAs: mine, Limits: sandbox.DefaultLimits})
	ctx, cancel := context.WithTimeout(context.Background(), attackTimeout)
	defer cancel()
	if dup, err := b.Create(ctx, sandbox.Spec{ID: id, TrustedCAs: other, Limits: sandbox.DefaultLimits}); err == nil {
		_ = dup.Destroy(ctx)
		t.Fatalf("a second sandbox with the live id %s was created", id)
	}
	got := attackMust(t, sb, "", "cat /etc/airlock/ca.pem")
	if !bytes.Equal(bytes.TrimSpace([]byte(got)), bytes.TrimSpace(mine)) {
		t.Errorf("after a refused Create with the same id, the live sandbox's /etc/airlock/ca.pem = %q, want its own CA %q", got, mine)
	}
}
