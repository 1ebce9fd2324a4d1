package metalmachine_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/yonder-dev/yonder/test/bmhsim"
	"github.com/yonder-dev/yonder/test/harness"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// The user story: a MachineDeployment of 3 YonderMetalMachines, with the real CAPI controllers, claims 3
// distinct hosts, one per failure domain, skipping hosts that are paused, in error, consumed by someone
// else, not matching the selector or not yet inspected. clusterctl move is blocked while the hosts
// provision. Each host gets the image, the Machine's bootstrap data Secret and online=true; each
// Machine gets providerID yonder-metal://<namespace>/<host> and the host's addresses — its inspected NIC's,
// the static one of its inventory networkData and its metaData's hostname — and becomes Running once its
// Node exists. Scaling down deprovisions the surplus hosts and releases them only once they
// are available again; the BareMetalHosts are never deleted.
func TestMachineDeploymentClaimsDistinctHostsAcrossFailureDomains(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "md").Name
	pool := map[string]string{"pool": "rack"}
	other := &corev1.ObjectReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1beta1", Kind: "Metal3Machine", Name: "someone-else", Namespace: ns}
	registerHosts(g, ns,
		hostSpec{Name: "a1", FailureDomain: "a", Labels: pool}, hostSpec{Name: "a2", FailureDomain: "a", Labels: pool},
		hostSpec{Name: "b1", FailureDomain: "b", Labels: pool}, hostSpec{Name: "b2", FailureDomain: "b", Labels: pool},
		hostSpec{Name: "c1", FailureDomain: "c", Labels: pool},
		hostSpec{Name: "c-paused", FailureDomain: "c", Labels: pool, Paused: true},
		hostSpec{Name: "c-error", FailureDomain: "c", Labels: pool, ErrorMessage: "Redfish: 401 Unauthorized"},
		hostSpec{Name: "c-taken", FailureDomain: "c", Labels: pool, Consumer: other},
		hostSpec{Name: "c-inspecting", FailureDomain: "c", Labels: pool, State: metal3v1.StateInspecting},
		hostSpec{Name: "c-otherpool", FailureDomain: "c", Labels: map[string]string{"pool": "other"}},
	)
	describeHosts(g, ns, "a1", "a2", "b1", "b2", "c1")
	sim := simulateHostController(t, ns)
	sim.SetHold(true)
	cluster := newCluster(t, g, ns, "edge")
	startProvider(t, testOptions())
	wlc, err := wl.Get(t).Client()
	g.Expect(err).NotTo(HaveOccurred())
	data := dataSecret(g, ns, "edge-join", cluster.Name)
	md := newMachineDeployment(g, ns, "workers", cluster, data.Name, 3, pool)

	// The cluster reports the failure domains of the inventory.
	g.Eventually(func(g Gomega) {
		mc := &infrav1.YonderMetalCluster{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: "edge"}, mc)).To(Succeed())
		names := []string{}
		for _, fd := range mc.Status.FailureDomains {
			names = append(names, fd.Name)
		}
		g.Expect(names).To(Equal([]string{"a", "b", "c"}))
	}).Should(Succeed())

	// While the hosts provision, every machine blocks clusterctl move and says what it waits for.
	g.Eventually(func(g Gomega) {
		ms := metalMachines(g, ns)
		g.Expect(ms).To(HaveLen(3))
		for _, m := range ms {
			g.Expect(m.Annotations).To(HaveKeyWithValue(clusterctlv1.BlockMoveAnnotation, "true"))
			c := condition(&m, infrav1.YonderMetalMachineHostProvisionedCondition)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(infrav1.YonderMetalMachineHostProvisioningReason))
			g.Expect(c.Message).To(ContainSubstring(`is "provisioning"`))
		}
	}).Should(Succeed())
	sim.SetHold(false)

	machinesRunning(g, wlc, ns, 3)
	checkHandedOff(g, ns, data.Name, other)
	checkScaleDownReleasesWhenAvailable(g, sim, md, wlc, ns)

	harness.Scale(g, env, md, 0)
	g.Eventually(func(g Gomega) {
		g.Expect(metalMachines(g, ns)).To(BeEmpty())
		g.Expect(checkClaims(g, ns)).To(BeEmpty())
	}).Should(Succeed())
	for h, byConsumer := range sim.Provisionings() {
		for uid, n := range byConsumer {
			g.Expect(n).To(Equal(1), "host %s provisioned %d times for consumer %s", h, n, uid)
		}
	}
}

