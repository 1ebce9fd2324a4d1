package sshhost_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gstruct"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-ssh/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/hostconn"
	"github.com/yonder-dev/yonder/infrastructure-ssh/internal/sshexec"
	"github.com/yonder-dev/yonder/test/sshhosts"
)

// A host registered with trust-on-first-use gets the key its real sshd presents recorded into
// spec.hostKey at the first probe, its facts gathered, the move label on itself and its Secret (with the
// credentials label), and phase Available. A claimed host cannot be deleted until released; an unreachable one says so.
func TestHostInventoryProbeTOFUAndDeletionGuard(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "host").Name
	hs, keyPEM := sshhosts.StartForTest(t, "hh", 1)
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key"}, Data: map[string][]byte{hostconn.PrivateKeyKey: keyPEM}})).To(Succeed())
	h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "tofu"},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: hs[0].Address.String(), CredentialsSecretRef: infrav1.SecretReference{Name: "key"},
			HostKeyPolicy: infrav1.HostKeyPolicyTrustOnFirstUse}, FailureDomain: "rack-1"}}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
		g.Expect(h.Spec.HostKey).To(Equal(sshexec.FormatHostKey(hs[0].HostKey)))
		g.Expect(h.Spec.HostKeyPolicy).To(Equal(infrav1.HostKeyPolicyPinned), "trust on first use is spent once a key is recorded")
		g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseAvailable))
		g.Expect(h.Status.Facts).NotTo(BeNil())
		g.Expect(h.Status.Facts.Hostname).To(Equal("hh-0"))
		g.Expect(h.Status.Facts.CPUs).To(BeNumerically(">", 0))
		g.Expect(h.Status.LastProbeTime).NotTo(BeNil())
		g.Expect(h.Labels).To(HaveKey("clusterctl.cluster.x-k8s.io/move"))
		g.Expect(h.Finalizers).To(ContainElement(infrav1.HostFinalizer))
		s := &corev1.Secret{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "key"}, s)).To(Succeed())
		g.Expect(s.Labels).To(HaveKey("clusterctl.cluster.x-k8s.io/move"))
		g.Expect(s.Labels).To(HaveKey(infrav1.CredentialsLabel), "the machine controller watches the credentials it connects with")
	}).Should(Succeed())

	// Recorded, the key is enforced: sshd now presents another key (a reinstalled or impostor host).
	patch := client.MergeFrom(h.DeepCopy())
	h.Spec.HostKey = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
	g.Expect(env.Patch(ctx, h, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
		g.Expect(h.Status.Phase).To(Equal(infrav1.HostPhaseError))
		g.Expect(h.Status.Conditions).To(ContainElement(And(HaveField("Type", infrav1.YonderSSHHostReachableCondition), HaveField("Reason", infrav1.HostKeyMismatchReason))))
	}).Should(Succeed())

	// A claimed host is not deleted until released. The controller probes every second and writes the
	// status each time, so the claim is written from a fresh read, retried on a conflict with that write.
	g.Eventually(func() error {
		if err := env.Get(ctx, client.ObjectKeyFromObject(h), h); err != nil {
			return err
		}
		h.Spec.ConsumerRef = &infrav1.ConsumerReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderSSHMachine", Name: "m", UID: "u"}
		return env.Update(ctx, h)
	}).Should(Succeed())
	g.Expect(env.Delete(ctx, h)).To(Succeed())
	g.Consistently(func() error { return env.Get(ctx, client.ObjectKeyFromObject(h), &infrav1.YonderSSHHost{}) }, "2s").Should(Succeed())
	g.Eventually(func() error {
		cur := &infrav1.YonderSSHHost{}
		if err := env.Get(ctx, client.ObjectKeyFromObject(h), cur); err != nil {
			return err
		}
		cur.Spec.ConsumerRef = nil
		return env.Update(ctx, cur)
	}).Should(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.Get(ctx, client.ObjectKeyFromObject(h), &infrav1.YonderSSHHost{}))
	}).Should(BeTrue())

	// Nobody listening: Unreachable.
	dead := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "dead"},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: hs[0].Address.String(), Port: 2, CredentialsSecretRef: infrav1.SecretReference{Name: "key"},
			HostKey: sshexec.FormatHostKey(hs[0].HostKey)}}}
	g.Expect(env.Create(ctx, dead)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKeyFromObject(dead), dead)).To(Succeed())
		g.Expect(dead.Status.Phase).To(Equal(infrav1.HostPhaseUnreachable))
	}).Should(Succeed())
}

