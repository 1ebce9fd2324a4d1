// Package testpki issues the certificates Yonder's test components need (control plane PKIs, webhook
// serving certificates, a BMC's self-signed certificate) from one implementation: ECDSA P-256 keys, PEM
// out, validity starting an hour in the past so clock skew between processes never matters.
package testpki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// CA is a certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	// CertPEM and KeyPEM are the CA's certificate and key in PEM.
	CertPEM, KeyPEM []byte
}

// Leaf describes a certificate to issue.
type Leaf struct {
	// CommonName and Organization of the subject (Kubernetes reads user and groups from them).
	CommonName   string
	Organization []string
	// DNSNames and IPs the certificate is valid for.
	DNSNames []string
	IPs      []net.IP
	// Client and Server choose the extended key usages.
	Client, Server bool
	// Validity is how long the certificate is valid (default a year).
	Validity time.Duration
}

// NewCA creates a self-signed CA named cn, valid for validity (default ten years).
func NewCA(cn string, validity time.Duration) (*CA, error) {
	if validity == 0 {
		validity = 10 * 365 * 24 * time.Hour
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("failed to generate the key of CA %s: %w", cn, err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		IsCA:     true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, fmt.Errorf("failed to sign CA %s: %w", cn, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, CertPEM: certPEM(der), KeyPEM: keyPEM}, nil
}

// Issue signs a certificate for l with ca; it returns the certificate and its new key in PEM.
func (ca *CA) Issue(l Leaf) (certOut, keyOut []byte, err error) {
	der, key, err := sign(l, func(tmpl *x509.Certificate, key *ecdsa.PrivateKey) ([]byte, error) {
		return x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, key.Public(), ca.Key)
	})
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := KeyPEM(key)
	if err != nil {
		return nil, nil, err
	}
	return certPEM(der), keyPEM, nil
}

// SelfSigned returns a self-signed certificate for l, ready for a TLS server.
func SelfSigned(l Leaf) (*tls.Certificate, error) {
	der, key, err := sign(l, func(tmpl *x509.Certificate, key *ecdsa.PrivateKey) ([]byte, error) {
		return x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	})
	if err != nil {
		return nil, err
	}
	return &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// KeyPEM encodes an ECDSA key in PEM.
func KeyPEM(key *ecdsa.PrivateKey) ([]byte, error) {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("failed to encode a key: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), nil
}

func certPEM(der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// sign makes a fresh key and a certificate template for l and signs it with signer.
func sign(l Leaf, signer func(*x509.Certificate, *ecdsa.PrivateKey) ([]byte, error)) ([]byte, *ecdsa.PrivateKey, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to generate the key of %s: %w", l.CommonName, err)
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	validity := l.Validity
	if validity == 0 {
		validity = 365 * 24 * time.Hour
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: l.CommonName, Organization: l.Organization},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(validity),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		DNSNames: l.DNSNames, IPAddresses: l.IPs,
	}
	if l.Client {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
	}
	if l.Server {
		tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageServerAuth)
	}
	der, err := signer(tmpl, key)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to sign the certificate of %s: %w", l.CommonName, err)
	}
	return der, key, nil
}
