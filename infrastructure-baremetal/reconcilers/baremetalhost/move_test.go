package baremetalhost_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	clusterctlv1 "sigs.k8s.io/cluster-api/cmd/clusterctl/api/v1alpha3"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/redfishsim"
)

// clusterctl move recreates objects without their status. A provisioned host whose status is gone is
// rebuilt from its annotations — still provisioned with its image, the BMC pin and TPM pin kept, the
// inventory read again over Redfish — and is not PXE-booted again.
func TestStatusRebuiltAfterMove(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-move").Name
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s1", "52:54:00:40:00:01")
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s1", "52:54:00:40:00:01"))
	proc := startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h1", sim, "s1", "52:54:00:40:00:01", bmcPass)
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	claim(g, ns, h, "moved")
	g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
	before := getHost(g, h)

	// clusterctl move carries the BMC Secret because it has clusterctl's move label; the host is not its
	// owner (deleting the host must not garbage-collect a Secret the provider does not own).
	sec := &corev1.Secret{}
	g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKey{Namespace: ns, Name: h.Spec.BMC.CredentialsName}, sec)).To(Succeed())
	g.Expect(sec.Labels).To(HaveKeyWithValue(baremetalhost.MoveLabel, ""))
	g.Expect(sec.OwnerReferences).To(BeEmpty())
	rv := sec.ResourceVersion

	// The move: the controller is stopped (clusterctl pauses), the object comes back without status.
	// The boot lab's attestation server still writes the host (it records the release of the bootstrap
	// data), so the wipe retries on a conflict with the latest version.
	proc.Stop()
	g.Eventually(func(g Gomega) {
		cur := getHost(g, h)
		cur.Status = metal3v1.BareMetalHostStatus{}
		g.Expect(env.Status().Update(ctx, cur)).To(Succeed())
	}).Should(Succeed())
	g.Expect(getHost(g, h).Status.Provisioning.State).To(BeEmpty())
	startController(t, testReconciler(lab.inv), ns)

	g.Eventually(func(g Gomega) {
		got := getHost(g, h)
		g.Expect(got.Status.Provisioning.State).To(Equal(metal3v1.StateProvisioned))
		g.Expect(got.Status.Provisioning.Image.URL).To(Equal(before.Status.Provisioning.Image.URL))
		g.Expect(got.Status.HardwareDetails).NotTo(BeNil())
		g.Expect(got.Status.PoweredOn).To(BeTrue())
		g.Expect(got.Status.OperationalStatus).To(Equal(metal3v1.OperationalStatusOK))
	}).Should(Succeed())
	got := getHost(g, h)
	g.Expect(got.Annotations[baremetalhost.CertPinAnnotation]).To(Equal(before.Annotations[baremetalhost.CertPinAnnotation]))
	g.Expect(got.Annotations[baremetalhost.EnrolmentAnnotation]).To(Equal(before.Annotations[baremetalhost.EnrolmentAnnotation]))
	g.Expect(sim.State("s1").PXEBoots).To(Equal(1), "a moved provisioned host is not provisioned again")
	g.Expect(env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(sec), sec)).To(Succeed())
	g.Expect(sec.ResourceVersion).To(Equal(rv), "the move label is written once, not on every reconcile")
}

// clusterctl move ends by deleting the source copy of every object it recreated in the target: a JSON
// patch that replaces all its annotations with clusterctl's delete-for-move annotation (our state and
// pins go with them), a delete, and the finalizers removed. The source manager must let the provisioned
// host go without touching it — no power off (the target's manager owns the running host now), no PXE
// boot — and forget its boot table entry (its lease is the target manager's to serve).
func TestClusterctlMoveDeleteLeavesTheHostRunning(t *testing.T) {
	t.Parallel()
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmh-move-del").Name
	const mac = "52:54:00:40:00:02"
	lab := startBootLab(t, env.Client)
	hosts := newPXEHosts(t, lab)
	hosts.add("s2", mac)
	sim := startSim(t, hosts)
	sim.AddSystem(redfishsim.DefaultSystem("s2", mac))
	startController(t, testReconciler(lab.inv), ns)
	h := newHost(g, ns, "h2", sim, "s2", mac, bmcPass, func(h *metal3v1.BareMetalHost) {
		h.Annotations[baremetalhost.BootAddressAnnotation] = "192.0.2.62"
	})
	g.Eventually(state(h)).Should(Equal(metal3v1.StateAvailable))
	claim(g, ns, h, "moved-away")
	g.Eventually(state(h)).Should(Equal(metal3v1.StateProvisioned))
	g.Expect(sim.State("s2").PoweredOn).To(BeTrue())
	_, inTable := lab.inv.HostByMAC(mustMAC(mac))
	g.Expect(inTable).To(BeTrue(), "the provisioned host keeps its lease")

	// clusterctl's deleteSourceObject: the annotations patch, then the delete (the finalizer is left to us
	// here: clusterctl removes it afterwards, the controller must not need that).
	cur := getHost(g, h)
	patch := []byte(`[{"op": "add", "path": "/metadata/annotations", "value": {"` + clusterctlv1.DeleteForMoveAnnotation + `": ""}}]`)
	g.Expect(env.Patch(ctx, cur, client.RawPatch(types.JSONPatchType, patch))).To(Succeed())
	g.Expect(env.Delete(ctx, cur)).To(Succeed())
	g.Eventually(func() bool {
		return apierrors.IsNotFound(env.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(h), &metal3v1.BareMetalHost{}))
	}).Should(BeTrue(), "the controller removed its finalizer")
	g.Consistently(func() redfishsim.SystemState { return sim.State("s2") }, "2s").Should(And(
		HaveField("PoweredOn", BeTrue()), HaveField("PXEBoots", 1)), "the moved host keeps running, untouched")
	_, inTable = lab.inv.HostByMAC(mustMAC(mac))
	g.Expect(inTable).To(BeFalse(), "this manager no longer serves the moved host's lease")
}
