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
	ns, cluster, tmpl := disklessSite(t, g, "diskless", "d1")
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "diskless-join", cluster.Name)
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

// A diskless Machine whose bootstrap data its ramdisk could not run — CABPK's kubeadm cloud-config, with
// modules other than write_files and runcmd — is refused before its host is handed anything: the
// YonderMetalMachine says BootstrapDataUnsupported, naming the module and Yonder's bootstrap provider, and
// the claimed host gets no custom deploy, no user data and is not powered on. No secret value is echoed.
func TestDisklessMachineRefusesBootstrapDataItsRamdiskCannotRun(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns, cluster, tmpl := disklessSite(t, g, "diskless-kubeadm", "k1")
	data := dataSecret(g, ns, "kubeadm-join", cluster.Name)
	data.Data["value"] = []byte("#cloud-config\nbootcmd:\n- echo s3cret-token\nwrite_files: []\nruncmd:\n- kubeadm join --token s3cret-token\n")
	g.Expect(env.Update(ctx, data)).To(Succeed())
	newMachineDeploymentFrom(g, ns, "diskless-kubeadm", cluster, data.Name, 1, tmpl.Name)

	g.Eventually(func(g Gomega) {
		ms := metalMachines(g, ns)
		g.Expect(ms).To(HaveLen(1))
		c := condition(&ms[0], infrav1.YonderMetalMachineHostProvisionedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalMachineBootstrapDataUnsupportedReason))
		g.Expect(c.Message).To(And(ContainSubstring("bootcmd"), ContainSubstring("YonderConfig"), ContainSubstring(data.Name)))
		g.Expect(c.Message).NotTo(ContainSubstring("s3cret"), "no value of the bootstrap data")
	}).Should(Succeed())
	h := host(g, ns, "k1")
	g.Expect(h.Spec.ConsumerRef).NotTo(BeNil(), "the host is claimed for the Machine")
	g.Expect(h.Spec.CustomDeploy).To(BeNil(), "but handed nothing")
	g.Expect(h.Spec.UserData).To(BeNil())
	g.Expect(h.Spec.Online).To(BeFalse())
}

// disklessSite is a namespace (named name) with one free, inspected host under the simulated host
// controller, a Cluster, the provider running, and a diskless YonderMetalMachineTemplate for that host.
func disklessSite(t *testing.T, g *WithT, name, hostName string) (string, *clusterv1.Cluster, *infrav1.YonderMetalMachineTemplate) {
	t.Helper()
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, name).Name
	pool := map[string]string{"pool": name}
	registerHosts(g, ns, hostSpec{Name: hostName, Labels: pool})
	describeHosts(g, ns, hostName)
	simulateHostController(t, ns)
	cluster := newCluster(t, g, ns, name)
	startProvider(t, testOptions())
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			CustomDeploy: &infrav1.CustomDeploy{Method: infrav1.DisklessDeployMethod},
			HostSelector: infrav1.HostSelector{MatchLabels: pool},
		}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	return ns, cluster, tmpl
}
