// Package nodeimage pulls a node image — an OCI image holding a node's whole root filesystem: systemd,
// containerd, runc, CNI plugins and the kubelet of one Kubernetes version — from a registry and unpacks it
// into the machine's tree. The reference must be pinned by digest; every blob is verified against its
// digest while it streams (go-containerregistry checks the manifest against the reference and each layer
// against the manifest), and the image's architecture must be this host's.
package nodeimage

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/yonder-dev/yonder/pkg/ociimage"

	"github.com/google/go-containerregistry/pkg/v1/match"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Source is where an image comes from and how to reach its registry.
type Source struct {
	// Reference is repository@sha256:<digest>.
	Reference string
	// CACertificate (PEM) is trusted for the registry besides the system roots.
	CACertificate string
	// Username and Password authenticate to the registry (both empty: anonymous).
	Username, Password string
}

// Digest returns the digest a reference is pinned to, or an error for a reference without one.
func Digest(ref string) (string, error) {
	r, err := name.ParseReference(ref, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image reference %q does not parse: %w", ref, err)
	}
	d, ok := r.(name.Digest)
	if !ok {
		return "", fmt.Errorf("image reference %q is not pinned by digest: use <repository>@sha256:<digest> (a tag can change under a running node)", ref)
	}
	return d.DigestStr(), nil
}

// Pull resolves the image (manifest verified against the pinned digest) for this host's architecture.
func Pull(ctx context.Context, s Source) (v1.Image, error) {
	if _, err := Digest(s.Reference); err != nil {
		return nil, err
	}
	ref, err := name.ParseReference(s.Reference)
	if err != nil {
		return nil, err
	}
	t, err := ociimage.Transport([]byte(s.CACertificate))
	if err != nil {
		return nil, err
	}
	auth := authn.Anonymous
	if s.Username != "" || s.Password != "" {
		auth = &authn.Basic{Username: s.Username, Password: s.Password}
	}
	img, err := remote.Image(ref, remote.WithContext(ctx), remote.WithTransport(t), remote.WithAuth(auth),
		remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return nil, explain(s.Reference, err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, fmt.Errorf("failed to read the config of image %s: %w", s.Reference, err)
	}
	if cf.Architecture != runtime.GOARCH || cf.OS != "linux" {
		return nil, fmt.Errorf("image %s is for %s/%s, this host is linux/%s: build or mirror the node image for this architecture", s.Reference, cf.OS, cf.Architecture, runtime.GOARCH)
	}
	return img, nil
}

// explain turns registry errors into what an operator can act on.
func explain(ref string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		switch te.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			return fmt.Errorf("registry refused to serve image %s (%d): check the pull secret's credentials for this registry: %w", ref, te.StatusCode, err)
		case http.StatusNotFound:
			return fmt.Errorf("image %s is not in the registry: push it (make push) or mirror it there: %w", ref, err)
		}
	}
	var ce *tls.CertificateVerificationError
	if errors.As(err, &ce) {
		return fmt.Errorf("the registry's TLS certificate for image %s is not trusted: set the registry's CA (YonderConfig spec.images.caSecretName): %w", ref, err)
	}
	return fmt.Errorf("failed to fetch image %s: %w", ref, err)
}

// Extract unpacks the image's layers (whiteouts applied) into dir with the host's tar, keeping owners,
// permissions and extended attributes, as the rootfs archive extraction does. dir must exist and be empty.
func Extract(ctx context.Context, img v1.Image, dir string) error {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	cmd := exec.CommandContext(ctx, "tar", "-C", dir, "--numeric-owner", "--xattrs", "--xattrs-include=*", "-xpf", "-")
	cmd.Stdin = rc
	var stderr strings.Builder
	cmd.Stderr = &stderr
	// A layer that fails its digest check ends tar's input with that error, which Run returns (or tar's
	// complaint about the cut stream): nothing unverified is accepted.
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("failed to unpack the image: %s: %w", strings.TrimSpace(stderr.String()), err)
	}
	return nil
}

