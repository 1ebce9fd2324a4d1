package metalmachine

import (
	"net/netip"

	metal3v1 "github.com/metal3-io/baremetal-operator/apis/metal3.io/v1alpha1"

	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"

	infrav1 "github.com/yonder-dev/yonder/infrastructure-baremetal/api/v1alpha1"
)

// Released reports whether a host whose image (or custom deploy) was withdrawn is done deprovisioning: it
// is available again, or it is back before availability (registering, inspecting…) with no image or
// custom deploy recorded as deployed (status.provisioning.image, .customDeploy), so nothing of the Machine
// can be left on it.
func Released(h *metal3v1.BareMetalHost) bool {
	switch h.Status.Provisioning.State {
	case metal3v1.StateAvailable, metal3v1.StateReady:
		return true
	case metal3v1.StateNone, metal3v1.StateUnmanaged, metal3v1.StateRegistering, metal3v1.StateInspecting,
		metal3v1.StatePreparing, metal3v1.StateMatchProfile:
		return h.Status.Provisioning.Image.URL == "" && h.Status.Provisioning.CustomDeploy == nil
	}
	return false
}

// Inventory is what a host's inventory record tells about its addresses beyond what the provider saw:
// the static addresses of its networkData and the hostname of its metaData (hostdata).
type Inventory struct {
	Static   []netip.Addr
	Hostname string
}

// Addresses returns the machine addresses of h: the IPs of its inspected NICs (the boot NIC's lease among
// them), then the static addresses its networkData gives the OS, and its hostname — the metaData's when it
// names one (cloud-init sets that), else the inspected one.
func Addresses(h *metal3v1.BareMetalHost, inv Inventory) []clusterv1.MachineAddress {
	var out []clusterv1.MachineAddress
	seen := map[netip.Addr]bool{}
	add := func(a netip.Addr) {
		a = a.Unmap()
		if seen[a] {
			return
		}
		seen[a] = true
		t := clusterv1.MachineInternalIP
		if a.Is4() && !a.IsPrivate() && !a.IsLoopback() && !a.IsLinkLocalUnicast() {
			t = clusterv1.MachineExternalIP
		}
		out = append(out, clusterv1.MachineAddress{Type: t, Address: a.String()})
	}
	hostname := inv.Hostname
	if hw := h.Status.HardwareDetails; hw != nil {
		for _, n := range hw.NIC {
			if a, err := netip.ParseAddr(n.IP); err == nil {
				add(a)
			}
		}
		if hostname == "" {
			hostname = hw.Hostname
		}
	}
	for _, a := range inv.Static {
		add(a)
	}
	if hostname != "" {
		out = append(out, clusterv1.MachineAddress{Type: clusterv1.MachineHostName, Address: hostname})
	}
	if len(out) > 32 {
		out = out[:32]
	}
	return out
}

// ProviderID names the host, so the Node a reused host registers again carries the same providerID.
func ProviderID(namespace, host string) string { return infrav1.ProviderID(namespace, host) }
