package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/gobuild"
)

// buildOptions say what to build.
type buildOptions struct {
	Out, Registry, Tag string
	// Only restricts the build to these image names (empty: all images, node images included).
	Only []string
	// NodeVersions are the Kubernetes versions of the node images.
	NodeVersions []string
	// Binaries, when set, is a directory that keeps the binaries the images carry, each named after its
	// image (yonder-agent for the agent): a caller that runs them as processes (the test stack, the lab)
	// then runs exactly what the images hold, without building them a second time in another shape.
	Binaries string
}

// binaryImage is an image holding one of our binaries: its name (and the binary's), the binary's main
// package, and a function returning the other files the binary needs at run time (nil: none).
type binaryImage struct {
	name, pkg string
	extra     func() ([]ociimage.File, error)
}

// binaryImages are the images of the managers and the network add-on.
var binaryImages = []binaryImage{
	{"yonder-bootstrap-manager", "./bootstrap", nil},
	{"yonder-controlplane-manager", "./controlplane", nil},
	{"yonder-ssh-manager", "./infrastructure-ssh", nil},
	{"yonder-metal-manager", "./infrastructure-baremetal", nil},
	{"yonder-net-controller", "./network/cmd/yonder-net-controller", nil},
	// The node daemon installs MSS clamping and the inner-VXLAN port rule with iptables (docs/network-dataplane.md).
	{"yonder-net-node", "./network/cmd/yonder-net-node", ociimage.IptablesFiles},
}

// Names of the agent artifact and the node images.
const (
	agentImage = "yonder-agent"
	nodeImage  = "yonder-node"
)

// built is one image written by build.
type built struct {
	ref    string // <registry>/<name>:<tag>
	repo   string
	digest v1.Hash
}

// build builds the selected images into o.Out and returns them.
func build(o buildOptions) ([]built, error) {
	known := []string{agentImage, nodeImage}
	for _, b := range binaryImages {
		known = append(known, b.name)
	}
	for _, n := range o.Only {
		if !slices.Contains(known, n) {
			return nil, fmt.Errorf("failed to select image %q: not one of %v", n, known)
		}
	}
	want := func(n string) bool { return len(o.Only) == 0 || slices.Contains(o.Only, n) }
	if err := os.MkdirAll(o.Out, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create %s: %w", o.Out, err)
	}
	bin := o.Binaries
	if bin == "" {
		tmp, err := os.MkdirTemp("", "yonder-images-")
		if err != nil {
			return nil, err
		}
		defer func() { _ = os.RemoveAll(tmp) }()
		bin = tmp
	} else if err := os.MkdirAll(bin, 0o750); err != nil {
		return nil, fmt.Errorf("failed to create %s: %w", bin, err)
	}
	var out []built
	add := func(name, tag string, spec ociimage.Image) error {
		b, err := write(o, name, tag, spec)
		if err == nil {
			out = append(out, b)
		}
		return err
	}
	if err := buildBinaries(bin, want); err != nil {
		return nil, err
	}
	for _, b := range binaryImages {
		if !want(b.name) {
			continue
		}
		files := []ociimage.File{{Path: b.name, Source: filepath.Join(bin, b.name), Mode: 0o755}}
		if b.extra != nil {
			more, err := b.extra()
			if err != nil {
				return nil, fmt.Errorf("failed to collect the files of %s: %w", b.name, err)
			}
			files = append(files, more...)
		}
		if err := add(b.name, o.Tag, ociimage.Image{Files: files, Entrypoint: []string{"/" + b.name}}); err != nil {
			return nil, err
		}
	}
	if want(agentImage) {
		b, err := writeAgent(o, filepath.Join(bin, agentImage))
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	if want(nodeImage) {
		for _, v := range o.NodeVersions {
			spec, err := nodeImageSpec(v)
			if err != nil {
				return nil, err
			}
			if err := add(nodeImage, v, spec); err != nil {
				return nil, err
			}
		}
	}
	return out, writeLists(o.Out, out)
}

// buildBinaries builds every selected binary in one go command (shared packages compile once; a binary
// whose sources did not change since the last build on this machine is not linked again: test/gobuild).
func buildBinaries(dir string, want func(string) bool) error {
	var pkgs []string
	names := map[string]string{}
	for _, b := range binaryImages {
		if want(b.name) {
			pkgs = append(pkgs, b.pkg)
			names[filepath.Base(b.pkg)] = b.name
		}
	}
	if want(agentImage) {
		pkgs = append(pkgs, "./hostruntime/cmd/yonder-agent")
	}
	if len(pkgs) == 0 {
		return nil
	}
	if err := gobuild.Build(context.Background(), dir+"/", gobuild.Options{Static: true, TrimPath: true}, pkgs...); err != nil {
		return err
	}
	// go build names a binary after its package directory.
	for base, name := range names {
		if base != name {
			if err := os.Rename(filepath.Join(dir, base), filepath.Join(dir, name)); err != nil {
				return err
			}
		}
	}
	return nil
}

// write builds spec and writes its archive <out>/<name>[-<tag>].oci.tar (the kept one when nothing it is
// made from changed: cache.go).
func write(o buildOptions, name, tag string, spec ociimage.Image) (built, error) {
	inputs := func(h io.Writer) error { return specInputs(h, spec) }
	return cachedImage(o, name, tag, inputs, func() (v1.Image, error) {
		img, err := ociimage.Build(spec)
		if err != nil {
			return nil, fmt.Errorf("failed to build %s: %w", name, err)
		}
		return img, nil
	})
}

// archivePath is where image name:tag's archive goes: <out>/<name>.oci.tar, a node image's with its tag.
func archivePath(o buildOptions, name, tag string) string {
	if name == nodeImage {
		return filepath.Join(o.Out, name+"-"+tag+".oci.tar")
	}
	return filepath.Join(o.Out, name+".oci.tar")
}

// writeImage writes img's archive through a temporary file renamed into place (an archive already there
// may be a hard link of a kept one, which must not be written through).
func writeImage(o buildOptions, name, tag string, img v1.Image) (built, error) {
	repo := o.Registry + "/" + name
	ref := repo + ":" + tag
	archive := archivePath(o, name, tag)
	tmp := archive + ".tmp"
	f, err := os.Create(tmp) //nolint:gosec // below the output directory
	if err != nil {
		return built{}, err
	}
	if err := ociimage.WriteArchive(f, ref, img); err != nil {
		_ = f.Close()
		_ = os.Remove(tmp)
		return built{}, fmt.Errorf("failed to write %s: %w", archive, err)
	}
	if err := errors.Join(f.Close(), os.Rename(tmp, archive)); err != nil {
		_ = os.Remove(tmp)
		return built{}, err
	}
	d, err := img.Digest()
	if err != nil {
		return built{}, err
	}
	fmt.Println(archive, d)
	return built{ref: ref, repo: repo, digest: d}, nil
}

// writeLists writes digests.txt (single-tag images: the components pin them) and images.txt (every image).
func writeLists(out string, imgs []built) error {
	var digests, all []string
	for _, b := range imgs {
		all = append(all, b.ref+" "+b.digest.String())
		if !strings.HasSuffix(b.repo, "/"+nodeImage) {
			digests = append(digests, b.repo+" "+b.digest.String())
		}
	}
	sort.Strings(digests)
	sort.Strings(all)
	for name, lines := range map[string][]string{"digests.txt": digests, "images.txt": all} {
		if err := os.WriteFile(filepath.Join(out, name), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// sha256File is the hex sha256 of a file.
func sha256File(p string) (string, error) {
	f, err := os.Open(p) //nolint:gosec // a file this program builds an image from
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
