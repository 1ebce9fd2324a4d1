package baremetalhost_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	wire "github.com/yonder-dev/yonder/hostruntime/attest"
	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/harness"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// diskless gives a claimed host the diskless deploy method instead of an image.
func diskless(h *metal3v1.BareMetalHost) {
	h.Spec.Image = nil
	h.Spec.CustomDeploy = &metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}
	h.Spec.AutomatedCleaningMode = metal3v1.CleaningModeMetadata
}

// A diskless host (customDeploy yonder-diskless): it PXE-boots and attests as any host, its ramdisk
// receives run-node instructions (user data, and meta data with its providerid) and reports once the
// Node joined. A failed bootstrap is retried by a new PXE boot; a joined Node makes the host provisioned
// as it runs: no disk boot, no power action. Released, it is powered off without a cleaning boot, even
// with automatedCleaningMode metadata: nothing was written.
func TestDisklessProvisionRetryAndRelease(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-diskless").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("d1", "52:54:00:d1:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("d1", "52:54:00:d1:00:01"))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "d1", "52:54:00:d1:00:01", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))

	hosts.mu.Lock()
	hosts.failWrites["d1"] = 1
	hosts.mu.Unlock()
	claim(g, ns, h, "#cloud-config\nruncmd: [yonder-agent]\n", diskless)
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(func(g Gomega) {
		evs, err := harness.Events(ctx, env.Client, h)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(evs).To(ContainElements(
			And(HavePrefix("Warning "+baremetalhost.BareMetalHostNodeStartFailedReason+": "+baremetalhost.BareMetalHostProvisionedCondition+" is False: "),
				ContainSubstring("could not start its Node"), ContainSubstring("the kubelet did not register the Node")),
			HavePrefix("Normal "+baremetalhost.RunningDisklessEvent+": Node joined from the ramdisk"),
		))
	}).Should(Succeed())
	var actions []string
	g.Eventually(func() []string { actions, _ = hosts.disk("d1"); return actions }).Should(HaveLen(2))
	g.Expect(actions).To(Equal([]string{wire.ActionRunNode, wire.ActionRunNode}))
	boots, data, errs := hosts.snapshot("d1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(2), "the failed bootstrap cost one more PXE boot")
	g.Expect(data[1]).To(Equal("#cloud-config\nruncmd: [yonder-agent]\n"))
	hosts.mu.Lock()
	md := hosts.metaData["d1"][1]
	hosts.mu.Unlock()
	g.Expect(md).To(ContainSubstring(`"providerid":"yonder-metal://`+ns+`/h1"`), "the agent names the Node after the host")

	got := getHost(g, h)
	g.Expect(got.Status.Provisioning.CustomDeploy).To(Equal(&metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}))
	g.Expect(got.Status.Provisioning.Image.URL).To(BeEmpty())
	g.Expect(got.Status.ErrorMessage).To(BeEmpty())
	g.Expect(got.Status.PoweredOn).To(BeTrue())
	g.Expect(got.Annotations).NotTo(HaveKey(baremetalhost.ReportTokenAnnotation), "the report consumed its token")
	var st baremetalhost.HostState
	g.Expect(json.Unmarshal([]byte(got.Annotations[baremetalhost.StateAnnotation]), &st)).To(Succeed())
	g.Expect(st.DisksWritten).To(BeFalse(), "a diskless host writes nothing")
	c := condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g)
	g.Expect(c.Status).To(Equal(metav1.ConditionTrue))
	g.Expect(c.Message).To(And(ContainSubstring("diskless"), ContainSubstring("a reboot loses the Node")))

	// The host keeps running its ramdisk: no disk boot override, no power action after the Node joined.
	_, diskBoots := hosts.disk("d1")
	g.Expect(diskBoots).To(BeZero())
	g.Expect(sim.State("d1").Override).NotTo(Equal("Hdd"))
	ons, offs := hosts.power("d1")
	g.Consistently(func(g Gomega) {
		o, f := hosts.power("d1")
		g.Expect([]int{o, f}).To(Equal([]int{ons, offs}), "no power action on the provisioned host")
		g.Expect(getHost(g, h).Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	}, "3s").Should(Succeed())
	g.Expect(sim.State("d1").PoweredOn).To(BeTrue())

	// Released (the machine controller withdraws the custom deploy with the rest): powered off, available,
	// no cleaning boot.
	patchHost(g, h, func(h *metal3v1.BareMetalHost) {
		h.Spec.CustomDeploy, h.Spec.UserData, h.Spec.Online, h.Spec.ConsumerRef = nil, nil, false, nil
	})
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateAvailable))
	boots, _, _ = hosts.snapshot("d1")
	g.Expect(boots).To(Equal(2), "no cleaning boot: nothing was written")
	g.Expect(condition(h, baremetalhost.BareMetalHostProvisionedCondition)(g).Message).To(ContainSubstring("the host ran diskless, nothing was written to its disks"))
	g.Expect(sim.State("d1").PoweredOn).To(BeFalse())
	got = getHost(g, h)
	g.Expect(got.Status.Provisioning.CustomDeploy).To(BeNil())
	g.Expect(got.Status.PoweredOn).To(BeFalse())
}

