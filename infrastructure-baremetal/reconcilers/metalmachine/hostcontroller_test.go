package metalmachine_test

import (
	"context"
	"testing"
	"time"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/yonder-dev/yonder/pkg/manager"
	"github.com/yonder-dev/yonder/test/harness"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// startHostController runs Yonder's real BareMetalHost controller (not the simulator) in a manager of
// its own, limited to ns. Its boot services are an empty inventory: hosts are powered on with a PXE
// boot override at the Redfish emulator, but nothing answers their PXE boot, so provisioning times out.
func startHostController(t *testing.T, ns string) {
	t.Helper()
	harness.StartProvider(t, env.Config, env.GetScheme(), func(ctx context.Context, mgr ctrl.Manager) error {
		r := &baremetalhost.Reconciler{Client: mgr.GetClient(), NetBoot: inventory.NewStatic(), Namespaces: []string{ns},
			Boot:             inventory.BootConfig{Kernel: "vmlinuz", Initrd: "initrd.img"},
			ProvisionTimeout: 2 * time.Second, MaxProvisionAttempts: 1, RetryInterval: 500 * time.Millisecond, PowerPollInterval: time.Second}
		return r.SetupWithManager(ctx, mgr, manager.Controllers{SkipNameValidation: true}.Options(2))
	})
}

// With Yonder's real BareMetalHost controller and the Redfish emulator instead of the simulator: the
// host is registered, inspected and made available by the host controller; a MachineDeployment of 1
// claims it and hands it a disk image and the Machine's bootstrap data Secret; the host controller
// powers it on with a PXE override (the emulator counts the boot), the boot is never answered, and the
// host's provisioning error appears on the YonderMetalMachine as HostError with the host's own message
// while clusterctl move stays blocked. Scaling to 0 withdraws the image; the host controller
// deprovisions and powers the host off, and only then is the claim cleared.
func TestWithRealHostControllerAndRedfishEmulator(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "real").Name
	sim, err := redfishsim.Start(redfishsim.Options{Username: "admin", Password: "s3cret"})
	g.Expect(err).NotTo(HaveOccurred())
	t.Cleanup(sim.Close)
	const mac = "52:54:00:30:00:01"
	sim.AddSystem(redfishsim.DefaultSystem("s1", mac))
	g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bmc"},
		Data: map[string][]byte{"username": []byte("admin"), "password": []byte("s3cret")}})).To(Succeed())
	g.Expect(env.Create(ctx, &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "r1", Labels: map[string]string{baremetalhost.ManagedLabel: "true", "pool": "real"}},
		Spec:       metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: sim.Address("s1"), CredentialsName: "bmc"}, BootMACAddress: mac},
	})).To(Succeed())
	startHostController(t, ns)
	g.Eventually(func(g Gomega) metal3v1.ProvisioningState { return host(g, ns, "r1").Status.Provisioning.State }).Should(Equal(metal3v1.StateAvailable))
	g.Expect(host(g, ns, "r1").Status.HardwareDetails).NotTo(BeNil(), "inspected through Redfish")

	cluster := newCluster(t, g, ns, "real")
	startProvider(t, testOptions())
	data := dataSecret(g, ns, "real-join", cluster.Name)
	tmpl := &infrav1.YonderMetalMachineTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "live"},
		Spec: infrav1.YonderMetalMachineTemplateSpec{Template: infrav1.YonderMetalMachineTemplateResource{Spec: infrav1.YonderMetalMachineSpec{
			Image: &infrav1.Image{URL: "http://images.example/node.qcow2", Checksum: "0123abcd", ChecksumType: "sha256", Format: "qcow2"},
			// The release powers the host off: no cleaning boot, which nothing here would answer either.
			AutomatedCleaningMode: "disabled",
			HostSelector:          infrav1.HostSelector{MatchLabels: map[string]string{"pool": "real"}},
		}}}}
	g.Expect(env.Create(ctx, tmpl)).To(Succeed())
	md := newMachineDeploymentFrom(g, ns, "live", cluster, data.Name, 1, tmpl.Name)

	g.Eventually(func(g Gomega) {
		ms := metalMachines(g, ns)
		g.Expect(ms).To(HaveLen(1))
		c := condition(&ms[0], infrav1.YonderMetalMachineHostProvisionedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalMachineHostErrorReason))
		g.Expect(c.Message).To(And(ContainSubstring("BareMetalHost r1 reports provisioning error"), ContainSubstring("PXE")))
		g.Expect(ms[0].Annotations).To(HaveKey(clusterctlv1.BlockMoveAnnotation))
		g.Expect(ms[0].Status.Initialization.Provisioned).To(BeNil())
	}).Should(Succeed())
	h := host(g, ns, "r1")
	g.Expect(h.Spec.UserData).To(Equal(&corev1.SecretReference{Name: data.Name, Namespace: ns}))
	g.Expect(h.Spec.Image.DiskFormat).To(HaveValue(Equal("qcow2")))
	g.Expect(sim.State("s1").PXEBoots).To(BeNumerically(">=", 1), "the host controller PXE-booted the claimed host")
	machines := &clusterv1.MachineList{}
	g.Expect(env.List(ctx, machines, client.InNamespace(ns))).To(Succeed())
	g.Expect(machines.Items[0].Status.Phase).NotTo(Equal(string(clusterv1.MachinePhaseProvisioned)))

	harness.Scale(g, env, md, 0)
	g.Eventually(func(g Gomega) {
		g.Expect(metalMachines(g, ns)).To(BeEmpty())
		h := host(g, ns, "r1")
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Spec.Image).To(BeNil())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
		g.Expect(h.Status.ErrorType).To(BeEmpty())
	}).Should(Succeed())
	g.Expect(sim.State("s1").PoweredOn).To(BeFalse())
}
