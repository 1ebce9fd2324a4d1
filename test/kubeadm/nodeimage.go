package kubeadm

// The node image is the disk image a CAPM3 user gets from image-builder for their bare-metal machines:
// a Debian cloud image (test/osimage) that a machine boots with systemd as PID 1 and cgroup v2, and whose
// cloud-init runs the cloud-config CABPK renders, ending in `kubeadm join`. It carries what kubeadm's
// install guide asks of a host, because at join time nothing can be fetched (the test machines reach no
// registry and no package mirror):
//   - kubeadm, the kubelet and containerd (with its runc shim and ctr): the binaries hack/test-bins.sh
//     builds, in /usr/local/bin as the full-OS hosts have them (hosts.FullOSBinaries);
//   - runc and the CNI plugins (bridge, host-local, portmap, loopback in /usr/lib/cni) from Debian, which
//     containerd runs for every pod; iptables, conntrack, socat, ethtool and kmod, which kubeadm's
//     preflight and the kubelet look for (masquerading, port forwarding, loading modules);
//   - containerd's and the kubelet's units and configuration, the same bytes as the full-OS hosts'
//     (package hosts): the kubelet restarts until kubeadm writes its configuration, as the kubeadm
//     packages install it, and the systemd cgroup driver on both sides (kubeadm's default);
//   - the overlay and br_netfilter modules loaded at boot and IP forwarding on (the install guide's
//     prerequisites; kubeadm's preflight refuses a host without forwarding);
//   - a bridge CNI configuration, so the Node becomes Ready without a CNI add-on;
//   - the pause image, preloaded into containerd at every boot before the kubelet starts, tagged as
//     kubeadm and the CRI configuration name it (hosts.FullOSSandboxImage): image-builder preloads the
//     images a node needs the same way, for sites without a registry.

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/yonder-dev/yonder/pkg/ociimage"
	"github.com/yonder-dev/yonder/test/hosts"
	"github.com/yonder-dev/yonder/test/osimage"
	"github.com/yonder-dev/yonder/test/testbins"
)

// nodeImagePackages are the Debian packages the node image has on top of the cloud image's.
var nodeImagePackages = []string{"runc", "containernetworking-plugins", "iptables", "conntrack", "socat", "ethtool", "kmod"}

// nodeImagePauseArchive is where the node image keeps the pause image's archive for preload-images.service.
const nodeImagePauseArchive = "/var/lib/yonder-images/pause.tar"

// nodeImagePodSubnet is the pod subnet of the node's bridge, the same on every machine with the image:
// the bare-metal e2e's clusters have one node made from this image each, and pods of different clusters
// never meet (each node masquerades its pods' traffic). A second such node in one cluster would need a
// subnet of its own.
const nodeImagePodSubnet = "10.244.250.0/24"

// preloadImagesUnit imports the image archives into containerd's k8s.io namespace (where the kubelet
// looks) once containerd runs and before the kubelet starts, at every boot: an import of an image
// containerd has is a no-op. The flags are LoadImages'.
const preloadImagesUnit = `[Unit]
Description=Import the preloaded container images into containerd
After=containerd.service
Requires=containerd.service
Before=kubelet.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/bin/ctr -n k8s.io images import --local ` + nodeImagePauseArchive + `

[Install]
WantedBy=multi-user.target
`

// nodeModules and nodeSysctls are what kubeadm's install guide has a host configure before kubeadm runs.
const (
	nodeModules = "overlay\nbr_netfilter\n"
	nodeSysctls = "net.ipv4.ip_forward = 1\nnet.bridge.bridge-nf-call-iptables = 1\n"
)

// NodeImageOptions are the osimage options of the node image: the cloud image with the packages, the
// test binaries, the configuration and the preloaded pause image a kubeadm node needs. The binaries are
// hack/test-bins.sh's (an error says how to build them); the options name them by their resolved paths
// and the image's cache key hashes their content, so rebuilt binaries make a new image.
func NodeImageOptions() (osimage.Options, error) {
	files := make([]osimage.File, 0, len(hosts.FullOSBinaries)+10)
	for _, b := range hosts.FullOSBinaries {
		p, err := testbins.Path(b)
		if err != nil {
			return osimage.Options{}, err
		}
		if p, err = filepath.EvalSymlinks(p); err != nil {
			return osimage.Options{}, fmt.Errorf("node image: %w", err)
		}
		files = append(files, osimage.File{Path: "/usr/local/bin/" + b, Mode: 0o755, Source: p})
	}
	pause, err := pauseArchive()
	if err != nil {
		return osimage.Options{}, err
	}
	text := func(path, content string) osimage.File {
		return osimage.File{Path: path, Mode: 0o644, Content: []byte(content)}
	}
	files = append(files,
		text("/etc/systemd/system/containerd.service", hosts.ContainerdUnit),
		text("/etc/containerd/config.toml", hosts.ContainerdConfig(true)),
		text("/etc/systemd/system/kubelet.service", hosts.KubeletUnit),
		text("/etc/systemd/system/kubelet.service.d/10-kubeadm.conf", hosts.KubeadmKubeletDropIn),
		text("/etc/systemd/system/preload-images.service", preloadImagesUnit),
		text("/etc/cni/net.d/10-bridge.conflist", hosts.BridgeConflist("node", nodeImagePodSubnet)),
		text("/etc/modules-load.d/k8s.conf", nodeModules),
		text("/etc/sysctl.d/99-kubernetes.conf", nodeSysctls),
		osimage.File{Path: nodeImagePauseArchive, Mode: 0o644, Content: pause},
	)
	return osimage.Options{
		ExtraPackages: nodeImagePackages,
		Files:         files,
		EnabledUnits:  []string{"containerd.service", "kubelet.service", "preload-images.service"},
	}, nil
}

// NodeImage returns the node image, built once per machine and set of binaries (osimage.Cached): minutes
// the first time.
func NodeImage(ctx context.Context) (osimage.Image, error) {
	opts, err := NodeImageOptions()
	if err != nil {
		return osimage.Image{}, err
	}
	return osimage.Cached(ctx, opts)
}

// pauseArchive is the archive of the pause image LoadImages imports (busybox-static's), named
// hosts.FullOSSandboxImage. It is reproducible (ociimage writes no timestamps), so the node image's cache
// key stays the same from one test process to the next.
func pauseArchive() ([]byte, error) {
	bb, err := os.ReadFile("/bin/busybox")
	if err != nil {
		return nil, fmt.Errorf("failed to read busybox-static for the pause image (hack/test-bins.sh --packages): %w", err)
	}
	img, err := ociimage.Build(ociimage.Pause(bb))
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	if err := ociimage.WriteArchive(&b, hosts.FullOSSandboxImage, img); err != nil {
		return nil, fmt.Errorf("failed to write the pause image's archive: %w", err)
	}
	return b.Bytes(), nil
}
