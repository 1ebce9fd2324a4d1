package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"github.com/yonder-dev/yonder/pkg/ociimage"
)

// AgentMediaType is the media type of the agent artifact's one blob: the static yonder-agent binary.
const AgentMediaType types.MediaType = "application/vnd.yonder.agent.binary.v1"

// sandboxImage is the name the node's containerd pins its pause image under (yonder-agent --sandbox-image).
const sandboxImage = "registry.k8s.io/pause:3.10"

// writeAgent writes the agent artifact: a manifest whose one layer is the binary, so the layer digest is
// the sha256 the bootstrap data pins (written to <out>/agent.sha256 too).
func writeAgent(o buildOptions, binary string) (built, error) {
	sum, err := sha256File(binary)
	if err != nil {
		return built{}, err
	}
	if err := os.WriteFile(filepath.Join(o.Out, "agent.sha256"), []byte(sum+"\n"), 0o600); err != nil {
		return built{}, err
	}
	arch := goarch()
	inputs := func(h io.Writer) error {
		_, err := fmt.Fprintf(h, "agent artifact %s arch=%q\n", sum, arch)
		return err
	}
	return cachedImage(o, agentImage, o.Tag, inputs, func() (v1.Image, error) {
		data, err := os.ReadFile(binary) //nolint:gosec // the agent just built
		if err != nil {
			return nil, err
		}
		base := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
		img, err := mutate.AppendLayers(base, static.NewLayer(data, AgentMediaType))
		if err != nil {
			return nil, err
		}
		cf, err := img.ConfigFile()
		if err != nil {
			return nil, err
		}
		cf = cf.DeepCopy()
		cf.OS, cf.Architecture = "linux", arch
		return mutate.ConfigFile(img, cf)
	})
}

// goarch is the architecture the binaries were built for.
func goarch() string {
	out, err := exec.Command("go", "env", "GOARCH").Output()
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(out))
}

// nodeImageSpec is the node image of one Kubernetes version: the cached node rootfs as its base layer
// (used as it is, zstd-compressed), and the version's binaries with the sandbox image on top.
func nodeImageSpec(version string) (ociimage.Image, error) {
	bins, err := testBins("--print")
	if err != nil {
		return ociimage.Image{}, err
	}
	rootfs, err := testBins("--rootfs")
	if err != nil {
		return ociimage.Image{}, err
	}
	kubelet, err := kubeletFor(bins, version)
	if err != nil {
		return ociimage.Image{}, err
	}
	base, err := ociimage.CompressedLayer(rootfs)
	if err != nil {
		return ociimage.Image{}, err
	}
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return ociimage.Image{}, fmt.Errorf("failed to read busybox-static for the sandbox image (hack/test-bins.sh --packages): %w", err)
	}
	pause, err := ociimage.Build(ociimage.Pause(bb))
	if err != nil {
		return ociimage.Image{}, err
	}
	var archive bytes.Buffer
	if err := ociimage.WriteArchive(&archive, sandboxImage, pause); err != nil {
		return ociimage.Image{}, err
	}
	files := []ociimage.File{
		{Path: "usr/local/bin/kubelet", Source: kubelet, Mode: 0o755},
		{Path: "var/lib/yonder", Dir: true}, {Path: "var/lib/yonder/images", Dir: true},
		{Path: "var/lib/yonder/images/pause.tar", Content: archive.Bytes()},
		{Path: "etc/yonder", Dir: true},
		{Path: "etc/yonder/node-image", Content: []byte("kubernetesVersion: " + version + "\nsandboxImage: " + sandboxImage + "\n")},
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		files = append(files, ociimage.File{Path: "usr/local/bin/" + b, Source: filepath.Join(bins, b), Mode: 0o755})
	}
	return ociimage.Image{Base: []v1.Layer{base}, Files: files, Architecture: goarch(),
		Labels: map[string]string{"dev.yonder.kubernetes-version": version}}, nil
}

// kubeletFor finds the kubelet of version in the bin directory (kubelet-<version>, or kubelet when that
// is the version) and checks what it reports.
func kubeletFor(bins, version string) (string, error) {
	for _, p := range []string{filepath.Join(bins, "kubelet-"+version), filepath.Join(bins, "kubelet")} {
		out, err := exec.Command(p, "--version").Output()
		if err == nil && strings.TrimSpace(string(out)) == "Kubernetes "+version {
			return p, nil
		}
	}
	return "", fmt.Errorf("failed to find kubelet %s in %s: hack/test-bins.sh builds KUBERNETES_VERSION and KUBELET_PREVIOUS_VERSION", version, bins)
}

// testBins runs hack/test-bins.sh with one argument and returns the path it prints last.
func testBins(arg string) (string, error) {
	cmd := exec.Command("bash", "hack/test-bins.sh", arg)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("failed to run hack/test-bins.sh %s: %w", arg, err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	return lines[len(lines)-1], nil
}
