package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/netip"
	"sync"
	"time"
)

const (
	// caValidity is the lifetime of a per-run CA and of every leaf it signs.
	// A run that outlives it needs a new Proxy (and a new CA in the sandbox
	// trust store); a short life limits what a stolen CA certificate is
	// worth, and the key never leaves this process anyway.
	caValidity = 24 * time.Hour
	// caBackdate absorbs clock skew between host and sandbox.
	caBackdate = time.Minute
	// maxLeaves bounds the leaf cache; a sandbox cannot make the host hold
	// more than this many keys by naming many inspected hosts.
	maxLeaves = 1024
)

// authority is the per-run certificate authority that signs the leaf
// certificates the proxy presents for inspected hosts. Its private key lives
// only in this struct: it is never serialized, logged or sent anywhere.
type authority struct {
	cert    *x509.Certificate
	certPEM []byte
	key     crypto.Signer

	mu sync.Mutex
	// leaves is guarded by mu: minted certificates by normalized host.
	leaves map[string]*tls.Certificate
}

// newAuthority creates a fresh ECDSA P-256 CA valid from now-caBackdate for
// caValidity. name goes into the subject so an operator can tell CAs apart.
func newAuthority(name string, now time.Time) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: ca key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	skid, err := keyID(&key.PublicKey)
	if err != nil {
		return nil, err
	}
	notBefore := now.Add(-caBackdate).Truncate(time.Second)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"airlock"}, CommonName: "airlock egress CA " + name},
		NotBefore:             notBefore,
		NotAfter:              notBefore.Add(caValidity),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		// The CA signs leaves directly; it may not sign intermediates.
		MaxPathLen:     0,
		MaxPathLenZero: true,
		SubjectKeyId:   skid,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("egress: ca certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: ca certificate: %w", err)
	}
	return &authority{
		cert:    cert,
		certPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		key:     key,
		leaves:  make(map[string]*tls.Certificate),
	}, nil
}

// leaf returns a certificate for host (normalized: lowercase ASCII name or
// canonical IP literal), minting and caching it on first use. Leaves share
// the CA's validity window, so a cached leaf never outlives its issuer.
func (a *authority) leaf(host string) (*tls.Certificate, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.leaves[host]; ok {
		return c, nil
	}
	c, err := a.mint(host)
	if err != nil {
		return nil, err
	}
	if len(a.leaves) >= maxLeaves {
		// Evict an arbitrary entry: the cache only saves CPU, and a
		// re-minted leaf is as valid as the evicted one.
		for k := range a.leaves {
			delete(a.leaves, k)
			break
		}
	}
	a.leaves[host] = c
	return c, nil
}

// mint signs a new leaf for host.
// Preconditions: a.mu is held (mint itself needs no lock; holding it keeps
// two connections from minting the same host at once).
func (a *authority) mint(host string) (*tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("egress: leaf key: %w", err)
	}
	serial, err := randSerial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{Organization: []string{"airlock"}, CommonName: host},
		NotBefore:             a.cert.NotBefore,
		NotAfter:              a.cert.NotAfter,
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		AuthorityKeyId:        a.cert.SubjectKeyId,
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		tmpl.IPAddresses = append(tmpl.IPAddresses, ip.AsSlice())
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		return nil, fmt.Errorf("egress: leaf certificate: %w", err)
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("egress: leaf certificate: %w", err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{der},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// randSerial returns a random positive 128-bit serial number.
func randSerial() (*big.Int, error) {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("egress: serial: %w", err)
	}
	return n.Add(n, big.NewInt(1)), nil
}

// keyID is the SHA-256 of the marshalled public key, cut to 20 bytes.
func keyID(pub *ecdsa.PublicKey) ([]byte, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return nil, fmt.Errorf("egress: key id: %w", err)
	}
	sum := sha256.Sum256(der)
	return sum[:20], nil
}
