package kubeadm_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"

	"github.com/yonder-dev/yonder/test/kubeadm"
	"github.com/yonder-dev/yonder/test/osimage"
	"github.com/yonder-dev/yonder/test/testbins"
)

// nodeImageChecks runs in a copy of the node image and prints one line per fact the test expects; a
// missing line is a missing piece. The built kubeadm is placed at /tmp/built-kubeadm to compare.
const nodeImageChecks = `set -eu
v=$(kubelet --version); echo "kubelet: $v"
v=$(kubeadm version -o short); echo "kubeadm: $v"
v=$(containerd --version); echo "containerd: $v"
v=$(ctr --version); echo "ctr: $v"
v=$(runc --version | head -n 1); echo "runc: $v"
cmp /usr/local/bin/kubeadm /tmp/built-kubeadm && echo "kubeadm is the built one"
for p in bridge host-local portmap loopback; do test -x /usr/lib/cni/$p && echo "cni: $p"; done
for t in iptables conntrack socat ethtool modprobe nsenter ip mount; do command -v $t >/dev/null && echo "tool: $t"; done
for u in containerd kubelet preload-images; do
	f=$(readlink -e /etc/systemd/system/multi-user.target.wants/$u.service) && test -f "$f" && echo "enabled: $u.service -> $f"
done
test -s /var/lib/yonder-images/pause.tar && echo "pause: $(sha256sum </var/lib/yonder-images/pause.tar | cut -d' ' -f1)"
echo "sysctl: $(cat /etc/sysctl.d/99-kubernetes.conf | tr '\n' ';')"
echo "modules: $(cat /etc/modules-load.d/k8s.conf | tr '\n' ';')"
grep -q 'SystemdCgroup = true' /etc/containerd/config.toml && echo "cgroup driver: systemd"
# systemd's own parser: a typo in a unit would otherwise show only when a machine boots.
systemd-analyze verify /etc/systemd/system/containerd.service /etc/systemd/system/kubelet.service \
	/etc/systemd/system/preload-images.service && echo "units verified"
`

// The node image is what a CAPM3 user's image-builder image gives kubeadm: the kubelet and kubeadm of the
// tested version (the binaries hack/test-bins.sh built), containerd and Debian's runc, the CNI plugins
// and the tools kubeadm's preflight looks for, containerd, the kubelet and the pause image's preload
// enabled at boot, and the module and sysctl settings of kubeadm's install guide. Whether a machine booted
// from it joins a cluster is the bare-metal e2e's part.
func TestNodeImageCarriesWhatKubeadmNeeds(t *testing.T) {
	g := NewWithT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	opts, err := kubeadm.NodeImageOptions()
	g.Expect(err).NotTo(HaveOccurred())
	again, err := kubeadm.NodeImageOptions()
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(again).To(Equal(opts), "the same binaries give the same options, so the cached image is reused")

	start := time.Now()
	img, err := kubeadm.NodeImage(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	t.Logf("node image ready in %v (cold build took %.0f s): raw %d MiB, qcow2 %d MiB",
		time.Since(start).Round(time.Millisecond), img.BuildSeconds, img.RawSize>>20, img.QCOW2Size>>20)

	built, err := testbins.Path("kubeadm")
	g.Expect(err).NotTo(HaveOccurred())
	built, err = filepath.EvalSymlinks(built)
	g.Expect(err).NotTo(HaveOccurred())
	res, err := img.RunInCopy(ctx, osimage.CopyRun{
		Files:   []osimage.File{{Path: "/tmp/built-kubeadm", Mode: 0o755, Source: built}},
		Command: nodeImageChecks,
	})
	g.Expect(err).NotTo(HaveOccurred())
	out := string(res.Output)
	t.Logf("in the image:\n%s", out)
	g.Expect(res.Status).To(BeZero(), out)

	var pause []byte
	for _, f := range opts.Files {
		if f.Path == "/var/lib/yonder-images/pause.tar" {
			pause = f.Content
		}
	}
	g.Expect(pause).NotTo(BeEmpty())
	lines := strings.Split(out, "\n")
	for _, want := range []string{
		"kubelet: Kubernetes " + kubeadm.Version,
		"kubeadm: " + kubeadm.Version,
		"kubeadm is the built one",
		"cni: bridge", "cni: host-local", "cni: portmap", "cni: loopback",
		"tool: iptables", "tool: conntrack", "tool: socat", "tool: ethtool", "tool: modprobe", "tool: nsenter", "tool: ip", "tool: mount",
		"enabled: containerd.service -> /etc/systemd/system/containerd.service",
		"enabled: kubelet.service -> /etc/systemd/system/kubelet.service",
		"enabled: preload-images.service -> /etc/systemd/system/preload-images.service",
		fmt.Sprintf("pause: %x", sha256.Sum256(pause)),
		"sysctl: net.ipv4.ip_forward = 1;net.bridge.bridge-nf-call-iptables = 1;",
		"modules: overlay;br_netfilter;",
		"cgroup driver: systemd",
		"units verified",
	} {
		g.Expect(lines).To(ContainElement(want))
	}
	g.Expect(lines).To(ContainElement(MatchRegexp(`^containerd: containerd \S+ v2\.`)), "containerd 2, which kubelet 1.36 expects")
	g.Expect(lines).To(ContainElement(HavePrefix("ctr: ctr ")))
	g.Expect(lines).To(ContainElement(MatchRegexp(`^runc: runc version 1\.`)))
}
