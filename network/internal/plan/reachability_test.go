package plan

import (
	"testing"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

func behindNAT(n *Node) {
	n.Network.Reachability = &netv1.NodeReachability{Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: "203.0.113.9"}
}

func reachable(n *Node) {
	n.Network.Reachability = &netv1.NodeReachability{Inbound: netv1.ReachabilityReachable, ObservedAddress: "198.51.100.1"}
}

func relayPool(p *netv1.GatewayPool) { p.Spec.Relay = true }

// natLab is a public Site p (two gateways in a relay pool) and two Sites behind NAT, n and m (one
// gateway each), all peered through gateways.
func natLab(mutate ...func(*Input)) Input {
	in := Input{
		Sites:    []netv1.Site{site("p", "10.1.0.0/16"), site("n", "10.2.0.0/16"), site("m", "10.3.0.0/16", mtu(1400))},
		Pools:    []netv1.GatewayPool{pool("p-gw", "p", relayPool), pool("n-gw", "n"), pool("m-gw", "m")},
		Peerings: []netv1.SitePeering{peering("all", netv1.TopologyGateway, "p", "n", "m")},
		Nodes: []Node{
			node("p1", "p", "10.1.1.0/24", gw, reachable), node("p2", "p", "10.1.2.0/24", gw),
			node("n1", "n", "10.2.1.0/24", gw, behindNAT), node("n9", "n", "10.2.9.0/24"),
			node("m1", "m", "10.3.1.0/24", gw, behindNAT),
		},
	}
	for _, m := range mutate {
		m(&in)
	}
	return in
}

func linkStatus(out *Output, peeringName, a, b string) netv1.LinkStatus {
	for _, l := range out.Peerings[peeringName].Links {
		if l.Sites[0] == a && l.Sites[1] == b {
			return l
		}
	}
	panic("no link " + a + "↔" + b)
}

func peerOf(out *Output, name string) netv1.Peer {
	for _, s := range out.Slices {
		for _, p := range s.Spec.Peers {
			if p.Node == name {
				return p
			}
		}
	}
	panic("no peer " + name)
}

// The three link kinds side by side: p↔n and p↔m NAT-initiated (the NATed end dials), n↔m relayed
// through p's relay gateways with the smaller MTU of the two hops; the peers say who is behind NAT.
func TestLinkKindsFollowReachability(t *testing.T) {
	g := NewWithT(t)
	out := Compute(natLab())

	pn := linkOf(out, "p", "n")
	g.Expect(pn.Kind).To(Equal(netv1.LinkKindNATInitiated))
	g.Expect(pn.Up).To(BeTrue())
	g.Expect(pn.RemoteGateways).To(Equal([]string{"n1"}))
	g.Expect(pn.Relay).To(BeNil())
	np := linkOf(out, "n", "p")
	g.Expect(np.Kind).To(Equal(netv1.LinkKindNATInitiated))
	g.Expect(np.LocalGateways).To(Equal([]string{"n1"}))
	g.Expect(np.RemoteGateways).To(Equal([]string{"p1", "p2"}))
	g.Expect(linkStatus(out, "all", "n", "p")).To(Equal(netv1.LinkStatus{Sites: []string{"n", "p"}, Protocol: netv1.ProtocolWireGuard,
		TunnelMTU: 1500 - 130, Up: true, Kind: netv1.LinkKindNATInitiated, BehindNAT: []string{"n"}}))

	mn := linkOf(out, "m", "n")
	g.Expect(mn.Kind).To(Equal(netv1.LinkKindRelayed))
	g.Expect(mn.Relay).To(Equal(&netv1.LinkRelay{Site: "p", Gateways: []string{"p1", "p2"}}))
	g.Expect(mn.LocalGateways).To(Equal([]string{"m1"}))
	g.Expect(mn.Prefixes).To(Equal([]string{"10.2.0.0/16"}), "the remote Site's prefixes, routed to the relay")
	g.Expect(mn.TunnelMTU).To(Equal(int32(1400-130)), "the smaller MTU of m→p and p→n")
	g.Expect(mn.Protocol).To(Equal(netv1.ProtocolWireGuard))
	g.Expect(mn.Up).To(BeTrue())
	g.Expect(linkOf(out, "n", "m").Relay).To(Equal(mn.Relay), "both ends use the same relay")
	ls := linkStatus(out, "all", "m", "n")
	g.Expect(ls.Kind).To(Equal(netv1.LinkKindRelayed))
	g.Expect(ls.Relay).To(Equal("p"))
	g.Expect(ls.BehindNAT).To(Equal([]string{"m", "n"}))
	g.Expect(ls.TunnelMTU).To(Equal(int32(1270)))
	g.Expect(ls.Up).To(BeTrue())
	g.Expect(out.Peerings["all"].NoPath).To(BeEmpty())

	g.Expect(peerOf(out, "n1").BehindNAT).To(BeTrue())
	g.Expect(peerOf(out, "m1").BehindNAT).To(BeTrue())
	g.Expect(peerOf(out, "p1").BehindNAT).To(BeFalse())
	g.Expect(peerOf(out, "p2").BehindNAT).To(BeFalse(), "unknown reachability counts as reachable")
	g.Expect(out.Sites["n"].NodesBehindNAT).To(Equal(int32(1)))
}

func TestRelayChoiceAndPins(t *testing.T) {
	for _, tc := range []struct {
		name    string
		peering string
		in      func(*Input)
		// link n↔m
		kind      netv1.LinkKind
		relay     string
		relayGWs  []string
		up        bool
		noPath    bool
		behindNAT []string
	}{
		{name: "relay gateways must be reachable", in: func(in *Input) { behindNAT(&in.Nodes[1]) },
			kind: netv1.LinkKindRelayed, relay: "p", relayGWs: []string{"p1"}, up: true, behindNAT: []string{"m", "n"}},
		{name: "a Site marked relay lends every pool", in: func(in *Input) {
			in.Pools[0].Spec.Relay = false
			in.Sites[0].Spec.Relay = true
		}, kind: netv1.LinkKindRelayed, relay: "p", relayGWs: []string{"p1", "p2"}, up: true, behindNAT: []string{"m", "n"}},
		{name: "no relay-capable Site: no path", in: func(in *Input) { in.Pools[0].Spec.Relay = false },
			kind: netv1.LinkKindRelayed, noPath: true, behindNAT: []string{"m", "n"}},
		{name: "relay Never", in: func(in *Input) { in.Peerings[0].Spec.Relay = netv1.RelayNever },
			kind: netv1.LinkKindRelayed, noPath: true, behindNAT: []string{"m", "n"}},
		{name: "an inactive relay gateway is left out", in: func(in *Input) { notReady(&in.Nodes[0]) },
			kind: netv1.LinkKindRelayed, relay: "p", relayGWs: []string{"p2"}, up: true, behindNAT: []string{"m", "n"}},
		{name: "a Site pinned Reachable is dialled", in: func(in *Input) { in.Sites[1].Spec.Reachability = netv1.ReachabilityReachable },
			kind: netv1.LinkKindNATInitiated, up: true, behindNAT: []string{"m"}},
		{name: "relay Always relays a NAT-initiated link too", peering: "a-nm", in: func(in *Input) {
			in.Sites[1].Spec.Reachability = netv1.ReachabilityReachable
			always := peering("a-nm", netv1.TopologyGateway, "n", "m")
			always.Spec.Relay = netv1.RelayAlways
			in.Peerings = append(in.Peerings, always)
		}, kind: netv1.LinkKindRelayed, relay: "p", relayGWs: []string{"p1", "p2"}, up: true, behindNAT: []string{"m"}},
		{name: "the larger MTU wins, then the name", in: func(in *Input) {
			in.Sites = append(in.Sites, site("o", "10.4.0.0/16"))
			in.Sites[0].Spec.MTU = 1300
			in.Pools = append(in.Pools, pool("o-gw", "o", relayPool))
			in.Peerings[0].Spec.Sites = append(in.Peerings[0].Spec.Sites, "o")
			in.Nodes = append(in.Nodes, node("o1", "o", "10.4.1.0/24", gw))
		}, kind: netv1.LinkKindRelayed, relay: "o", relayGWs: []string{"o1"}, up: true, behindNAT: []string{"m", "n"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			out := Compute(natLab(tc.in))
			if tc.peering == "" {
				tc.peering = "all"
			}
			ls := linkStatus(out, tc.peering, "m", "n")
			g.Expect(ls.Kind).To(Equal(tc.kind))
			g.Expect(ls.Up).To(Equal(tc.up))
			g.Expect(ls.Relay).To(Equal(tc.relay))
			g.Expect(ls.BehindNAT).To(Equal(tc.behindNAT))
			sl := linkOf(out, "m", "n")
			if tc.relay != "" {
				g.Expect(sl.Relay).To(Equal(&netv1.LinkRelay{Site: tc.relay, Gateways: tc.relayGWs}))
			} else if tc.kind == netv1.LinkKindRelayed {
				g.Expect(sl.Relay).To(BeNil())
				g.Expect(sl.Up).To(BeFalse(), "no path: the prefixes are blackholed, not leaked")
			}
			if tc.noPath {
				g.Expect(out.Peerings[tc.peering].NoPath).To(ContainElement("m↔n"))
			} else {
				g.Expect(out.Peerings[tc.peering].NoPath).To(BeEmpty())
			}
		})
	}
}

// A Site with a reachable and a NATed gateway carries a link to a NATed Site only on the reachable one, so
// every tunnel has an end that can be dialled; links to reachable Sites keep both.
func TestMixedGatewaysCarryNATLinksOnTheReachableOnes(t *testing.T) {
	g := NewWithT(t)
	out := Compute(natLab(func(in *Input) {
		behindNAT(&in.Nodes[1]) // p2
		in.Sites = append(in.Sites, site("q", "10.5.0.0/16"))
		in.Pools = append(in.Pools, pool("q-gw", "q"))
		in.Peerings[0].Spec.Sites = append(in.Peerings[0].Spec.Sites, "q")
		in.Nodes = append(in.Nodes, node("q1", "q", "10.5.1.0/24", gw, reachable))
	}))
	pn := linkOf(out, "p", "n")
	g.Expect(pn.Kind).To(Equal(netv1.LinkKindNATInitiated))
	g.Expect(pn.LocalGateways).To(Equal([]string{"p1"}))
	g.Expect(linkOf(out, "n", "p").RemoteGateways).To(Equal([]string{"p1"}))
	g.Expect(linkStatus(out, "all", "n", "p").BehindNAT).To(Equal([]string{"n"}))
	pq := linkOf(out, "p", "q")
	g.Expect(pq.LocalGateways).To(Equal([]string{"p1", "p2"}))
	g.Expect(pq.Kind).To(Equal(netv1.LinkKindNATInitiated), "p2 behind NAT dials q1")
	g.Expect(linkStatus(out, "all", "p", "q").BehindNAT).To(Equal([]string{"p"}))
}

// A link with an end behind NAT is WireGuard whatever the Sites prefer: only WireGuard learns a peer's
// endpoint from its traffic. Links between reachable Sites keep their protocol.
func TestNATLinksUseWireGuard(t *testing.T) {
	g := NewWithT(t)
	out := Compute(natLab(func(in *Input) {
		for i := range in.Sites {
			in.Sites[i].Spec.Tunnel.InterSite = netv1.ProtocolVXLAN
		}
		in.Sites = append(in.Sites, site("q", "10.5.0.0/16", interSite(netv1.ProtocolVXLAN)))
		in.Pools = append(in.Pools, pool("q-gw", "q"))
		in.Peerings[0].Spec.Sites = append(in.Peerings[0].Spec.Sites, "q")
		in.Nodes = append(in.Nodes, node("q1", "q", "10.5.1.0/24", gw))
	}))
	g.Expect(linkOf(out, "p", "n").Protocol).To(Equal(netv1.ProtocolWireGuard))
	g.Expect(linkOf(out, "p", "n").TunnelMTU).To(Equal(int32(1500 - 130)))
	g.Expect(linkOf(out, "p", "q").Protocol).To(Equal(netv1.ProtocolVXLAN))
	g.Expect(linkOf(out, "p", "q").Kind).To(Equal(netv1.LinkKindDirect))
}

// FullMesh links are never relayed: two NATed Sites meshed directly have no path, and say so.
func TestFullMeshBetweenNATedSitesHasNoPath(t *testing.T) {
	g := NewWithT(t)
	out := Compute(natLab(func(in *Input) {
		in.Peerings = []netv1.SitePeering{peering("a-mesh", netv1.TopologyFullMesh, "n", "m"), peering("all", netv1.TopologyGateway, "p", "n", "m")}
	}))
	ls := linkStatus(out, "a-mesh", "m", "n")
	g.Expect(ls.Up).To(BeFalse())
	g.Expect(ls.Kind).To(Equal(netv1.LinkKindNATInitiated))
	g.Expect(out.Peerings["a-mesh"].NoPath).To(Equal([]string{"m↔n"}))
}

// Detection changes write only what mentions the node: its slice and the plans whose links change kind.
func TestReachabilityChangeRewritesOnlyWhatItAffects(t *testing.T) {
	g := NewWithT(t)
	in := natLab()
	before := compute(in, nil)
	g.Expect(changed(before, compute(in, before))).To(BeEmpty(), "the same input writes nothing")
	reachable(&in.Nodes[4]) // m1 turns out reachable
	after := compute(in, before)
	g.Expect(changed(before, after)).To(Equal([]string{"plan/m", "plan/n", "plan/p", "slice/m-gateways-0"}))
	g.Expect(linkOf(after, "m", "n").Kind).To(Equal(netv1.LinkKindNATInitiated))
}