// machinesRunning waits until ns holds want Running Machines with providerID
// yonder-metal://<namespace>/<host>, Ready and movable.
func machinesRunning(g *WithT, wlc client.Client, ns string, want int) {
	g.Eventually(func(g Gomega) {
		ensureNodes(g, wlc, ns)
		harness.ExpectMachinesRunning(g, env, ns, want)
		g.Expect(checkClaims(g, ns)).To(HaveLen(want))
		for _, m := range metalMachines(g, ns) {
			g.Expect(m.Spec.ProviderID).To(Equal("yonder-metal://" + ns + "/" + m.Status.HostRef))
			g.Expect(m.Annotations).NotTo(HaveKey(clusterctlv1.BlockMoveAnnotation))
			g.Expect(condition(&m, clusterv1.ReadyCondition).Status).To(Equal(metav1.ConditionTrue))
		}
	}).Should(Succeed())
}

// checkHandedOff asserts that the 3 machines hold hosts of distinct failure domains, each handed the
// image, the Machine's bootstrap data Secret and online=true, and that unusable hosts were skipped.
func checkHandedOff(g *WithT, ns, data string, other *corev1.ObjectReference) {
	domains := map[string]bool{}
	for _, m := range metalMachines(g, ns) {
		h := host(g, ns, m.Status.HostRef)
		g.Expect(h.Name).To(BeElementOf("a1", "a2", "b1", "b2", "c1"))
		domains[h.Labels[infrav1.FailureDomainLabel]] = true
		g.Expect(h.Spec.ConsumerRef).To(Equal(&corev1.ObjectReference{APIVersion: infrav1.GroupVersion.String(), Kind: "YonderMetalMachine", Namespace: ns, Name: m.Name, UID: m.UID}))
		g.Expect(h.Spec.Image).NotTo(BeNil())
		g.Expect(h.Spec.Image.URL).To(Equal(testImage().URL))
		g.Expect(h.Spec.Image.Checksum).To(Equal(testImage().Checksum))
		g.Expect(string(h.Spec.Image.ChecksumType)).To(Equal("md5"))
		g.Expect(h.Spec.Image.DiskFormat).To(HaveValue(Equal("qcow2")))
		g.Expect(h.Spec.UserData).To(Equal(&corev1.SecretReference{Name: data, Namespace: ns}))
		g.Expect(h.Spec.Online).To(BeTrue())
		g.Expect(h.Spec.AutomatedCleaningMode).To(Equal(metal3v1.CleaningModeMetadata))
		// The inspected NIC's address, then the inventory's static one; the metaData's hostname.
		g.Expect(m.Status.Addresses).To(HaveLen(3))
		g.Expect(m.Status.Addresses[0].Type).To(Equal(clusterv1.MachineInternalIP))
		g.Expect(m.Status.Addresses[1:]).To(Equal([]clusterv1.MachineAddress{
			{Type: clusterv1.MachineInternalIP, Address: inventoryAddress(h.Name)}, {Type: clusterv1.MachineHostName, Address: "node-" + h.Name}}))
	}
	g.Expect(domains).To(HaveLen(3), "one machine per failure domain")
	for _, name := range []string{"c-paused", "c-error", "c-inspecting", "c-otherpool"} {
		g.Expect(host(g, ns, name).Spec.ConsumerRef).To(BeNil(), "host %s must be skipped", name)
	}
	g.Expect(host(g, ns, "c-taken").Spec.ConsumerRef).To(Equal(other))
}

// checkScaleDownReleasesWhenAvailable scales md to 1: the surplus hosts are deprovisioned first and
// released only once available again, cleared of what they were handed; no host is deleted.
func checkScaleDownReleasesWhenAvailable(g *WithT, sim *bmhsim.Simulator, md *clusterv1.MachineDeployment, wlc client.Client, ns string) {
	sim.SetHold(true)
	sim.SetHoldDeprovision(true)
	harness.Scale(g, env, md, 1)
	g.Eventually(func(g Gomega) {
		deprovisioning := 0
		for _, h := range hostList(g, ns) {
			if h.Status.Provisioning.State == metal3v1.StateDeprovisioning {
				deprovisioning++
				g.Expect(h.Spec.ConsumerRef).NotTo(BeNil(), "host %s was released while still deprovisioning", h.Name)
			}
		}
		g.Expect(deprovisioning).To(Equal(2))
	}).Should(Succeed())
	sim.SetHoldDeprovision(false)
	machinesRunning(g, wlc, ns, 1)
	g.Eventually(func(g Gomega) {
		free := 0
		for _, h := range hostList(g, ns) {
			if h.Spec.ConsumerRef == nil && h.Labels["pool"] == "rack" && h.Labels[infrav1.FailureDomainLabel] != "" && h.Status.Provisioning.State == metal3v1.StateAvailable && h.Name != "c-error" {
				g.Expect(h.Spec.Image).To(BeNil())
				g.Expect(h.Spec.UserData).To(BeNil())
				g.Expect(h.Spec.Online).To(BeFalse())
				g.Expect(h.Labels).NotTo(HaveKey(infrav1.ClusterLabel))
				if h.Name != "c-paused" {
					g.Expect(h.Spec.NetworkData).To(Equal(&corev1.SecretReference{Namespace: ns, Name: h.Name + "-network-data"}), "the inventory record stays")
					g.Expect(h.Spec.MetaData).To(Equal(&corev1.SecretReference{Namespace: ns, Name: h.Name + "-meta-data"}), "the inventory record stays")
				}
				free++
			}
		}
		// Of a1 a2 b1 b2 c1 one is still claimed; c-paused was never claimed.
		g.Expect(free).To(Equal(5))
	}).Should(Succeed())
	g.Expect(hostList(g, ns)).To(HaveLen(10), "BareMetalHosts are never deleted")
}

