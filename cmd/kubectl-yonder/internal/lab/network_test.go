package lab

import (
	"strings"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
)

// The pod check crosses one link of each kind the lab has, and a NATed site waits for its reachability
// only when a reachable site has a Node to check with.
func TestCheckPairsCoverEveryLinkKind(t *testing.T) {
	g := NewWithT(t)
	nat := map[string]bool{"site-c": true, "site-d": true}
	g.Expect(checkPairs([]string{"site-a", "site-b", "site-c", "site-d"}, nat)).To(Equal([][2]string{
		{"site-a", "site-b"}, {"site-a", "site-c"}, {"site-c", "site-d"}}))
	g.Expect(checkPairs([]string{"site-a", "site-c"}, nat)).To(Equal([][2]string{{"site-a", "site-c"}}))
	g.Expect(checkPairs([]string{"site-a", "site-b"}, nil)).To(Equal([][2]string{{"site-a", "site-b"}}))
	g.Expect(checkPairs([]string{"site-c", "site-d"}, nat)).To(Equal([][2]string{{"site-c", "site-d"}}))

	nodes := map[string]string{"a1": "site-a", "c1": "site-c", "d1": "site-d"}
	g.Expect(detectable("site-c", nodes, nat)).To(BeTrue())
	g.Expect(detectable("site-a", nodes, nat)).To(BeFalse(), "no other reachable site answers site-a's checks")
	delete(nodes, "a1")
	g.Expect(detectable("site-c", nodes, nat)).To(BeFalse())
}

// lab status shows every link with its kind, the sites behind NAT and the relay, and each Node's
// detected reachability.
func TestStatusShowsLinkKinds(t *testing.T) {
	g := NewWithT(t)
	var b strings.Builder
	printLinks(&b, []netv1.SitePeering{{ObjectMeta: metav1.ObjectMeta{Name: "lab"}, Spec: netv1.SitePeeringSpec{Topology: netv1.TopologyGateway},
		Status: netv1.SitePeeringStatus{Links: []netv1.LinkStatus{
			{Sites: []string{"site-a", "site-b"}, Protocol: netv1.ProtocolWireGuard, TunnelMTU: 1370, Up: true, Kind: netv1.LinkKindDirect},
			{Sites: []string{"site-a", "site-c"}, Protocol: netv1.ProtocolWireGuard, TunnelMTU: 1370, Up: true, Kind: netv1.LinkKindNATInitiated, BehindNAT: []string{"site-c"}},
			{Sites: []string{"site-c", "site-d"}, Protocol: netv1.ProtocolWireGuard, TunnelMTU: 1370, Up: true, Kind: netv1.LinkKindRelayed, BehindNAT: []string{"site-c", "site-d"}, Relay: "site-a"},
		}}}})
	g.Expect(b.String()).To(MatchRegexp(`site-a<->site-b\s+Direct\s+-\s+-\s+WireGuard\s+1370\s+true`))
	g.Expect(b.String()).To(MatchRegexp(`site-a<->site-c\s+NATInitiated\s+site-c\s+-\s+WireGuard\s+1370\s+true`))
	g.Expect(b.String()).To(MatchRegexp(`site-c<->site-d\s+Relayed\s+site-c,site-d\s+site-a\s+WireGuard\s+1370\s+true`))

	b.Reset()
	printNodeNetworks(&b, []netv1.NodeNetwork{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: netv1.NodeNetworkSpec{
		Endpoints:    []netv1.Endpoint{{Address: "10.250.3.10", Type: netv1.EndpointInternal}},
		Reachability: &netv1.NodeReachability{Inbound: netv1.ReachabilityBehindNAT, ObservedAddress: "10.250.1.12"}}}},
		[]corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1", Labels: map[string]string{netv1.SiteLabel: "site-c"}}}})
	g.Expect(b.String()).To(MatchRegexp(`n1\s+site-c\s+-\s+10\.250\.3\.10\s+BehindNAT \(seen from 10\.250\.1\.12\)\s+Unknown`))
	g.Expect(describeKind(netv1.LinkStatus{Kind: netv1.LinkKindRelayed, Relay: "site-a"})).To(Equal("Relayed via site-a"))
}
