// Package registry runs a real OCI registry (github.com/distribution/distribution/v3, the `registry` binary
// hack/test-bins.sh builds) for the test tiers and the lab: TLS with a certificate from its own CA (what a
// private registry or mirror has: clients trust it through that CA, as users configure), optionally with
// htpasswd authentication, storage in a directory that Stop leaves to its caller.
package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"golang.org/x/crypto/bcrypt"

	"github.com/yonder-dev/yonder/test/internal/proc"
	"github.com/yonder-dev/yonder/test/testbins"
	"github.com/yonder-dev/yonder/test/testpki"
)

// Options configure a registry.
type Options struct {
	// Address is the IP address it listens on (default 127.0.0.1).
	Address string
	// Dir holds its storage, configuration, certificates and log (required).
	Dir string
	// Users are htpasswd users (name → password); none means anonymous pull and push.
	Users map[string]string
}

// Registry is a running registry.
type Registry struct {
	// Host is host:port, the registry part of image references.
	Host string
	// CACertPEM is the CA its serving certificate is signed by.
	CACertPEM []byte
	// Transport trusts CACertPEM.
	Transport *http.Transport

	users map[string]string
	p     *proc.Process
}

// Start starts the registry and waits until it answers /v2/.
func Start(ctx context.Context, o Options) (*Registry, error) {
	bin, err := testbins.Path("registry")
	if err != nil {
		return nil, err
	}
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	if err := os.MkdirAll(filepath.Join(o.Dir, "storage"), 0o700); err != nil {
		return nil, fmt.Errorf("failed to create the registry directory: %w", err)
	}
	port, err := proc.FreePort(o.Address)
	if err != nil {
		return nil, err
	}
	r := &Registry{Host: net.JoinHostPort(o.Address, fmt.Sprint(port)), users: o.Users}
	cfg, err := r.writeFiles(o)
	if err != nil {
		return nil, err
	}
	if r.p, err = proc.Start("registry", o.Dir, []string{"OTEL_TRACES_EXPORTER=none"}, bin, "serve", cfg); err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: r.Transport, Timeout: 2 * time.Second}
	if err := r.p.WaitFor(ctx, time.Minute, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://"+r.Host+"/v2/", nil)
		if err != nil {
			return err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusUnauthorized {
			return fmt.Errorf("/v2/: %s", resp.Status)
		}
		return nil
	}); err != nil {
		_ = r.p.Stop(5 * time.Second)
		return nil, err
	}
	return r, nil
}

// writeFiles writes the CA, the serving certificate, the htpasswd file and config.yml; it returns the
// configuration's path and sets the CA and transport.
func (r *Registry) writeFiles(o Options) (string, error) {
	caPEM, crtPEM, keyPEM, err := serving(o.Address)
	if err != nil {
		return "", err
	}
	r.CACertPEM = caPEM
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(caPEM)
	r.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	files := map[string][]byte{"ca.crt": caPEM, "tls.crt": crtPEM, "tls.key": keyPEM}
	auth := ""
	if len(o.Users) > 0 {
		var lines []string
		for u, p := range o.Users {
			h, err := bcrypt.GenerateFromPassword([]byte(p), bcrypt.MinCost)
			if err != nil {
				return "", err
			}
			lines = append(lines, u+":"+string(h))
		}
		sort.Strings(lines)
		files["htpasswd"] = []byte(strings.Join(lines, "\n") + "\n")
		auth = fmt.Sprintf("auth:\n  htpasswd:\n    realm: yonder-test\n    path: %s\n", filepath.Join(o.Dir, "htpasswd"))
	}
	files["config.yml"] = []byte(fmt.Sprintf(`version: 0.1
log:
  level: info
  accesslog: {disabled: true}
storage:
  filesystem: {rootdirectory: %s}
  delete: {enabled: true}
http:
  addr: %s
  tls: {certificate: %s, key: %s}
  draintimeout: 1s
%s`, filepath.Join(o.Dir, "storage"), r.Host, filepath.Join(o.Dir, "tls.crt"), filepath.Join(o.Dir, "tls.key"), auth))
	for n, data := range files {
		if err := os.WriteFile(filepath.Join(o.Dir, n), data, 0o600); err != nil {
			return "", fmt.Errorf("failed to write the registry's %s: %w", n, err)
		}
	}
	return filepath.Join(o.Dir, "config.yml"), nil
}

// serving creates a CA and a serving certificate for ip signed by it (PEM).
func serving(ip string) (caPEM, crtPEM, keyPEM []byte, err error) {
	const validity = 30 * 24 * time.Hour
	ca, err := testpki.NewCA("yonder-test-registry-ca", validity)
	if err != nil {
		return nil, nil, nil, err
	}
	crtPEM, keyPEM, err = ca.Issue(testpki.Leaf{CommonName: ip, IPs: []net.IP{net.ParseIP(ip)}, Server: true, Validity: validity})
	if err != nil {
		return nil, nil, nil, err
	}
	return ca.CertPEM, crtPEM, keyPEM, nil
}

// Push uploads img as ref (a reference in this registry, "<Host>/repo:tag") with the first user's
// credentials when the registry has users, and returns its digest.
func (r *Registry) Push(ctx context.Context, ref string, img v1.Image) (v1.Hash, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return v1.Hash{}, fmt.Errorf("failed to parse %s: %w", ref, err)
	}
	if tag.Context().RegistryStr() != r.Host {
		return v1.Hash{}, fmt.Errorf("failed to push %s: not a reference in registry %s", ref, r.Host)
	}
	if err := remote.Write(tag, img, remote.WithContext(ctx), remote.WithTransport(r.Transport), remote.WithAuth(r.Auth())); err != nil {
		return v1.Hash{}, fmt.Errorf("failed to push %s: %w", ref, err)
	}
	return img.Digest()
}

// Auth returns the credentials of the first user (alphabetically), or anonymous.
func (r *Registry) Auth() authn.Authenticator {
	names := make([]string, 0, len(r.users))
	for u := range r.users {
		names = append(names, u)
	}
	if len(names) == 0 {
		return authn.Anonymous
	}
	sort.Strings(names)
	return &authn.Basic{Username: names[0], Password: r.users[names[0]]}
}

// Stop stops the registry; its storage stays in Options.Dir.
func (r *Registry) Stop() error {
	if r == nil || r.p == nil {
		return nil
	}
	return errors.Join(r.p.Stop(5 * time.Second))
}
