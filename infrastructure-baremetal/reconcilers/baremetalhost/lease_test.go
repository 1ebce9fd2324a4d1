package baremetalhost_test

import (
	"context"
	"net/http"
	"net/netip"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/internal/inventory"
	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// A host that Yonder leases its address (metal.yonder.dev/boot-address) keeps it once provisioned: the
// OS it booted from disk gets that address from DHCP, so the host stays in the boot table lease-only —
// its reservation, no boot (the boot server answers its MAC 404 and mints no ticket). A restarted
// manager, whose table starts empty, puts it back on the host's first pass, even while the BMC refuses
// the controller. Deprovisioning takes it out of the table for good.
func TestProvisionedHostKeepsItsLease(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-lease").Name
	const mac = "52:54:00:2f:00:01"
	reserved := netip.MustParseAddr("192.0.2.61")
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", mac)
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", mac))
	proc := startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", mac, bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.BootAddressAnnotation] = reserved.String()
	})
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	entry := func() (inventory.Host, bool) { return lab.inv.HostByMAC(mustMAC(mac)) }
	leaseOnly := func(g Gomega) {
		e, ok := entry()
		g.Expect(ok).To(BeTrue(), "the provisioned host is in the boot table")
		g.Expect(e).To(And(HaveField("Name", ns+"/h1"), HaveField("Address", reserved), HaveField("Hostname", "h1"),
			HaveField("LeaseOnly", true)))
	}
	scriptStatus := func() int {
		rsp, err := http.Get(lab.base + "/ipxe/" + mac)
		g.Expect(err).NotTo(HaveOccurred())
		_ = rsp.Body.Close()
		return rsp.StatusCode
	}

	claim(g, ns, h, "lease-data", func(h *metal3v1.BareMetalHost) {
		h.Spec.AutomatedCleaningMode = metal3v1.CleaningModeMetadata
	})
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateProvisioned))
	// The pass that recorded provisioned replaced the boot entry before it wrote the state.
	leaseOnly(g)
	_, byName := lab.inv.HostByName(ns + "/h1")
	g.Expect(byName).To(BeFalse(), "attestation does not know a lease-only host")
	g.Expect(scriptStatus()).To(Equal(http.StatusNotFound), "a provisioned host is served no provisioning script")
	g.Consistently(leaseOnly, "3s").Should(Succeed(), "every later pass (PowerPollInterval 1s) keeps it lease-only")
	boots, data, errs := hosts.snapshot("s1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(1))
	g.Expect(data).To(Equal([]string{"lease-data"}))
	g.Expect(condition(h, baremetalhost.BareMetalHostBootMACUniqueCondition)(g).Status).To(Equal(metav1.ConditionTrue))

	// A restarted manager starts with an empty table; its BMC now refuses the controller's credentials.
	proc.Stop()
	lab.inv.Delete(mustMAC(mac))
	setBMCPassword(g, ns, "h1-bmc", "rotated")
	proc = startController(t, testReconciler(lab.inv), ns)
	g.Eventually(condition(h, baremetalhost.BareMetalHostBMCAccessibleCondition)).Should(HaveField("Reason", baremetalhost.BareMetalHostCredentialsRejectedReason))
	leaseOnly(g)
	g.Expect(scriptStatus()).To(Equal(http.StatusNotFound))
	setBMCPassword(g, ns, "h1-bmc", bmcPass)
	g.Eventually(condition(h, baremetalhost.BareMetalHostBMCAccessibleCondition)).Should(HaveField("Status", metav1.ConditionTrue))
	g.Expect(state(h)(g)).To(Equal(metal3v1.StateProvisioned))
	leaseOnly(g)
	boots, _, _ = hosts.snapshot("s1")
	g.Expect(boots).To(Equal(1), "the restart booted nothing")

	// Deprovisioned (cleaning boots the ramdisk once more): the host leaves the table.
	release(g, h)
	g.Eventually(state(h), 60*time.Second).Should(Equal(metal3v1.StateAvailable))
	_, ok := entry()
	g.Expect(ok).To(BeFalse(), "a deprovisioned host keeps no lease")
	boots, _, errs = hosts.snapshot("s1")
	g.Expect(errs).To(BeEmpty())
	g.Expect(boots).To(Equal(2), "one cleaning boot")
	proc.Stop()
	proc = startController(t, testReconciler(lab.inv), ns)
	g.Consistently(func() bool { _, ok := entry(); return ok }, "3s").Should(BeFalse(), "nor after a restart")
	proc.Stop()
}

