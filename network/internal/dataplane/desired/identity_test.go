package desired

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
)

// The slot-1 address must be one no other interface of the node holds: not slot 0's, not the pod bridge's
// (host-local's default gateway, the prefix's second address), not the prefix's broadcast (the kernel then
// classifies it as the bridge subnet's broadcast and refuses it as a route's source), and not one host-local
// may give a pod (WriteCNIConfig ends its range before it; the daemon's cni_test runs the real plugin).
func TestSlotAddr(t *testing.T) {
	for _, tc := range []struct {
		name     string
		podCIDRs []string
		slot0    string
		slot1    string // empty: slot 1 is an error
	}{
		{"/24", []string{"10.244.3.0/24"}, "10.244.3.0", "10.244.3.254"},
		{"/16", []string{"10.7.0.0/16"}, "10.7.0.0", "10.7.255.254"},
		{"/26 not at a /24 boundary", []string{"10.1.2.64/26"}, "10.1.2.64", "10.1.2.126"},
		{"host bits set", []string{"10.1.2.77/26"}, "10.1.2.64", "10.1.2.126"},
		{"IPv6 first: the first IPv4 CIDR", []string{"fd00:10:244:3::/64", "10.244.3.0/24", "10.99.0.0/24"}, "10.244.3.0", "10.244.3.254"},
		{"/30: one address left, none for pods", []string{"10.0.0.4/30"}, "10.0.0.4", "10.0.0.6"},
		{"/31: none", []string{"10.0.0.4/31"}, "10.0.0.4", ""},
		{"/32: none", []string{"10.0.0.4/32"}, "10.0.0.4", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p, ok := TunnelPrefix(tc.podCIDRs)
			g.Expect(ok).To(BeTrue())
			tunnel, _ := TunnelAddr(tc.podCIDRs)
			g.Expect(tunnel.String()).To(Equal(tc.slot0), "slot 0 is the tunnel address")
			s0, err := SlotAddr(p, 0)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s0).To(Equal(tunnel))

			s1, err := SlotAddr(p, 1)
			if tc.slot1 == "" {
				g.Expect(err).To(MatchError(ContainSubstring("no address for WireGuard slot 1")))
				g.Expect(s1.IsValid()).To(BeFalse(), "never slot 0's address")
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(s1.String()).To(Equal(tc.slot1))
			gateway, broadcast := p.Addr().Next(), lastAddr(p)
			g.Expect(p.Contains(s1)).To(BeTrue())
			g.Expect(s1).NotTo(Equal(s0))
			g.Expect(s1).NotTo(Equal(gateway), "the pod bridge's address")
			g.Expect(s1).NotTo(Equal(broadcast))
			g.Expect(s1.Next()).To(Equal(broadcast), "host-local's default range ends at the address before the broadcast")
		})
	}
}

func TestTunnelPrefixWithoutIPv4(t *testing.T) {
	g := NewWithT(t)
	_, err := SlotAddr(netip.Prefix{}, 0)
	g.Expect(err).To(HaveOccurred(), "a state without a tunnel prefix has no slot address")
	_, ok := TunnelPrefix([]string{"fd00:10:244:3::/64"})
	g.Expect(ok).To(BeFalse())
	_, ok = TunnelPrefix([]string{"not a CIDR"})
	g.Expect(ok).To(BeFalse())
}

// Peers address a node's slots from its pod CIDR in the PeerSlice: slot 1 (current, or next while the
// peer rotates) is the last address but one, and a peer whose pod CIDR has none is left out of WireGuard
// only (VXLAN needs no slot address).
func TestComputeSlotAddresses(t *testing.T) {
	g := NewWithT(t)
	in := input("ga1", "10.10.2.0/24")
	gb1 := &in.Slices[2].Peers[0]
	gb1.NextPublicKey = "kJ4hqbmfN0yLz0QZ8KlWq6m6yq3V0hJv9bUQ8VYVb3w="
	d, err := Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	h := d.Hops["gb1/wireguard"]
	g.Expect(h.WGAddr.String()).To(Equal("10.20.1.0"))
	g.Expect(h.NextWGAddr.String()).To(Equal("10.20.1.254"))
	g.Expect(h.WGPort).To(Equal(DefaultWireGuardPort))
	g.Expect(h.NextWGPort).To(Equal(DefaultWireGuardPort + 1))
	g.Expect(d.TunnelPrefix.String()).To(Equal("10.10.2.0/24"))

	gb1.WireGuardSlot, gb1.NextPublicKey = 1, ""
	d, err = Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Hops["gb1/wireguard"].WGAddr.String()).To(Equal("10.20.1.254"))
	g.Expect(d.Hops["gb1/wireguard"].WGPort).To(Equal(DefaultWireGuardPort + 1))

	gb1.PodCIDRs = []string{"10.20.1.0/31"}
	d, err = Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Hops).NotTo(HaveKey("gb1/wireguard"))
	a1 := &in.Slices[1].Peers[0]
	a1.PodCIDRs, a1.WireGuardSlot = []string{"10.10.1.0/31"}, 1
	d, err = Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.Hops).To(HaveKey("a1/vxlan"))
	g.Expect(d.Hops["a1/vxlan"].ProbePort).To(Equal(DefaultProbePort))
}
