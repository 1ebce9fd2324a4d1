package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/cachedir"
)

// Every stack of make test and every `make release-manifests` builds the same images again from the same
// binaries: compressing ~550 MB of layers and writing the archives took 20-50 s of each. So the last
// archive of each image (per reference) is kept on this machine under <cache root>/images/ with the key of
// everything it was made from: this program (its own executable: the image code and libraries), the
// reference and the image's inputs (file contents, modes, base layer digests, config). A build with the
// same key takes the kept archive; any change builds and replaces it. One slot per reference keeps the
// cache bounded by the number of images.

var (
	selfOnce sync.Once
	selfSum  string
	selfErr  error
)

// selfDigest is the sha256 of this program's executable.
func selfDigest() (string, error) {
	selfOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			selfErr = err
			return
		}
		selfSum, selfErr = sha256File(exe)
	})
	return selfSum, selfErr
}

// specInputs writes everything spec's image is made from into h.
func specInputs(h io.Writer, spec ociimage.Image) error {
	for _, l := range spec.Base {
		d, err := l.Digest()
		if err != nil {
			return err
		}
		_, _ = fmt.Fprintf(h, "base %s\n", d)
	}
	for _, f := range spec.Files {
		sum := sha256.Sum256(f.Content)
		content := hex.EncodeToString(sum[:])
		if f.Source != "" {
			var err error
			if content, err = sha256File(f.Source); err != nil {
				return err
			}
		}
		_, _ = fmt.Fprintf(h, "file %q mode=%d dir=%t symlink=%q content=%s\n", f.Path, f.Mode, f.Dir, f.Symlink, content)
	}
	// fmt prints a map's keys sorted.
	_, _ = fmt.Fprintf(h, "entrypoint=%q cmd=%q env=%q labels=%q arch=%q\n", spec.Entrypoint, spec.Cmd, spec.Env, spec.Labels, spec.Architecture)
	return nil
}

// cachedImage writes the archive of image name:tag into o.Out: the kept one when its inputs (written by
// inputs) are those of the last build of that reference on this machine, else the one buildImage builds, which
// is then kept.
func cachedImage(o buildOptions, name, tag string, inputs func(io.Writer) error, buildImage func() (v1.Image, error)) (built, error) {
	ref, archive := o.Registry+"/"+name+":"+tag, archivePath(o, name, tag)
	self, err := selfDigest()
	if err != nil {
		return built{}, fmt.Errorf("failed to read this program for the image cache key: %w", err)
	}
	h := sha256.New()
	_, _ = fmt.Fprintf(h, "hack/images %s\nref %s\n", self, ref)
	if err := inputs(h); err != nil {
		return built{}, fmt.Errorf("failed to read the inputs of %s: %w", ref, err)
	}
	key := hex.EncodeToString(h.Sum(nil))
	root, err := cachedir.Root()
	if err != nil {
		return built{}, err
	}
	refSum := sha256.Sum256([]byte(ref))
	slot := filepath.Join(root, "images", hex.EncodeToString(refSum[:8]))
	if err := os.MkdirAll(slot, 0o750); err != nil {
		return built{}, fmt.Errorf("failed to create the image cache: %w", err)
	}
	unlock, err := cachedir.Lock(context.Background(), slot+".lock")
	if err != nil {
		return built{}, err
	}
	defer unlock()
	kept, keptDigest, keyFile := filepath.Join(slot, "image.oci.tar"), filepath.Join(slot, "digest"), filepath.Join(slot, "key")
	if k, err := os.ReadFile(keyFile); err == nil && string(k) == key { //nolint:gosec // the cache's own file
		if d, err := os.ReadFile(keptDigest); err == nil { //nolint:gosec // the cache's own file
			if digest, err := v1.NewHash(strings.TrimSpace(string(d))); err == nil && cachedir.Place(kept, archive, true) == nil {
				fmt.Println(archive, digest)
				return built{ref: ref, repo: o.Registry + "/" + name, digest: digest}, nil
			}
		}
	}
	img, err := buildImage()
	if err != nil {
		return built{}, err
	}
	b, err := writeImage(o, name, tag, img)
	if err != nil {
		return built{}, err
	}
	// Refresh the slot, its key last: a slot whose refresh was cut off never matches. A slot that cannot be
	// refreshed only costs the next build its time.
	_ = os.Remove(keyFile)
	if cachedir.Place(archive, kept, true) == nil && os.WriteFile(keptDigest, []byte(b.digest.String()+"\n"), 0o600) == nil {
		_ = os.WriteFile(keyFile, []byte(key), 0o600)
	}
	return b, nil
}
