// Command images builds Yonder's container images as OCI image-layout archives without Docker or a
// registry: each is one layer holding a statically linked binary (CGO_ENABLED=0) as its entrypoint, plus
// the host tools the binary executes (yonder-net-node runs iptables: see iptablesFiles).
// It writes <out>/<name>.oci.tar and <out>/digests.txt ("<repository> <manifest digest>" per line), which
// hack/release-repo.sh uses to pin the components YAML to the images by digest. `ctr images import`
// or `docker load` read the archives.
//
// Usage: go run ./hack/images -out out/images -registry ghcr.io/yonder-dev -tag v0.1.0 [-only yonder-net-node,…]
package main

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/yonder-dev/yonder/pkg/ociarchive"
)

// image is one image: its name (and the binary's), the binary's main package, and a function returning
// the other files the binary needs at run time (nil: none).
type image struct {
	name, pkg string
	extra     func() ([]ociarchive.File, error)
}

// images maps image name (and binary name) to its main package and the other files the binary needs.
var images = []image{
	{"yonder-bootstrap-manager", "./bootstrap", nil},
	{"yonder-controlplane-manager", "./controlplane", nil},
	{"yonder-ssh-manager", "./infrastructure-ssh", nil},
	{"yonder-metal-manager", "./infrastructure-baremetal", nil},
	{"yonder-net-controller", "./network/cmd/yonder-net-controller", nil},
	// The node daemon installs MSS clamping and the inner-VXLAN port rule with iptables (docs/network-dataplane.md).
	{"yonder-net-node", "./network/cmd/yonder-net-node", iptablesFiles},
}

func main() {
	out := flag.String("out", "out/images", "directory for the archives and digests.txt")
	registry := flag.String("registry", "ghcr.io/yonder-dev", "image repository prefix")
	tag := flag.String("tag", "dev", "image tag")
	only := flag.String("only", "", "comma-separated image names to build (default: all)")
	flag.Parse()
	var names []string
	if *only != "" {
		names = strings.Split(*only, ",")
	}
	if err := run(*out, *registry, *tag, names); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

// run builds the images named in only (all when empty) into out.
func run(out, registry, tag string, only []string) error {
	for _, n := range only {
		if !slices.ContainsFunc(images, func(i image) bool { return i.name == n }) {
			return fmt.Errorf("failed to select image %q: not one of hack/images' images", n)
		}
	}
	if err := os.MkdirAll(out, 0o750); err != nil {
		return fmt.Errorf("failed to create %s: %w", out, err)
	}
	bin, err := os.MkdirTemp("", "yonder-images-")
	if err != nil {
		return err
	}
	defer func() { _ = os.RemoveAll(bin) }()
	var lines []string
	for _, img := range images {
		if len(only) > 0 && !slices.Contains(only, img.name) {
			continue
		}
		if _, err := os.Stat(img.pkg); err != nil {
			fmt.Fprintf(os.Stderr, "skipping %s: %s does not exist\n", img.name, img.pkg)
			continue
		}
		p := filepath.Join(bin, img.name)
		cmd := exec.Command("go", "build", "-trimpath", "-o", p, img.pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if o, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("failed to build %s: %s: %w", img.pkg, o, err)
		}
		data, err := os.ReadFile(p) //nolint:gosec // the binary just built
		if err != nil {
			return err
		}
		files := []ociarchive.File{{Path: img.name, Content: data, Mode: 0o755}}
		if img.extra != nil {
			more, err := img.extra()
			if err != nil {
				return fmt.Errorf("failed to collect the files of %s: %w", img.name, err)
			}
			files = append(files, more...)
		}
		repo := registry + "/" + img.name
		archive := filepath.Join(out, img.name+".oci.tar")
		f, err := os.Create(archive) //nolint:gosec // below the output directory
		if err != nil {
			return err
		}
		werr := ociarchive.Write(f, ociarchive.Image{
			Name:       repo + ":" + tag,
			Files:      files,
			Entrypoint: []string{"/" + img.name},
		})
		if err := errors.Join(werr, f.Close()); err != nil {
			return fmt.Errorf("failed to write %s: %w", archive, err)
		}
		digest, err := manifestDigest(archive)
		if err != nil {
			return err
		}
		lines = append(lines, repo+" "+digest)
		fmt.Println(archive, digest)
	}
	return os.WriteFile(filepath.Join(out, "digests.txt"), []byte(strings.Join(lines, "\n")+"\n"), 0o600)
}

// manifestDigest reads the image manifest's digest from the archive's index.json.
func manifestDigest(archive string) (string, error) {
	f, err := os.Open(archive) //nolint:gosec // the archive just written
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("failed to find index.json in %s", archive)
		}
		if err != nil {
			return "", fmt.Errorf("failed to read %s: %w", archive, err)
		}
		if strings.TrimPrefix(h.Name, "./") != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Digest string `json:"digest"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return "", fmt.Errorf("failed to decode index.json of %s: %w", archive, err)
		}
		if len(idx.Manifests) != 1 || !strings.HasPrefix(idx.Manifests[0].Digest, "sha256:") {
			return "", fmt.Errorf("index.json of %s does not name exactly one sha256 manifest", archive)
		}
		return idx.Manifests[0].Digest, nil
	}
}