// A host's GPUs become its facts and the labels a hostSelector can ask for, from what its PCI bus shows
// (here a synthetic tree bound over /sys/bus/pci/devices in the host's own mount namespace, with the
// host's nvidia-smi and lspci in its private /usr/local/bin): named by nvidia-smi, else lspci, else
// vendor and device ID. The count stays with mixed vendors, the vendor goes; a host whose GPUs are gone
// loses both labels; the Hyper-V virtual VGA, an Intel NPU and an NVIDIA GPU's audio function are no GPUs.
// Labels the controller does not own stay.
func TestProbeLabelsHostsWithGPUs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "gpu").Name
	hs, keyPEM := sshhosts.StartForTest(t, "gh", 1)
	host := hs[0]
	out, err := host.Output(ctx, `cat > /usr/local/bin/nvidia-smi <<'EOF'
#!/bin/sh
echo "00000000:3B:00.0, NVIDIA H200"
echo "00000000:86:00.0, NVIDIA H200"
EOF
cat > /usr/local/bin/lspci <<'EOF'
#!/bin/sh
[ "$2" = 0000:c1:00.0 ] && echo "c1:00.0 Processing accelerators: Advanced Micro Devices, Inc. [AMD/ATI] Aldebaran/MI200 [Instinct MI250X/MI250]"
true
EOF
chmod +x /usr/local/bin/nvidia-smi /usr/local/bin/lspci`)
	g.Expect(err).NotTo(HaveOccurred(), out)
	// pciBus binds a bus of these devices (address, vendor, class, device) over the host's own.
	pciBus := func(devs ...[4]string) {
		dir := t.TempDir()
		for _, d := range devs {
			p := filepath.Join(dir, d[0])
			g.Expect(os.MkdirAll(p, 0o755)).To(Succeed())
			for i, f := range []string{"vendor", "class", "device"} {
				g.Expect(os.WriteFile(filepath.Join(p, f), []byte(d[i+1]+"\n"), 0o644)).To(Succeed())
			}
		}
		out, err := host.Output(ctx, "mount --bind "+dir+" /sys/bus/pci/devices")
		g.Expect(err).NotTo(HaveOccurred(), out)
	}
	nvidia := [][4]string{{"0000:3b:00.0", "0x10de", "0x030200", "0x2335"}, {"0000:86:00.0", "0x10de", "0x030200", "0x2335"}, {"0000:86:00.1", "0x10de", "0x040300", "0x22a3"}}
	noGPU := [][4]string{{"0000:00:08.0", "0x1414", "0x030000", "0x5353"}, {"0000:00:0b.0", "0x8086", "0x120000", "0x7d1d"}}
	pciBus(append(slices.Clone(nvidia), noGPU...)...)

	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "key"}, Data: map[string][]byte{hostconn.PrivateKeyKey: keyPEM}})).To(Succeed())
	h := &infrav1.YonderSSHHost{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "gpu", Labels: map[string]string{"pool": "a"}},
		Spec: infrav1.YonderSSHHostSpec{SSHEndpoint: infrav1.SSHEndpoint{Address: host.Address.String(), CredentialsSecretRef: infrav1.SecretReference{Name: "key"},
			HostKey: sshexec.FormatHostKey(host.HostKey)}}}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	expect := func(gpus []string, labels gstruct.Keys) {
		t.Helper()
		labels["pool"] = Equal("a")
		labels[clusterctlv1.ClusterctlMoveLabel] = Equal("")
		g.Eventually(func(g Gomega) {
			g.Expect(env.Get(ctx, client.ObjectKeyFromObject(h), h)).To(Succeed())
			g.Expect(h.Status.Facts).NotTo(BeNil())
			g.Expect(h.Status.Facts.GPUs).To(Equal(gpus))
			g.Expect(h.Labels).To(gstruct.MatchAllKeys(labels))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed())
	}
	expect([]string{"NVIDIA H200", "NVIDIA H200"}, gstruct.Keys{infrav1.GPUCountLabel: Equal("2"), infrav1.GPUVendorLabel: Equal("nvidia")})

	pciBus(nvidia[0], [4]string{"0000:c1:00.0", "0x1002", "0x120000", "0x740c"}, [4]string{"0000:00:02.0", "0x8086", "0x030000", "0x3e92"})
	expect([]string{"Intel GPU 0x3e92", "NVIDIA H200", "Advanced Micro Devices, Inc. [AMD/ATI] Aldebaran/MI200 [Instinct MI250X/MI250]"},
		gstruct.Keys{infrav1.GPUCountLabel: Equal("3")})

	pciBus(noGPU...)
	expect(nil, gstruct.Keys{})
}