// A provisioned host (here one moved from Metal3, provisioned by its status annotation) whose boot MAC an
// earlier host boots from never replaces that host's boot entry with its lease: it shows DuplicateBootMAC
// (and stays provisioned, not in error), and gets its lease once the other host is gone.
func TestLeaseOnlyNeverReplacesAnotherHostsEntry(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	nsA := env.CreateNamespace(ctx, t, "bmh-lease-a").Name
	nsB := env.CreateNamespace(ctx, t, "bmh-lease-b").Name
	const mac = "52:54:00:2f:00:02"
	reserved := netip.MustParseAddr("192.0.2.62")
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab) // no TPMs: the first host stays waiting for its PXE boot, in the table
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("a", mac))
	sim.AddSystem(redfishsim.DefaultSystem("b", mac))
	r := testReconciler(lab.inv)
	r.ProvisionTimeout = 5 * time.Minute
	startController(t, r, nsA, nsB)
	inTable := func() inventory.Host { e, _ := lab.inv.HostByMAC(mustMAC(mac)); return e }

	a := newHost(g, nsA, "a", sim, "a", mac, bmcPass)
	g.Eventually(state(a)).Should(Equal(metal3v1.StateAvailable))
	claim(g, nsA, a, "tenant-a")
	g.Eventually(inTable).Should(And(HaveField("Name", nsA+"/a"), HaveField("LeaseOnly", false)))

	b := newHost(g, nsB, "b", sim, "b", mac, bmcPass, movedHost(g), func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.BootAddressAnnotation] = reserved.String()
	})
	t.Cleanup(func() { deleteHost(t, b) }) // boot MACs are unique across namespaces: free it for a rerun
	g.Eventually(state(b)).Should(Equal(metal3v1.StateProvisioned))
	g.Eventually(condition(b, baremetalhost.BareMetalHostBootMACUniqueCondition)).Should(And(HaveField("Status", metav1.ConditionFalse),
		HaveField("Reason", baremetalhost.BareMetalHostDuplicateBootMACReason), HaveField("Message", And(ContainSubstring("in namespace "+nsA),
			ContainSubstring("does not lease this host its boot address 192.0.2.62")))))
	g.Consistently(inTable, "3s").Should(And(HaveField("Name", nsA+"/a"), HaveField("LeaseOnly", false)), "the first host keeps its boot entry")
	got := getHost(g, b)
	g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
	g.Expect(got.Status.ErrorType).To(BeEmpty(), "a provisioned host without its lease is not in error")

	deleteHost(t, a)
	g.Eventually(inTable).Should(And(HaveField("Name", nsB+"/b"), HaveField("Address", reserved), HaveField("LeaseOnly", true)))
	g.Eventually(condition(b, baremetalhost.BareMetalHostBootMACUniqueCondition)).Should(HaveField("Status", metav1.ConditionTrue))
	g.Expect(sim.State("b").PXEBoots).To(BeZero())
}

// setBMCPassword writes the password of a host's BMC credentials Secret.
func setBMCPassword(g Gomega, ns, name, password string) {
	g.Eventually(func() error {
		sec := &corev1.Secret{}
		if err := env.GetAPIReader().Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, sec); err != nil {
			return err
		}
		sec.Data["password"] = []byte(password)
		return env.Update(context.Background(), sec)
	}).Should(Succeed())
}
