package daemon

import (
	"testing"

	. "github.com/onsi/gomega"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/dataplane/desired"
)

// siteInput is node's input in Site a (ordinary node a1, gateways ga1 and ga2) linked to Site b (gateway gb1);
// aBehindNAT puts Site a behind NAT (its gateways dial gb1).
func siteInput(node string, aBehindNAT bool) desired.Input {
	peer := func(name, cidr, lan, wan string, gw bool) netv1.Peer {
		p := netv1.Peer{Node: name, PodCIDRs: []string{cidr}, PublicKey: "Hx8bR6PTb9C0eXjMmf0v5eP4Bv0hy5RD3zqoPr0hn0s=",
			Endpoints: []netv1.Endpoint{{Address: lan, Type: netv1.EndpointInternal}}, BehindNAT: aBehindNAT && name != "gb1"}
		if wan != "" {
			p.Endpoints = append(p.Endpoints, netv1.Endpoint{Address: wan, Type: netv1.EndpointExternal})
		}
		if gw {
			p.Gateway = &netv1.PeerGateway{Pools: []string{"gw"}, Active: true}
		}
		return p
	}
	cidrs := map[string]string{"a1": "10.10.1.0/24", "ga1": "10.10.2.0/24", "ga2": "10.10.3.0/24"}
	link := netv1.SiteLink{Site: "b", Protocol: netv1.ProtocolWireGuard, Mode: netv1.LinkModeGateway, TunnelMTU: 1370,
		EndpointType: netv1.EndpointExternal, Prefixes: []string{"10.20.0.0/16"}, LocalGateways: []string{"ga1", "ga2"},
		RemoteGateways: []string{"gb1"}, Up: true}
	if aBehindNAT {
		link.Kind = netv1.LinkKindNATInitiated
	}
	return desired.Input{Node: node, Site: "a", PodCIDRs: []string{cidrs[node]},
		Plan: netv1.RoutePlanSpec{Site: "a", IntraSite: netv1.IntraSitePlan{Protocol: netv1.ProtocolVXLAN, TunnelMTU: 1430},
			Links: []netv1.SiteLink{link}},
		Slices: []netv1.PeerSliceSpec{
			{Site: "a", Role: netv1.SliceRoleGateways, Peers: []netv1.Peer{
				peer("ga1", cidrs["ga1"], "192.168.10.21", "198.51.100.21", true),
				peer("ga2", cidrs["ga2"], "192.168.10.22", "198.51.100.22", true)}},
			{Site: "a", Role: netv1.SliceRoleNodes, Peers: []netv1.Peer{peer("a1", cidrs["a1"], "192.168.10.11", "", false)}},
			{Site: "b", Role: netv1.SliceRoleGateways, Peers: []netv1.Peer{peer("gb1", "10.20.1.0/24", "192.168.20.31", "198.51.100.31", true)}},
		}}
}

// The probes watch gateways in a group at the fast cadence (a failed one moves traffic: detect it soon) and
// the peers a node behind NAT dials at the configured one (those probes keep the NAT's mapping; nothing
// moves when they fail).
func TestProbeTargetsAreFastForGroupMembers(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   desired.Input
		fast map[string]bool
	}{
		{"ordinary node, two gateways", siteInput("a1", false), map[string]bool{"ga1/vxlan": true, "ga2/vxlan": true}},
		{"gateway behind NAT dialling the remote gateway", siteInput("ga1", true), map[string]bool{"gb1/wireguard": false}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			st, err := desired.Compute(tc.in, nil)
			g.Expect(err).NotTo(HaveOccurred())
			d := &Daemon{down: map[string]bool{}}
			fast := map[string]bool{}
			for _, tg := range d.probeTargets(tc.in, st) {
				fast[tg.Key] = tg.Fast
			}
			g.Expect(fast).To(Equal(tc.fast))
		})
	}
}
