package desired

import (
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

func peer(node, cidr, lan, wan string, gw bool) netv1.Peer {
	p := netv1.Peer{Node: node, PodCIDRs: []string{cidr}, PublicKey: "Hx8bR6PTb9C0eXjMmf0v5eP4Bv0hy5RD3zqoPr0hn0s=",
		Endpoints: []netv1.Endpoint{{Address: lan, Type: netv1.EndpointInternal}}}
	if wan != "" {
		p.Endpoints = append(p.Endpoints, netv1.Endpoint{Address: wan, Type: netv1.EndpointExternal})
	}
	if gw {
		p.Gateway = &netv1.PeerGateway{Pools: []string{"gw"}, Active: true}
	}
	return p
}

func input(node, cidr string) Input {
	return Input{Node: node, Site: "a", PodCIDRs: []string{cidr},
		Plan: netv1.RoutePlanSpec{Site: "a", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 1430},
			Links: []netv1.SiteLink{{Site: "b", Protocol: netv1.ProtocolWireGuard, Mode: netv1.LinkModeGateway, TunnelMTU: 1370,
				EndpointType: netv1.EndpointExternal, Prefixes: []string{"10.20.0.0/16"}, LocalGateways: []string{"ga1", "ga2"},
				RemoteGateways: []string{"gb1"}, Up: true}}},
		Slices: []netv1.PeerSliceSpec{
			{Site: "a", Role: netv1.SliceRoleGateways, Peers: []netv1.Peer{
				peer("ga1", "10.10.2.0/24", "192.168.10.21", "198.51.100.21", true),
				peer("ga2", "10.10.3.0/24", "192.168.10.22", "198.51.100.22", true)}},
			{Site: "a", Role: netv1.SliceRoleNodes, Peers: []netv1.Peer{peer("a1", "10.10.1.0/24", "192.168.10.11", "", false)}},
			{Site: "b", Role: netv1.SliceRoleGateways, Peers: []netv1.Peer{peer("gb1", "10.20.1.0/24", "192.168.20.31", "198.51.100.31", true)}},
		}}
}

func routes(d State) map[string][]string {
	out := map[string][]string{}
	for _, r := range d.Routes {
		out[r.Prefix.String()] = r.Members
	}
	return out
}

func TestComputeOrdinaryNode(t *testing.T) {
	g := NewWithT(t)
	d, err := Compute(input("a1", "10.10.1.0/24"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)).To(Equal(map[string][]string{
		"10.10.2.0/24": {"ga1/vxlan"},
		"10.10.3.0/24": {"ga2/vxlan"},
		"10.20.0.0/16": {"ga1/vxlan", "ga2/vxlan"}, // remote site through both local gateways
	}))
	g.Expect(d.Hops["ga1/vxlan"].Underlay.String()).To(Equal("192.168.10.21"), "intra-site uses Internal endpoints")
	g.Expect(d.Hops["ga1/vxlan"].MTU).To(Equal(1430))
	g.Expect(d.Hops["ga1/vxlan"].MAC).To(Equal(NodeMAC("ga1")))
	for _, r := range d.Routes {
		if r.Prefix.String() == "10.20.0.0/16" {
			g.Expect(r.MTU).To(Equal(1370), "the path MTU includes the gateways' WireGuard link")
		}
	}

	// A gateway the probes found dead leaves the group; a single-member route keeps its member.
	d, err = Compute(input("a1", "10.10.1.0/24"), map[string]bool{"ga2/vxlan": true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)["10.20.0.0/16"]).To(Equal([]string{"ga1/vxlan"}))
	g.Expect(routes(d)["10.10.3.0/24"]).To(Equal([]string{"ga2/vxlan"}))

	// Every member down: the group keeps them all rather than dropping everything.
	d, err = Compute(input("a1", "10.10.1.0/24"), map[string]bool{"ga1/vxlan": true, "ga2/vxlan": true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)["10.20.0.0/16"]).To(Equal([]string{"ga1/vxlan", "ga2/vxlan"}))
}

