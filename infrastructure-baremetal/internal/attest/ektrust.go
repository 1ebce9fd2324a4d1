package attest

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
)

// EKCerts are the EK vendor certificates of one source (the --ek-roots files, a ConfigMap).
type EKCerts struct {
	// Roots are trust anchors: an EK certificate must chain to one of them.
	Roots []*x509.Certificate
	// Intermediates are offered when building chains; they are never trusted on their own.
	Intermediates []*x509.Certificate
}

// EKTrust holds the EK vendor roots and intermediates of a running Service (Config.EKTrust), one named set
// per source, replaceable while hosts attest: an operator adds a vendor's root to a ConfigMap and the
// next attestation verifies against it, without a manager restart that would cut off hosts mid-boot.
// The pools the Service verifies with are the union of every source. Safe for concurrent use.
type EKTrust struct {
	mu            sync.RWMutex
	sources       map[string]EKCerts
	roots         *x509.CertPool // nil while no source holds a root: attestation refuses as EKRootsNotConfigured
	intermediates *x509.CertPool
	rootCount     int
}

// NewEKTrust returns an EKTrust without certificates.
func NewEKTrust() *EKTrust { return &EKTrust{sources: map[string]EKCerts{}} }

// Set replaces the certificates of source (an empty EKCerts removes them) and rebuilds the pools.
func (t *EKTrust) Set(source string, c EKCerts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(c.Roots) == 0 && len(c.Intermediates) == 0 {
		delete(t.sources, source)
	} else {
		t.sources[source] = c
	}
	roots, intermediates := x509.NewCertPool(), x509.NewCertPool()
	t.rootCount = 0
	for _, s := range t.sources {
		for _, r := range s.Roots {
			roots.AddCert(r)
			t.rootCount++
		}
		for _, i := range s.Intermediates {
			intermediates.AddCert(i)
		}
	}
	t.roots, t.intermediates = nil, intermediates
	if t.rootCount > 0 {
		t.roots = roots
	}
}

// Pools returns the union of every source's roots (nil when there is none) and intermediates.
func (t *EKTrust) Pools() (roots, intermediates *x509.CertPool) {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.roots, t.intermediates
}

// RootCount is how many root certificates the sources hold together.
func (t *EKTrust) RootCount() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return t.rootCount
}

// Sources are the names of the sources that hold certificates, sorted.
func (t *EKTrust) Sources() []string {
	t.mu.RLock()
	defer t.mu.RUnlock()
	names := make([]string, 0, len(t.sources))
	for n := range t.sources {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ParseCertificates strictly reads PEM certificates: at least one CERTIFICATE block, every block a
// certificate that parses. Unlike x509.CertPool.AppendCertsFromPEM, which skips what it cannot read, a
// broken certificate in a bundle is an error, so a truncated paste is noticed instead of silently
// dropping a vendor's root. Text around the blocks (openssl's subject= lines) is ignored. Errors never
// quote the input: a private key pasted by mistake must not reach a log or an Event.
func ParseCertificates(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	rest := data
	for n := 1; ; n++ {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q block, not a CERTIFICATE", n, blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("PEM block %d is not a valid certificate: %w", n, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("it holds no PEM certificate")
	}
	// pem.Decode skips a block it cannot read (bad base64, no END line) and goes on with the next one.
	if begins := bytes.Count(data, []byte("-----BEGIN ")); begins != len(certs) {
		return nil, fmt.Errorf("it has %d PEM BEGIN lines but only %d certificates decode: a block is truncated or its base64 edited", begins, len(certs))
	}
	return certs, nil
}

// LoadCertificates reads PEM certificates from files (ParseCertificates each).
func LoadCertificates(files ...string) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for _, f := range files {
		data, err := os.ReadFile(f) //nolint:gosec // the operator names the CA files
		if err != nil {
			return nil, fmt.Errorf("failed to read CA file: %w", err)
		}
		c, err := ParseCertificates(data)
		if err != nil {
			return nil, fmt.Errorf("failed to load CA file %s: %w", f, err)
		}
		certs = append(certs, c...)
	}
	return certs, nil
}
