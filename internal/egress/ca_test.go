package egress

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestAuthority(t *testing.T) {
	now := time.Now()
	a, err := newAuthority("run-1", now)
	if err != nil {
		t.Fatal(err)
	}
	block, rest := pem.Decode(a.certPEM)
	if block == nil || block.Type != "CERTIFICATE" || len(rest) != 0 {
		t.Fatalf("certPEM is not exactly one CERTIFICATE block")
	}
	if strings.Contains(string(a.certPEM), "PRIVATE") {
		t.Fatal("certPEM contains a private key")
	}
	ca, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if !ca.IsCA || !ca.BasicConstraintsValid || ca.MaxPathLen != 0 || !ca.MaxPathLenZero {
		t.Errorf("CA constraints: IsCA=%v MaxPathLen=%d zero=%v", ca.IsCA, ca.MaxPathLen, ca.MaxPathLenZero)
	}
	pub, ok := ca.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("CA key is %T, want ECDSA P-256", ca.PublicKey)
	}
	if life := ca.NotAfter.Sub(ca.NotBefore); life > 24*time.Hour {
		t.Errorf("CA validity %v, want at most 24h", life)
	}
	if !ca.NotBefore.Before(now) {
		t.Errorf("CA NotBefore %v is not in the past", ca.NotBefore)
	}

	roots := x509.NewCertPool()
	roots.AddCert(ca)
	for _, host := range []string{"api.example.com", "127.0.0.1", "::1", "xn--bcher-kva.de"} {
		leaf, err := a.leaf(host)
		if err != nil {
			t.Fatalf("leaf(%q): %v", host, err)
		}
		again, _ := a.leaf(host)
		if again != leaf {
			t.Errorf("leaf(%q) minted twice; want the cached leaf", host)
		}
		_, err = leaf.Leaf.Verify(x509.VerifyOptions{
			DNSName:     host,
			Roots:       roots,
			KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
			CurrentTime: now,
		})
		if err != nil {
			t.Errorf("leaf(%q) does not verify for its host: %v", host, err)
		}
		if !leaf.Leaf.NotAfter.Equal(ca.NotAfter) || !leaf.Leaf.NotBefore.Equal(ca.NotBefore) {
			t.Errorf("leaf(%q) validity %v..%v differs from the CA's", host, leaf.Leaf.NotBefore, leaf.Leaf.NotAfter)
		}
		if _, err := leaf.Leaf.Verify(x509.VerifyOptions{DNSName: "other.example.com", Roots: roots, CurrentTime: now}); err == nil {
			t.Errorf("leaf(%q) verifies for another host", host)
		}
	}
}

func TestAuthorityCacheBounded(t *testing.T) {
	a, err := newAuthority("run-1", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for i := range maxLeaves + 10 {
		if _, err := a.leaf(fmt.Sprintf("h%d.example.com", i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(a.leaves); n > maxLeaves {
		t.Fatalf("cache holds %d leaves, bound is %d", n, maxLeaves)
	}
}