func TestComputeGateway(t *testing.T) {
	g := NewWithT(t)
	d, err := Compute(input("ga1", "10.10.2.0/24"), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)).To(Equal(map[string][]string{
		"10.10.1.0/24": {"a1/vxlan"},
		"10.10.3.0/24": {"ga2/vxlan"},
		"10.20.0.0/16": {"gb1/wireguard"},
	}))
	h := d.Hops["gb1/wireguard"]
	g.Expect(h.Underlay.String()).To(Equal("198.51.100.31"), "the link dials External endpoints")
	g.Expect(h.Tunnel.String()).To(Equal("10.20.1.0"))
	g.Expect(h.MTU).To(Equal(1370), "the plan's tunnelMTU is the inner MTU")
	g.Expect(d.WGMTU).To(Equal(1370))
}

func TestComputeNativeIntraSite(t *testing.T) {
	g := NewWithT(t)
	in := input("a1", "10.10.1.0/24")
	in.Plan.IntraSite = netv1.IntraSitePlan{Protocol: netv1.ProtocolNone, TunnelMTU: 1500}
	d, err := Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)["10.20.0.0/16"]).To(Equal([]string{"ga1/native", "ga2/native"}))
	g.Expect(d.Hops["ga1/native"].Underlay.String()).To(Equal("192.168.10.21"))
}

func TestComputeLinkDownDrops(t *testing.T) {
	g := NewWithT(t)
	in := input("a1", "10.10.1.0/24")
	in.Plan.Links[0].Up = false
	d, err := Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	r, ok := routes(d)["10.20.0.0/16"]
	g.Expect(ok).To(BeTrue())
	g.Expect(r).To(BeEmpty(), "a down link is a blackhole, not a leak onto the underlay")
}

func TestComputeNeedsIPv4PodCIDR(t *testing.T) {
	g := NewWithT(t)
	_, err := Compute(Input{Node: "x", PodCIDRs: []string{"fd00::/64"}}, nil)
	g.Expect(err).To(MatchError(ContainSubstring("no IPv4 pod CIDR")))
}

