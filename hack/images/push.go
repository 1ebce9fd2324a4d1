package main

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/yonder-dev/yonder/pkg/ociimage"
)

// push uploads every archive of dir (named <from>/<name>:<tag>) to <to>/<name>:<tag>, authenticating
// like docker and crane (~/.docker/config.json), trusting caFile besides the system roots.
func push(dir, from, to, caFile string) error {
	t, err := transport(caFile)
	if err != nil {
		return err
	}
	archives, err := filepath.Glob(filepath.Join(dir, "*.oci.tar"))
	if err != nil || len(archives) == 0 {
		return fmt.Errorf("failed to find image archives in %s: run `make images` first", dir)
	}
	for _, a := range archives {
		if err := pushArchive(a, from, to, t); err != nil {
			return err
		}
	}
	return nil
}

// pushArchive pushes the images of one archive.
func pushArchive(a, from, to string, t http.RoundTripper) error {
	imgs, done, err := ociimage.ReadArchive(a)
	if err != nil {
		return err
	}
	defer done()
	for ref, img := range imgs {
		if !strings.HasPrefix(ref, from+"/") {
			return fmt.Errorf("failed to push %s from %s: it is not named under %s", ref, a, from)
		}
		target, err := name.ParseReference(to + "/" + strings.TrimPrefix(ref, from+"/"))
		if err != nil {
			return fmt.Errorf("failed to name the target of %s: %w", ref, err)
		}
		if err := remote.Write(target, img, remote.WithContext(context.Background()), remote.WithTransport(t),
			remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return fmt.Errorf("failed to push %s: %w", target, err)
		}
		d, _ := img.Digest()
		fmt.Println(target.String(), d)
	}
	return nil
}

func transport(caFile string) (http.RoundTripper, error) {
	if caFile == "" {
		return ociimage.Transport(nil)
	}
	pem, err := os.ReadFile(caFile) //nolint:gosec // the operator's CA file
	if err != nil {
		return nil, err
	}
	return ociimage.Transport(pem)
}