// KubeletVersion runs the kubelet of an unpacked node tree and returns the version it reports.
func KubeletVersion(ctx context.Context, root string) (string, error) {
	bin := root + "/usr/local/bin/kubelet"
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("the node image has no /usr/local/bin/kubelet: %w", err)
	}
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("the node image's kubelet does not run here: %s: %w", strings.TrimSpace(string(out)), err)
	}
	f := strings.Fields(string(out)) // "Kubernetes v1.36.3"
	if len(f) != 2 || f[0] != "Kubernetes" {
		return "", fmt.Errorf("the node image's kubelet printed %q for --version", strings.TrimSpace(string(out)))
	}
	return f[1], nil
}

// Fetch returns the image from the OCI layout cache at dir, pulling it into the cache first when it is
// missing or a cached blob no longer has its digest (a copy corrupted on disk is fetched again, never
// used). Blobs are verified while they stream from the registry, so a corrupt download fails here,
// before anything on the host changes.
func Fetch(ctx context.Context, s Source, dir string) (v1.Image, error) {
	digest, err := Digest(s.Reference)
	if err != nil {
		return nil, err
	}
	h, err := v1.NewHash(digest)
	if err != nil {
		return nil, err
	}
	p, err := openLayout(dir)
	if err != nil {
		return nil, err
	}
	if img, err := p.Image(h); err == nil && verifyBlobs(dir, img) == nil {
		return img, nil
	}
	img, err := Pull(ctx, s)
	if err != nil {
		return nil, err
	}
	if err := p.ReplaceImage(img, match.Digests(h)); err != nil {
		return nil, fmt.Errorf("failed to download image %s into %s: %w", s.Reference, dir, err)
	}
	cached, err := p.Image(h)
	if err != nil {
		return nil, fmt.Errorf("failed to read image %s back from %s: %w", s.Reference, dir, err)
	}
	return cached, verifyBlobs(dir, cached)
}

func openLayout(dir string) (layout.Path, error) {
	if p, err := layout.FromPath(dir); err == nil {
		return p, nil
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return "", err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return "", fmt.Errorf("failed to create the image cache %s: %w", dir, err)
	}
	return p, nil
}

// verifyBlobs re-hashes the image's config and layer blobs in the layout at dir.
func verifyBlobs(dir string, img v1.Image) error {
	m, err := img.Manifest()
	if err != nil {
		return err
	}
	for _, d := range append([]v1.Descriptor{m.Config}, m.Layers...) {
		f, err := os.Open(filepath.Join(dir, "blobs", d.Digest.Algorithm, d.Digest.Hex)) //nolint:gosec // the agent's own cache
		if err != nil {
			return err
		}
		got, _, err := v1.SHA256(f)
		_ = f.Close()
		if err != nil {
			return err
		}
		if got != d.Digest {
			return fmt.Errorf("cached blob %s has digest %s", d.Digest, got)
		}
	}
	return nil
}

// Unpack extracts the image into dir through dir.partial, renamed into place once complete, so a crash
// never leaves a half-unpacked tree that looks complete. The tree must have systemd as its init.
func Unpack(ctx context.Context, img v1.Image, dir string, hasInit func(string) bool) error {
	tmp := dir + ".partial"
	if err := os.RemoveAll(tmp); err != nil {
		return fmt.Errorf("failed to remove an interrupted extraction %s: %w", tmp, err)
	}
	if err := os.MkdirAll(tmp, 0o755); err != nil { //nolint:gosec // a root filesystem's root is 0755
		return err
	}
	if err := Extract(ctx, img, tmp); err != nil {
		_ = os.RemoveAll(tmp)
		return err
	}
	if !hasInit(tmp) {
		_ = os.RemoveAll(tmp)
		return errors.New("the node image has no systemd (lib/systemd/systemd): the machine needs systemd as init")
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Rename(tmp, dir)
}