func TestComputeWireGuardL3(t *testing.T) {
	g := NewWithT(t)
	l3 := func(d State) bool {
		for _, r := range d.Routes {
			if r.Prefix.String() == "10.20.0.0/16" {
				return r.L3
			}
		}
		return false
	}
	// Two active gateways in site a: gb1 could not tell ga1's pod traffic from ga2's: VXLAN inside.
	d, err := ComputeWith(input("ga1", "10.10.2.0/24"), nil, Features{WireGuardL3: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l3(d)).To(BeFalse())
	g.Expect(d.Hops["gb1/wireguard"].L3Prefixes).To(BeEmpty())

	// One active gateway on each side: L3, and gb1's peer accepts site b's prefixes from it.
	in := input("ga1", "10.10.2.0/24")
	in.Plan.Links[0].LocalGateways = []string{"ga1"}
	d, err = ComputeWith(in, nil, Features{WireGuardL3: true})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(l3(d)).To(BeTrue())
	g.Expect(d.Hops["gb1/wireguard"].L3Prefixes).To(ConsistOf(netip.MustParsePrefix("10.20.0.0/16")))

	// Without the feature, or while either end rotates its key: VXLAN inside; the accept side stays.
	d, _ = ComputeWith(in, nil, Features{})
	g.Expect(l3(d)).To(BeFalse())
	g.Expect(d.Hops["gb1/wireguard"].L3Prefixes).To(BeEmpty())
	d, _ = ComputeWith(in, nil, Features{WireGuardL3: true, Rotating: true})
	g.Expect(l3(d)).To(BeFalse())
	g.Expect(d.Hops["gb1/wireguard"].L3Prefixes).NotTo(BeEmpty())
	in.Slices[2].Peers[0].NextPublicKey = in.Slices[2].Peers[0].PublicKey
	d, _ = ComputeWith(in, nil, Features{WireGuardL3: true})
	g.Expect(l3(d)).To(BeFalse())

	// An ordinary node never sends L3 (it reaches the gateway over VXLAN).
	in = input("a1", "10.10.1.0/24")
	in.Plan.Links[0].LocalGateways = []string{"ga1"}
	d, _ = ComputeWith(in, nil, Features{WireGuardL3: true})
	g.Expect(l3(d)).To(BeFalse())
}

// natInput is input with site b behind NAT (or site a, aBehindNAT) and a Relayed link to site c through
// relay site r's gateway gr1.
func natInput(node, cidr string, aBehindNAT bool) Input {
	in := input(node, cidr)
	for i := range in.Slices {
		for j := range in.Slices[i].Peers {
			p := &in.Slices[i].Peers[j]
			p.BehindNAT = (in.Slices[i].Site == "a") == aBehindNAT
		}
	}
	in.Plan.Links[0].Kind = netv1.LinkKindNATInitiated
	in.Plan.Links = append(in.Plan.Links, netv1.SiteLink{Site: "c", Protocol: netv1.ProtocolWireGuard, Mode: netv1.LinkModeGateway,
		TunnelMTU: 1300, EndpointType: netv1.EndpointExternal, Prefixes: []string{"10.30.0.0/16"}, LocalGateways: []string{"ga1", "ga2"},
		RemoteGateways: []string{"gc1"}, Kind: netv1.LinkKindRelayed, Relay: &netv1.LinkRelay{Site: "r", Gateways: []string{"gr1"}}, Up: true})
	in.Slices = append(in.Slices, netv1.PeerSliceSpec{Site: "r", Role: netv1.SliceRoleGateways, Peers: []netv1.Peer{
		peer("gr1", "10.40.1.0/24", "192.168.40.41", "198.51.100.41", true)}})
	return in
}

// The reachable end accepts a peer behind NAT without an endpoint; the NATed end dials (and probes) it.
func TestComputeNATDialsOrAccepts(t *testing.T) {
	g := NewWithT(t)
	d, err := Compute(natInput("ga1", "10.10.2.0/24", false), nil)
	g.Expect(err).NotTo(HaveOccurred())
	h := d.Hops["gb1/wireguard"]
	g.Expect(h.Accept).To(BeTrue(), "gb1 is behind NAT: accepted, learned from its handshake")
	g.Expect(h.Initiate).To(BeFalse())
	g.Expect(d.Hops["ga2/vxlan"].Accept).To(BeFalse(), "intra-site peers are always dialled")

	d, err = Compute(natInput("ga1", "10.10.2.0/24", true), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(d.BehindNAT).To(BeTrue())
	h = d.Hops["gb1/wireguard"]
	g.Expect(h.Accept).To(BeFalse())
	g.Expect(h.Initiate).To(BeTrue(), "ga1 is behind NAT and gb1 is not: ga1 dials and keeps the mapping")
	g.Expect(h.Underlay.String()).To(Equal("198.51.100.31"))
}

// A Relayed link: its gateways send the remote Site's prefixes to the relay's gateways (not to the remote
// gateways, which cannot be dialled), at the link's MTU; ordinary nodes send them to their gateways.
func TestComputeRelayedLink(t *testing.T) {
	g := NewWithT(t)
	d, err := Compute(natInput("ga1", "10.10.2.0/24", true), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)["10.30.0.0/16"]).To(Equal([]string{"gr1/wireguard"}))
	g.Expect(d.Hops).NotTo(HaveKey("gc1/wireguard"))
	g.Expect(d.Hops["gr1/wireguard"].Initiate).To(BeTrue())
	for _, r := range d.Routes {
		if r.Prefix.String() == "10.30.0.0/16" {
			g.Expect(r.MTU).To(Equal(1300))
		}
	}
	d, err = Compute(natInput("a1", "10.10.1.0/24", true), nil)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(routes(d)["10.30.0.0/16"]).To(Equal([]string{"ga1/vxlan", "ga2/vxlan"}))

	// Without a relay the prefixes are blackholed.
	in := natInput("ga1", "10.10.2.0/24", true)
	in.Plan.Links[1].Relay, in.Plan.Links[1].Up = nil, false
	d, err = Compute(in, nil)
	g.Expect(err).NotTo(HaveOccurred())
	r, ok := routes(d)["10.30.0.0/16"]
	g.Expect(ok).To(BeTrue())
	g.Expect(r).To(BeEmpty())
}
