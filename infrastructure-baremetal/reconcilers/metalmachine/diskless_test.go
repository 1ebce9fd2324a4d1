package metalmachine_test

import (
	"context"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/test/harness"
)

// A diskless MachineDeployment (customDeploy yonder-diskless, no image): the claimed host is handed the
// custom deploy and no image, the Machine becomes Running with the host's providerID and addresses like an
// image's, and scaling to 0 withdraws the custom deploy, so the host is deprovisioned and released.
func TestDisklessMachineDeployment(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "diskless").Name
	pool := map[string]string{"pool": "diskless"}
	registerHosts(g, ns, hostSpec{Name: "d1", Labels: pool})
	describeHosts(g, ns, "d1")
	simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, "diskless")
	startProvider(t, testOptions())
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "diskless-join", cluster.Name)
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "diskless"},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			CustomDeploy: &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod},
			HostSelector: infrav1.HostSelector{MatchLabels: pool},
		}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	md := newMachineDeploymentFrom(g, ns, "diskless", cluster, data.Name, 1, tmpl.Name)

	machinesRunning(g, wlc, ns, 1)
	m := metalMachines(g, ns)[0]
	g.Expect(m.Status.Initialization.Provisioned).To(HaveValue(BeTrue()))
	g.Expect(m.Status.Addresses).To(ContainElement(clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: "node-d1"}))
	h := host(g, ns, "d1")
	g.Expect(h.Spec.Image).To(BeNil())
	g.Expect(h.Spec.CustomDeploy).To(Equal(&metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}))
	g.Expect(h.Spec.UserData).To(Equal(&corev1.SecretReference{Name: data.Name, Namespace: ns}))
	g.Expect(h.Spec.Online).To(BeTrue())

	harness.Scale(g, env, md, 0)
	g.Eventually(func(g Gomega) {
		g.Expect(metalMachines(g, ns)).To(BeEmpty())
		h := host(g, ns, "d1")
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Spec.CustomDeploy).To(BeNil())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
	}).Should(Succeed())
}
