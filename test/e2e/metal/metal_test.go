// Package metal is the bare-metal scenario of the end-to-end suite: the management stack of test/stack
// with the metal provider installed by the real `clusterctl init` (its boot services configured through
// its clusterctl variables) and one QEMU host behind the Redfish emulator, registered as a BareMetalHost;
// a Cluster from `clusterctl generate cluster --flavor metal`. It has its own stack (not test/e2e's):
// the metal provider's boot services own the lab bridge's DHCP/TFTP ports, which a second management
// cluster (TestMove) could not share.
package metal

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/test/flavorcheck"
	"github.com/yonder-dev/yonder/test/metalboot"
	"github.com/yonder-dev/yonder/test/stack"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	os.Exit(stack.RunTests(m, stack.Options{
		MetalHosts: 1,
		// ClusterClass support, as the quick start documents (TestMetalFlavors creates a metal-clusterclass Cluster).
		ClusterTopology: true,
		// The real Prometheus scrapes every manager: TestMetalClusterctlLifecycle asserts through PromQL.
		Prometheus: true,
	}, func(s *stack.Stack) { st = s }))
}

// The bare-metal life through clusterctl: `clusterctl generate cluster --flavor metal` applied → the
// YonderMetalMachine claims the stack's BareMetalHost, its VM PXE-boots through the metal manager's
// DHCP/TFTP/HTTP on the lab bridge, the initramfs's yonder-agent attests with the VM's TPM and receives the
// Machine's bootstrap data (checked on the VM's console), the Machine is Provisioned with the metal
// providerID. The metal manager killed and restarted then changes nothing (no second PXE boot). Scaling
// to 0 deprovisions the host: Machine gone, VM off, host available with no consumer.
//
// Prometheus (Debian's, scraping every manager as the shipped metrics-reader role allows) sees it all:
// every manager up; the claim, the provisioning phase, DHCP, TFTP, boot HTTP and attestation counted; the
// claimed-host gauge 1 while the host is provisioned and 0 after the release; and no secret the scenario
// handled (BMC password, bootstrap token, SSH key, kubeconfig credentials) in any label value it holds.
//
// The provisioning initramfs runs live after attesting and does not start a kubelet, so no Node joins:
// Provisioned (infrastructure ready, providerID set, bootstrap data delivered to the attested host) is
// as far as this proves. Wall time of each phase is logged.
func TestMetalClusterctlLifecycle(t *testing.T) {
	g := NewWithT(t)
	hosts := st.MetalHosts()
	g.Expect(hosts).To(HaveLen(1))
	l := &metalLife{ctx: context.Background(), host: hosts[0], name: "metal"}
	metrics := expectEveryTargetUp(t)
	t0 := l.apply(t)
	claimed, poweredOn, provisioned := l.provisioned(t, t0)
	metrics.expectProvisioningCounted(t)
	metrics.collectSecrets(t, l.host)
	l.restartChangesNothing(t)
	released := l.scaleToZero(t)
	metrics.expectReleaseCounted(t)
	t.Logf("phases: generated Cluster applied → host claimed %s → VM on %s → Machine Provisioned (PXE, attested, data received) %s; scale to 0 → Machine gone, host deprovisioned, VM off, available %s",
		claimed.Round(time.Millisecond), poweredOn.Round(time.Millisecond), provisioned.Round(time.Millisecond), released.Round(time.Millisecond))
	l.deleteCluster(t)
	metrics.expectNoSecretInLabels(t)
}

// metalLife is TestMetalClusterctlLifecycle's Cluster name on the stack's one metal host.
type metalLife struct {
	ctx  context.Context
	host *stack.MetalHost
	name string
}

func (l *metalLife) bmh(g Gomega) *metal3v1.BareMetalHost {
	h := &metal3v1.BareMetalHost{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.host.Name}, h)).To(Succeed())
	return h
}

func (l *metalLife) machines(g Gomega) []clusterv1.Machine {
	ms := &clusterv1.MachineList{}
	g.Expect(st.Client.List(l.ctx, ms, client.InNamespace(st.HostNamespace), client.MatchingLabels{clusterv1.ClusterNameLabel: l.name})).To(Succeed())
	return ms.Items
}

// diag is what a failure shows: the metal manager's log and the VM's console.
func (l *metalLife) diag() string {
	return fmt.Sprintf("metal manager log:\n%s\nVM console:\n%s", st.ManagerLog("infrastructure-yonder-metal", 40), tail(st.MetalConsole(l.host.Name), 3000))
}

// apply creates what `clusterctl generate cluster --flavor metal` renders for one worker and returns when.
func (l *metalLife) apply(t *testing.T) time.Time {
	t.Helper()
	g := NewWithT(t)
	out, err := st.Clusterctl(l.ctx, append([]string{"YONDER_CONTROL_PLANE_KUBECONFIG_SECRET=" + stack.WorkloadKubeconfigSecret,
		// In live mode the host runs Yonder's provisioning boot and records the image; nothing fetches it.
		"YONDER_METAL_IMAGE_URL=http://images.invalid/live.iso"}, st.TemplateEnv()...),
		"generate", "cluster", l.name, "--infrastructure", "yonder-metal:v0.1.0", "--flavor", "metal",
		"--kubernetes-version", stack.KubernetesVersion, "--target-namespace", st.HostNamespace, "--worker-machine-count", "1")
	g.Expect(err).NotTo(HaveOccurred())
	objs, err := flavorcheck.Decode([]byte(out))
	g.Expect(err).NotTo(HaveOccurred())
	t0 := time.Now()
	for _, o := range objs {
		g.Expect(st.Client.Create(l.ctx, o)).To(Succeed(), "creating %s %s", o.GetKind(), o.GetName())
	}
	return t0
}

