package metalmachine

import (
	"net/netip"
	"testing"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

func bmh(name, fd string, mod ...func(*metal3v1.BareMetalHost)) metal3v1.BareMetalHost {
	h := metal3v1.BareMetalHost{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", ResourceVersion: "1",
		Labels: map[string]string{"pool": "p", infrav1.FailureDomainLabel: fd}, Annotations: map[string]string{}}}
	h.Status.Provisioning.State = metal3v1.StateAvailable
	for _, m := range mod {
		m(&h)
	}
	return h
}

func TestReleasedAndAddresses(t *testing.T) {
	g := NewWithT(t)
	for st, want := range map[metal3v1.ProvisioningState]bool{
		metal3v1.StateAvailable: true, metal3v1.StateReady: true, metal3v1.StateNone: true,
		metal3v1.StateProvisioned: false, metal3v1.StateProvisioning: false, metal3v1.StateDeprovisioning: false,
	} {
		h := bmh("h", "a", func(h *metal3v1.BareMetalHost) { h.Status.Provisioning.State = st })
		g.Expect(Released(&h)).To(Equal(want), "state %q", st)
	}
	reregistering := bmh("h", "a", func(h *metal3v1.BareMetalHost) {
		h.Status.Provisioning.State = metal3v1.StateRegistering
		h.Status.Provisioning.Image = metal3v1.Image{URL: "http://i/x.iso"}
	})
	g.Expect(Released(&reregistering)).To(BeFalse(), "a deployed image is still recorded")
	disklessReregistering := bmh("h", "a", func(h *metal3v1.BareMetalHost) {
		h.Status.Provisioning.State = metal3v1.StateRegistering
		h.Status.Provisioning.CustomDeploy = &metal3v1.CustomDeploy{Method: "yonder-diskless"}
	})
	g.Expect(Released(&disklessReregistering)).To(BeFalse(), "a deployed custom deploy is still recorded")
	h := bmh("h", "a", func(h *metal3v1.BareMetalHost) {
		h.Status.HardwareDetails = &metal3v1.HardwareDetails{Hostname: "node-1", NIC: []metal3v1.NIC{
			{Name: "eth0", IP: "10.0.0.5"}, {Name: "eth1", IP: "203.0.113.9"}, {Name: "eth2", IP: "fd00::5"}, {Name: "eth3"}}}
	})
	g.Expect(Addresses(&h, Inventory{})).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"}, {Type: clusterv1.MachineExternalIP, Address: "203.0.113.9"},
		{Type: clusterv1.MachineInternalIP, Address: "fd00::5"}, {Type: clusterv1.MachineHostName, Address: "node-1"}}))
	// The inventory's static addresses follow the inspected ones (a repeated one once) and its metaData's
	// hostname replaces the inspected one.
	g.Expect(Addresses(&h, Inventory{Hostname: "edge-1", Static: []netip.Addr{netip.MustParseAddr("10.0.0.5"), netip.MustParseAddr("198.51.100.7")}})).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: "10.0.0.5"}, {Type: clusterv1.MachineExternalIP, Address: "203.0.113.9"},
		{Type: clusterv1.MachineInternalIP, Address: "fd00::5"}, {Type: clusterv1.MachineExternalIP, Address: "198.51.100.7"},
		{Type: clusterv1.MachineHostName, Address: "edge-1"}}))
	// A host never inspected still reports what its inventory says.
	bare := bmh("never-inspected", "b")
	g.Expect(Addresses(&bare, Inventory{Static: []netip.Addr{netip.MustParseAddr("10.9.0.1")}})).To(Equal([]clusterv1.MachineAddress{
		{Type: clusterv1.MachineInternalIP, Address: "10.9.0.1"}}))
	g.Expect(Addresses(&bare, Inventory{})).To(BeEmpty())
	g.Expect(ProviderID("ns", "h")).To(Equal("yonder-metal://ns/h"))
}