// A host that fails to provision: its errorMessage reaches the YonderMetalMachine as HostError (an
// operator sees what broke without reading the host), and deleting the Machine deprovisions the host,
// which clears the error, and releases it.
func TestHostErrorIsReportedAndReleasedOnDelete(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "err").Name
	pool := map[string]string{"pool": "err"}
	registerHosts(g, ns, hostSpec{Name: "e1", Labels: pool})
	sim := simulateHostController(t, ns)
	sim.SetFail("e1", "writing the image failed: checksum mismatch")
	cluster := newCluster(t, g, ns, "err")
	startProvider(t, testOptions())
	data := dataSecret(g, ns, "err-join", cluster.Name)
	md := newMachineDeployment(g, ns, "err", cluster, data.Name, 1, pool)
	g.Eventually(func(g Gomega) {
		ms := metalMachines(g, ns)
		g.Expect(ms).To(HaveLen(1))
		c := condition(&ms[0], infrav1.YonderMetalMachineHostProvisionedCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Reason).To(Equal(infrav1.YonderMetalMachineHostErrorReason))
		g.Expect(c.Message).To(ContainSubstring("BareMetalHost e1 reports provisioning error: writing the image failed: checksum mismatch"))
		g.Expect(condition(&ms[0], clusterv1.ReadyCondition).Status).To(Equal(metav1.ConditionFalse))
	}).Should(Succeed())
	harness.Scale(g, env, md, 0)
	g.Eventually(func(g Gomega) {
		g.Expect(metalMachines(g, ns)).To(BeEmpty())
		h := host(g, ns, "e1")
		g.Expect(h.Spec.ConsumerRef).To(BeNil())
		g.Expect(h.Status.ErrorType).To(BeEmpty())
		g.Expect(h.Status.Provisioning.State).To(Equal(metal3v1.StateAvailable))
	}).Should(Succeed())
}

// inventoryAddress is the static address describeHosts gives host name in its networkData.
func inventoryAddress(name string) string {
	sum := 0
	for _, c := range name {
		sum += int(c)
	}
	return fmt.Sprintf("10.20.%d.%d", len(name), sum%250+1)
}

// describeHosts writes each host's inventory record as an operator does: a networkData Secret (OpenStack
// network_data, DHCP on the NIC plus a static address) and a metaData Secret (a hostname), referenced from
// the BareMetalHost's spec.
func describeHosts(g Gomega, ns string, names ...string) {
	ctx := context.Background()
	for _, name := range names {
		nd := fmt.Sprintf(`{"links": [{"id": "nic0", "type": "phy", "ethernet_mac_address": "52:54:00:00:00:01"}],
"networks": [{"id": "lease", "type": "ipv4_dhcp", "link": "nic0"}, {"id": "static", "type": "ipv4", "link": "nic0", "ip_address": %q, "netmask": "255.255.255.0"}]}`, inventoryAddress(name))
		for _, sec := range []*corev1.Secret{
			{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-network-data"}, Data: map[string][]byte{"networkData": []byte(nd)}},
			{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name + "-meta-data"}, Data: map[string][]byte{"metaData": []byte("hostname: node-" + name + "\nrack: r7\n")}},
		} {
			g.Expect(env.Create(ctx, sec)).To(Succeed())
		}
		h := &metal3v1.BareMetalHost{}
		g.Expect(env.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, h)).To(Succeed())
		patch := client.MergeFrom(h.DeepCopy())
		h.Spec.NetworkData = &corev1.SecretReference{Namespace: ns, Name: name + "-network-data"}
		h.Spec.MetaData = &corev1.SecretReference{Namespace: ns, Name: name + "-meta-data"}
		g.Expect(env.Patch(ctx, h, patch)).To(Succeed())
	}
}
