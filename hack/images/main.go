// Command images builds and pushes Yonder's OCI images with go-containerregistry, without Docker:
//
//   - every manager and the network add-on: a static binary (CGO_ENABLED=0) as entrypoint, plus the host
//     tools a binary executes (yonder-net-node runs iptables: see ociimage.IptablesFiles);
//   - yonder-agent as an OCI artifact whose one blob is the static binary itself, so a host downloads it by
//     digest from any registry or mirror that holds it (`/v2/<repository>/blobs/sha256:<sha256 of the binary>`);
//   - a node image per Kubernetes version (yonder-node:<version>): the node root filesystem
//     (hack/test-bins.sh --rootfs: Debian with systemd, runc, CNI plugins) as its base layer, and a layer with
//     that version's kubelet, containerd, containerd-shim-runc-v2, ctr and the sandbox image.
//
// `build` writes <out>/<name>.oci.tar per image (an OCI layout archive that `ctr images import` reads),
// <out>/digests.txt ("<repository> <manifest digest>" of the single-tag images, which hack/release-repo.sh
// pins the components to) and <out>/images.txt ("<reference> <manifest digest>" of every image).
// `push` uploads the archives of <out> to another registry prefix under the same names and tags.
// The architecture is the Go toolchain's target (GOARCH), the same as the binaries'.
//
// Usage:
//
//	go run ./hack/images build -out out/images -registry ghcr.io/yonder-dev -tag v0.1.0 [-only a,b] [-node-versions v1.36.3,v1.36.2] [-binaries out/images/bin]
//	go run ./hack/images push -out out/images -registry ghcr.io/yonder-dev -to registry.example:5000/yonder [-ca ca.crt]
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "hack/images:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		// Flags alone mean build (the form `go run ./hack/images -out … -only …` callers use).
		args = append([]string{"build"}, args...)
	}
	fs := flag.NewFlagSet(args[0], flag.ContinueOnError)
	o := buildOptions{}
	fs.StringVar(&o.Out, "out", "out/images", "directory of the image archives, digests.txt and images.txt")
	fs.StringVar(&o.Registry, "registry", "ghcr.io/yonder-dev", "repository prefix the images are named under")
	fs.StringVar(&o.Tag, "tag", "dev", "tag of the manager, add-on and agent images")
	only := fs.String("only", "", "comma-separated image names to build (default: all)")
	fs.StringVar(&o.Binaries, "binaries", "", "build: a directory to keep the binaries the images carry in, named after their images (default: none kept)")
	nodes := fs.String("node-versions", "", "comma-separated Kubernetes versions to build node images for (default: none)")
	to := fs.String("to", "", "push: the repository prefix to push to (replaces -registry in every name)")
	ca := fs.String("ca", "", "push: a PEM file of the target registry's CA (default: the system roots)")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *only != "" {
		o.Only = strings.Split(*only, ",")
	}
	if *nodes != "" {
		o.NodeVersions = strings.Split(*nodes, ",")
	}
	switch args[0] {
	case "build":
		_, err := build(o)
		return err
	case "push":
		if *to == "" {
			return fmt.Errorf("push needs -to <registry>/<prefix>")
		}
		return push(o.Out, o.Registry, *to, *ca)
	default:
		return fmt.Errorf("unknown command %q: build or push", args[0])
	}
}