// Yonder implements one custom deploy: any other method is refused with a condition naming it, as are
// an image and the diskless method together.
func TestOtherCustomDeployRefused(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-custom").Name
	sim := startSim(t, redfishsim.NewMemoryDriver())
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:d1:00:02"))
	startController(t, testReconciler(nil), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:d1:00:02", bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Spec.CustomDeploy = &metal3v1.CustomDeploy{Method: "install_coreos"}
	})
	g.Eventually(condition(h, baremetalhost.BareMetalHostSpecSupportedCondition)).Should(And(
		HaveField("Status", metav1.ConditionFalse),
		HaveField("Message", And(ContainSubstring("spec.customDeploy.method=install_coreos"), ContainSubstring("the one custom deploy is yonder-diskless")))))
	patchHost(g, h, func(h *metal3v1.BareMetalHost) {
		h.Spec.CustomDeploy.Method = infrav1.DisklessDeployMethod
		h.Spec.Image = &metal3v1.Image{URL: "http://images.example/node.qcow2"}
	})
	g.Eventually(condition(h, baremetalhost.BareMetalHostSpecSupportedCondition)).Should(
		HaveField("Message", ContainSubstring("spec.image with spec.customDeploy yonder-diskless")))
	patchHost(g, h, func(h *metal3v1.BareMetalHost) { h.Spec.Image = nil })
	g.Eventually(condition(h, baremetalhost.BareMetalHostSpecSupportedCondition)).Should(HaveField("Status", metav1.ConditionTrue))
}

// The diskless method's instructions: run-node, with the user data, the meta data (providerid) and the
// network data, and a report token.
func TestRunNodeInstructions(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-runnode").Name
	for name, data := range map[string]map[string][]byte{
		"join": {"value": []byte("#cloud-config\nruncmd: [true]\n")},
		"net":  {"networkData": []byte("links:\n- id: eth0\n  type: phy\n  ethernet_mac_address: 52:54:00:00:00:07\n")},
	} {
		g.Expect(env.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data})).To(Succeed())
	}
	h := &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "h1", Labels: map[string]string{baremetalhost.ManagedLabel: "true"}},
		Spec: metal3v1.BareMetalHostSpec{Online: true, UserData: &corev1.SecretReference{Name: "join"}, NetworkData: &corev1.SecretReference{Name: "net"},
			CustomDeploy: &metal3v1.CustomDeploy{Method: infrav1.DisklessDeployMethod}},
	}
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Status.OperationalStatus = metal3v1.OperationalStatusOK
	h.Status.Provisioning.State = metal3v1.StateProvisioning
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())

	data, err := baremetalhost.AttestStore{Client: env.Client, Reader: env.GetAPIReader()}.Instructions(ctx, ns+"/h1")
	g.Expect(err).NotTo(HaveOccurred())
	in, err := wire.DecodeInstructions(data)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(in.Action).To(Equal(wire.ActionRunNode))
	g.Expect(in.Image).To(BeNil())
	g.Expect(string(in.UserData)).To(Equal("#cloud-config\nruncmd: [true]\n"))
	var md map[string]any
	g.Expect(json.Unmarshal(in.MetaData, &md)).To(Succeed())
	g.Expect(md).To(HaveKeyWithValue("providerid", "yonder-metal://"+ns+"/h1"))
	g.Expect(string(in.NetworkData)).To(ContainSubstring("52:54:00:00:00:07"))
	g.Expect(in.ReportToken).NotTo(BeEmpty())
	g.Expect(getHost(g, h).Annotations).To(HaveKey(baremetalhost.ReportTokenAnnotation))
}
