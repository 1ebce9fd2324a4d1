package controlplane

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/yonder-dev/yonder/test/testpki"
)

// pki holds the certificates of one control plane: a single CA signs the serving cert, the client
// certs of the components and (through kube-controller-manager) the kubelets' certs, as kubeadm does.
type pki struct {
	dir   string
	ca    *testpki.CA
	CAPEM []byte
}

func newPKI(dir string) (*pki, error) {
	ca, err := testpki.NewCA("yonder-test-ca", 0)
	if err != nil {
		return nil, err
	}
	p := &pki{dir: dir, ca: ca, CAPEM: ca.CertPEM}
	if err := p.write("ca.crt", ca.CertPEM); err != nil {
		return nil, err
	}
	return p, p.write("ca.key", ca.KeyPEM)
}

func (p *pki) path(name string) string { return filepath.Join(p.dir, name) }

func (p *pki) write(name string, data []byte) error {
	if err := os.WriteFile(p.path(name), data, 0o600); err != nil {
		return fmt.Errorf("failed to write %s: %w", name, err)
	}
	return nil
}

// issue signs a leaf certificate (client, and server when server) and writes <name>.crt and
// <name>.key; it returns both PEMs.
func (p *pki) issue(name, cn string, orgs []string, server bool, ips []net.IP, dnsNames []string) (certPEM, keyPEM []byte, err error) {
	certPEM, keyPEM, err = p.ca.Issue(testpki.Leaf{CommonName: cn, Organization: orgs, IPs: ips, DNSNames: dnsNames, Client: true, Server: server})
	if err != nil {
		return nil, nil, fmt.Errorf("failed to issue %s: %w", name, err)
	}
	if err := p.write(name+".crt", certPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, p.write(name+".key", keyPEM)
}

// serviceAccountKeys writes the RSA key pair that signs and verifies service account tokens.
func (p *pki) serviceAccountKeys() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(key.Public())
	if err != nil {
		return err
	}
	if err := p.write("sa.key", pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})); err != nil {
		return err
	}
	return p.write("sa.pub", pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}))
}
