package routeplan

import (
	"testing"

	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/plan"
)

// A link that needs a relay and has none makes the SitePeering not Ready with reason NoRelay and a message
// that says what to do; the Site reports its nodes behind NAT.
func TestStatusReportsNATPaths(t *testing.T) {
	g := NewWithT(t)
	p := &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "all", Generation: 3}}
	links := []netv1.LinkStatus{{Sites: []string{"m", "n"}, Protocol: netv1.ProtocolWireGuard, TunnelMTU: 1370, Kind: netv1.LinkKindRelayed, BehindNAT: []string{"m", "n"}}}
	peeringStatus(p, &plan.PeeringReport{Links: links, NoPath: []string{"m↔n"}})
	c := meta.FindStatusCondition(p.Status.Conditions, netv1.ReadyCondition)
	g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
	g.Expect(c.Reason).To(Equal(netv1.SitePeeringNoRelayReason))
	g.Expect(c.Message).To(ContainSubstring("m↔n"))
	g.Expect(c.Message).To(ContainSubstring("spec.relay"))
	g.Expect(p.Status.Links).To(Equal(links))

	s := &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "n"}}
	siteStatus(s, &plan.SiteReport{Nodes: 3, NodesBehindNAT: 2})
	g.Expect(s.Status.NodesBehindNAT).To(Equal(int32(2)))
}