// provisioned waits until the host is claimed, the VM on and the Machine Provisioned with the metal
// providerID, the TPM pinned after one PXE boot and the bootstrap data on the VM's console; it returns
// when each happened after t0.
func (l *metalLife) provisioned(t *testing.T, t0 time.Time) (claimed, poweredOn, provisioned time.Duration) {
	t.Helper()
	g := NewWithT(t)
	g.Eventually(func(g Gomega) string {
		c := l.bmh(g).Spec.ConsumerRef
		g.Expect(c).NotTo(BeNil())
		return c.Kind
	}, 3*time.Minute, time.Second).Should(Equal("YonderMetalMachine"), l.diag)
	claimed = time.Since(t0)
	g.Eventually(func() bool { return st.MetalRunning(l.host.Name) }, 2*time.Minute, 200*time.Millisecond).Should(BeTrue(), "the BMC powered the VM on")
	poweredOn = time.Since(t0)
	g.Eventually(func(g Gomega) string {
		ms := l.machines(g)
		g.Expect(ms).To(HaveLen(1))
		return ms[0].Status.Phase
	}, 10*time.Minute, time.Second).Should(Equal(string(clusterv1.MachinePhaseProvisioned)), l.diag)
	provisioned = time.Since(t0)
	m := l.machines(g)[0]
	g.Expect(m.Spec.ProviderID).To(Equal(fmt.Sprintf("yonder-metal://%s/%s", st.HostNamespace, l.host.Name)))
	h := l.bmh(g)
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	g.Expect(h.Annotations).To(HaveKey("metal.yonder.dev/tpm-enrolment"), "the VM's TPM was pinned at its first attested boot")
	g.Expect(st.MetalPXEBoots(l.host.Name)).To(Equal(1), "one PXE boot was enough")
	// The agent received the Machine's bootstrap data: the byte count the console shows is the Secret's.
	g.Expect(m.Spec.Bootstrap.DataSecretName).NotTo(BeNil())
	data := &corev1.Secret{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: *m.Spec.Bootstrap.DataSecretName}, data)).To(Succeed())
	g.Eventually(func() string { return st.MetalConsole(l.host.Name) }, time.Minute, time.Second).
		Should(ContainSubstring(fmt.Sprintf("%s%d bytes of bootstrap data", metalboot.AttestedMarker, len(data.Data["value"]))))
	// The boot image is the generic one a release ships: the agent verified with the key the manager served.
	g.Expect(st.MetalConsole(l.host.Name)).To(ContainSubstring(metalboot.ServedKeyMarker))
	g.Expect(st.MetalRunning(l.host.Name)).To(BeTrue(), "the live host keeps running")
	return claimed, poweredOn, provisioned
}

// restartChangesNothing kills (-9) and restarts the manager on a provisioned host: it rebuilds its boot
// services and state from the objects and leaves the host alone — no second power cycle, still
// provisioned.
func (l *metalLife) restartChangesNothing(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	g.Expect(st.KillManager("infrastructure-yonder-metal")).To(Succeed())
	g.Expect(st.StartManager(l.ctx, "infrastructure-yonder-metal")).To(Succeed())
	g.Consistently(func(g Gomega) {
		g.Expect(l.bmh(g).Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(st.MetalPXEBoots(l.host.Name)).To(Equal(1))
		g.Expect(st.MetalRunning(l.host.Name)).To(BeTrue())
		ms := l.machines(g)
		g.Expect(ms).To(HaveLen(1))
		g.Expect(ms[0].Status.Phase).To(Equal(string(clusterv1.MachinePhaseProvisioned)))
	}, 10*time.Second, time.Second).Should(Succeed(), l.diag)
}

// scaleToZero scales the MachineDeployment to 0 and waits until the Machine is gone and the host
// deprovisioned, available and off; it returns how long that took.
func (l *metalLife) scaleToZero(t *testing.T) time.Duration {
	t.Helper()
	g := NewWithT(t)
	t1 := time.Now()
	md := &clusterv1.MachineDeployment{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.name + "-md-0"}, md)).To(Succeed())
	patch := client.MergeFrom(md.DeepCopy())
	zero := int32(0)
	md.Spec.Replicas = &zero
	g.Expect(st.Client.Patch(l.ctx, md, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(l.machines(g)).To(BeEmpty())
		h := l.bmh(g)
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
		g.Expect(h.Status.PoweredOn).To(BeFalse())
	}, 3*time.Minute, 500*time.Millisecond).Should(Succeed(), l.diag)
	g.Eventually(func() bool { return st.MetalRunning(l.host.Name) }, time.Minute, 200*time.Millisecond).Should(BeFalse(), "the VM was powered off")
	return time.Since(t1)
}

// deleteCluster deletes the Cluster as users do; the host stays, available.
func (l *metalLife) deleteCluster(t *testing.T) {
	t.Helper()
	g := NewWithT(t)
	cl := &clusterv1.Cluster{}
	g.Expect(st.Client.Get(l.ctx, client.ObjectKey{Namespace: st.HostNamespace, Name: l.name}, cl)).To(Succeed())
	g.Expect(st.Client.Delete(l.ctx, cl)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(st.Client.Get(l.ctx, client.ObjectKeyFromObject(cl), &clusterv1.Cluster{}))
	}, 2*time.Minute, time.Second).Should(BeTrue())
	g.Expect(l.bmh(g).Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
