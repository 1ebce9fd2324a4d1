// Package artifacts fetches the files a node needs (kubelet, containerd, CNI plugins, OCI image archives,
// the rootfs archive) from a mirror URL or a local bundle path, and verifies each against its sha256
// before anything uses it. Verified files live in a content-addressed cache (<cache>/sha256/<digest>),
// so a re-run, a reset that keeps the cache, and two artifacts with the same content cost nothing.
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	agentv1 "github.com/yonder-dev/yonder/hostruntime/api/v1alpha1"
	"github.com/yonder-dev/yonder/pkg/atomicfile"
)

// DigestMismatchError is returned when content does not have the digest the configuration pins.
type DigestMismatchError struct {
	Name, Source, Want, Got string
}

func (e *DigestMismatchError) Error() string {
	return fmt.Sprintf("artifact %q from %s has sha256 %s, but the configuration pins %s: the file is corrupt or not the one intended; "+
		"fix the mirror/bundle or the sha256 in the AgentConfig (nothing was installed)", e.Name, e.Source, e.Got, e.Want)
}

// Cache is a content-addressed artifact cache.
type Cache struct {
	// Dir is the cache root, e.g. /var/lib/yonder/cache/artifacts.
	Dir string
	// HTTPClient fetches URLs (default: a client with a 10 minute timeout).
	HTTPClient *http.Client
}

// Path is where a verified artifact with this digest lives.
func (c Cache) Path(digest string) string { return filepath.Join(c.Dir, "sha256", digest) }

// Ensure returns the path of the verified artifact, fetching it when it is not cached. A cached copy is
// hashed again before it is returned: a file corrupted on disk is replaced, never used.
func (c Cache) Ensure(ctx context.Context, a agentv1.Artifact) (string, error) {
	dst := c.Path(a.SHA256)
	if got, err := FileSHA256(dst); err == nil {
		if got == a.SHA256 {
			return dst, nil
		}
		_ = os.Remove(dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return "", fmt.Errorf("failed to create artifact cache %s: %w", c.Dir, err)
	}
	src, source, err := c.open(ctx, a)
	if err != nil {
		return "", err
	}
	defer func() { _ = src.Close() }()
	tmp, err := atomicfile.Create(dst)
	if err != nil {
		return "", fmt.Errorf("failed to create a temporary file in %s: %w", c.Dir, err)
	}
	defer tmp.Abort()
	h := sha256.New()
	if _, err := io.Copy(io.MultiWriter(tmp, h), src); err != nil {
		return "", fmt.Errorf("failed to read artifact %q from %s: %w", a.Name, source, err)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != a.SHA256 {
		return "", &DigestMismatchError{Name: a.Name, Source: source, Want: a.SHA256, Got: got}
	}
	if err := tmp.Commit(0o600); err != nil {
		return "", fmt.Errorf("failed to store artifact %q in the cache: %w", a.Name, err)
	}
	return dst, nil
}

func (c Cache) open(ctx context.Context, a agentv1.Artifact) (io.ReadCloser, string, error) {
	if a.Path != "" {
		f, err := os.Open(a.Path)
		if err != nil {
			return nil, a.Path, fmt.Errorf("artifact %q: cannot open the local bundle file %s (check the bundle was copied to the host): %w", a.Name, a.Path, err)
		}
		return f, a.Path, nil
	}
	hc := c.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Minute}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.URL, nil)
	if err != nil {
		return nil, a.URL, fmt.Errorf("artifact %q: bad URL: %w", a.Name, err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, a.URL, fmt.Errorf("artifact %q: cannot download %s (is the mirror reachable from this host?): %w", a.Name, a.URL, err)
	}
	if resp.StatusCode != http.StatusOK {
		_ = resp.Body.Close()
		return nil, a.URL, fmt.Errorf("artifact %q: %s returned %s", a.Name, a.URL, resp.Status)
	}
	return resp.Body, a.URL, nil
}

// FileSHA256 hashes a file.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path) //nolint:gosec // hashing a file named by the caller is the point
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// IsDigestMismatch reports whether err is (or wraps) a DigestMismatchError.
func IsDigestMismatch(err error) bool {
	var d *DigestMismatchError
	return errors.As(err, &d)
}
