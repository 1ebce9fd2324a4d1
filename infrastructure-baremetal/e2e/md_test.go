package e2e_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/harness"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/setup"
	"github.com/yonder-dev/yonder/test/metalboot"
)

// startMachineProvider runs the provider's YonderMetalMachine/YonderMetalCluster reconcilers.
func startMachineProvider(t *testing.T) {
	t.Helper()
	harness.StartProvider(t, env.Config, env.GetScheme(), setup.Reconcilers(setup.Options{Controllers: manager.Controllers{SkipNameValidation: true}}))
}

// newCluster creates a Cluster on a YonderMetalCluster whose control plane is the workload apiserver (a
// generic control plane object marked initialized stands in for the control plane provider).
func newCluster(t *testing.T, g Gomega, ns, name string) *clusterv1.Cluster {
	t.Helper()
	return harness.AttachedCluster(t, g, env.Client, workload(t), harness.ClusterOptions{Namespace: ns, Name: name, WaitForInfrastructure: true,
		Infrastructure: &infrav1.YonderMetalCluster{Spec: infrav1.YonderMetalClusterSpec{ControlPlaneEndpoint: harness.Endpoint(workload(t))}}})
}

// The done-when story with the real CAPI controllers and Yonder's YonderMetalMachine reconciler: a
// BareMetalHost pointing at the emulator goes registering → inspecting → available; a MachineDeployment of
// 1 with a YonderMetalMachineTemplate (live image) claims it; the VM PXE-boots through our DHCP/TFTP/HTTP,
// the agent in the initramfs attests with the VM's TPM and receives the Machine's bootstrap data, and the
// Machine reaches Provisioned. Scaling to 0 deletes the Machine: the host is deprovisioned, the VM powered
// off, and the host is available again with no consumer. This image has the provider's key built in (the
// other tests boot the generic one). Wall time of each phase is logged.
func TestQEMUMachineDeploymentClaimsAndReleasesHost(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	start := time.Now()
	l := newMetalLab(ctx, t, artifactsAgent, 8*time.Minute, 512)
	prepared := time.Since(start)
	l.host.Labels["pool"] = "qemu"
	registered := l.register(g)

	startMachineProvider(t)
	cluster := newCluster(t, g, l.ns, "metal")
	data := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "metal-join", Labels: map[string]string{clusterv1.ClusterNameLabel: cluster.Name}},
		Type: clusterv1.ClusterSecretType, Data: map[string][]byte{"value": []byte("#cloud-config\n# join metal\n"), "format": []byte("cloud-config")}}
	g.Expect(env.Create(ctx, data)).To(Succeed())
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "workers"},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{
			Spec: infrav1.YonderMetalMachineSpec{Image: &infrav1.Image{URL: "http://images.example/live.iso", Format: infrav1.LiveISOFormat},
				AutomatedCleaningMode: "disabled", HostSelector: infrav1.HostSelector{MatchLabels: map[string]string{"pool": "qemu"}}}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	labels := map[string]string{"md": "workers"}
	md := &clusterv1.MachineDeployment{ObjectMeta: metav1.ObjectMeta{Namespace: l.ns, Name: "workers"},
		Spec: clusterv1.MachineDeploymentSpec{ClusterName: cluster.Name, Replicas: ptr.To[int32](1),
			Selector: metav1.LabelSelector{MatchLabels: labels},
			Template: clusterv1.MachineTemplateSpec{ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
				Spec: clusterv1.MachineSpec{ClusterName: cluster.Name, Version: "v1.36.3",
					Bootstrap:         clusterv1.Bootstrap{DataSecretName: ptr.To(data.Name)},
					InfrastructureRef: clusterv1.ContractVersionedObjectReference{APIGroup: infrav1.GroupVersion.Group, Kind: "YonderMetalMachineTemplate", Name: tmpl.Name}}}}}
	start = time.Now()
	g.Expect(env.Create(ctx, md)).To(Succeed())

	machine := func(g Gomega) *clusterv1.Machine {
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(l.ns))).To(Succeed())
		g.Expect(list.Items).To(HaveLen(1))
		return &list.Items[0]
	}
	g.Eventually(func(g Gomega) *corev1.ObjectReference { return l.get(g).Spec.ConsumerRef }, 2*time.Minute, 200*time.Millisecond).ShouldNot(BeNil())
	claimed := time.Since(start)
	g.Eventually(func(g Gomega) string { return machine(g).Status.Phase }, 10*time.Minute, time.Second).
		Should(Equal(string(clusterv1.MachinePhaseProvisioned)))
	provisioned := time.Since(start)
	m := machine(g)
	g.Expect(m.Spec.ProviderID).To(Equal(fmt.Sprintf("yonder-metal://%s/%s", l.ns, l.host.Name)))
	h := l.get(g)
	g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	g.Expect(h.Annotations).To(HaveKey("metal.yonder.dev/tpm-enrolment"))
	console, _ := os.ReadFile(l.driver.ConsoleLog("vm0"))
	g.Expect(string(console)).To(ContainSubstring(fmt.Sprintf(metalboot.AttestedMarker+"%d bytes of bootstrap data", len(data.Data["value"]))))
	g.Expect(string(console)).NotTo(ContainSubstring(metalboot.ServedKeyMarker), "the key built into this image wins over the one the boot server serves")

	start = time.Now()
	g.Eventually(func() error {
		cur := &clusterv1.MachineDeployment{}
		if err := env.Get(ctx, client.ObjectKeyFromObject(md), cur); err != nil {
			return err
		}
		cur.Spec.Replicas = ptr.To[int32](0)
		return env.Update(ctx, cur)
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		list := &clusterv1.MachineList{}
		g.Expect(env.List(ctx, list, client.InNamespace(l.ns))).To(Succeed())
		g.Expect(list.Items).To(BeEmpty())
		h := l.get(g)
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
		g.Expect(h.Status.PoweredOn).To(BeFalse())
	}, 3*time.Minute, 500*time.Millisecond).Should(Succeed())
	g.Expect(l.driver.Running("vm0")).To(BeFalse(), "the VM was powered off")
	released := time.Since(start)
	t.Logf("phases: boot artefacts %s; BareMetalHost registered+inspected → available %s; MachineDeployment → host claimed %s → Machine Provisioned (PXE, attested, data received) %s; scale to 0 → Machine gone, host deprovisioned, off, available %s",
		prepared.Round(time.Millisecond), registered.Round(time.Millisecond), claimed.Round(time.Millisecond), provisioned.Round(time.Millisecond), released.Round(time.Millisecond))
}
