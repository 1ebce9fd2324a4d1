package routeplan_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/test/harness"
)

// gatewayLabel marks gateway candidates; only admins (and CAPI's Machine label sync) can set it on a Node.
const gatewayLabel = "node-restriction.kubernetes.io/gateway"

func key(name string) string {
	sum := sha256.Sum256([]byte(name))
	return base64.StdEncoding.EncodeToString(sum[:])
}

func cleanup(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { NewWithT(t).Expect(testenv.Cleanup(context.Background(), env.Client)).To(Succeed()) })
}

// twoSites creates Sites a (no gateways) and b (two gateways), peered via gateways, with their Nodes and
// daemons' NodeNetworks.
func twoSites(ctx context.Context, g Gomega) {
	for _, s := range []struct{ name, nodes, pods string }{{"a", "10.1.0.0/16", "10.101.0.0/16"}, {"b", "10.2.0.0/16", "10.102.0.0/16"}} {
		g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: s.name}, Spec: netv1.SiteSpec{
			NodeCIDRs: []string{s.nodes}, PodCIDRPools: []netv1.PodCIDRPool{{CIDR: s.pods}},
		}})).To(Succeed())
	}
	g.Expect(env.Create(ctx, &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "b-gateways"}, Spec: netv1.GatewayPoolSpec{
		Site: "b", NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{gatewayLabel: "true"}},
		ListenPorts: netv1.Ports{WireGuard: 443},
	}})).To(Succeed())
	g.Expect(env.Create(ctx, &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "ab"}, Spec: netv1.SitePeeringSpec{
		Sites: []string{"a", "b"}, Topology: netv1.TopologyGateway,
	}})).To(Succeed())
	nodes := []struct {
		name, ip string
		gw       bool
	}{{"a1", "10.1.0.1", false}, {"a2", "10.1.0.2", false}, {"b1", "10.2.0.1", false}, {"b-gw1", "10.2.0.10", true}, {"b-gw2", "10.2.0.11", true}}
	for _, n := range nodes {
		labels := map[string]string{}
		var gwReady *bool
		if n.gw {
			labels[gatewayLabel] = "true"
			gwReady = ptr.To(true)
		}
		_, err := testenv.CreateNode(ctx, env.Client, n.name, labels, n.ip, true)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(testenv.PublishNodeNetwork(ctx, env.Client, n.name, key(n.name), "203.0.113."+n.ip[len("10.x.0."):], gwReady)).To(Succeed())
	}
}

// routePlan is the RoutePlan of Site a, whose links these tests follow.
func routePlan(ctx context.Context, g Gomega) *netv1.RoutePlan {
	rp := &netv1.RoutePlan{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: "a"}, rp)).To(Succeed())
	return rp
}

// Plans appear and follow gateway health: when a gateway's daemon reports its gateway function broken,
// the remote Site's plan stops sending to it, and the pool's status says why.
func TestPlansFollowGatewayHealth(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	twoSites(ctx, g)
	testenv.Start(t, env, setup.Options{})

	nodesSlice := expectTwoSitePlan(ctx, g)
	failGateways(ctx, g)
	reportSmallMTU(ctx, g)

	// Recovery brings both back.
	n := &corev1.Node{}
	g.Expect(testenv.PublishNodeNetwork(ctx, env.Client, "b-gw1", key("b-gw1"), "203.0.113.10", ptr.To(true))).To(Succeed())
	g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gw2"}, n)).To(Succeed())
	g.Expect(testenv.SetNodeStatus(ctx, env.Client, n, "10.2.0.11", true)).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(routePlan(ctx, g).Spec.Links[0].RemoteGateways).To(Equal([]string{"b-gw1", "b-gw2"}))
	}).Should(Succeed())
	// Gateway health never touched the ordinary nodes' slice.
	after := &netv1.PeerSlice{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-nodes-0"}, after)).To(Succeed())
	g.Expect(after.ResourceVersion).To(Equal(nodesSlice.ResourceVersion))
	expectGatewayEvents(ctx, g)
}

// expectGatewayEvents: the elections, the failover, the outage and the recovery that
// TestPlansFollowGatewayHealth caused are Events on the objects an operator looks at.
func expectGatewayEvents(ctx context.Context, g Gomega) {
	g.Eventually(func(g Gomega) {
		pool := &netv1.GatewayPool{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gateways"}, pool)).To(Succeed())
		g.Expect(harness.Events(ctx, env.Client, pool)).To(ContainElements(
			"Normal "+netv1.GatewayActivatedEvent+": Gateway b-gw1 carries traffic",
			"Normal "+netv1.GatewayActivatedEvent+": Gateway b-gw2 carries traffic",
			"Warning "+netv1.GatewayDeactivatedEvent+": Gateway b-gw1 stopped carrying traffic: "+netv1.GatewayDataplaneNotReady,
			"Warning "+netv1.GatewayFailoverEvent+": Traffic failed over from b-gw1 ("+netv1.GatewayDataplaneNotReady+") to b-gw2",
			"Warning "+netv1.GatewayDeactivatedEvent+": Gateway b-gw2 stopped carrying traffic: "+netv1.GatewayNodeNotReady,
			HavePrefix("Warning "+netv1.GatewayPoolNoActiveGatewayReason+": Ready is False: None of 2 candidate(s) is healthy"),
			"Normal "+netv1.ReadyCondition+": Ready is True again (was False)",
		))
		site := &netv1.Site{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b"}, site)).To(Succeed())
		g.Expect(harness.Events(ctx, env.Client, site)).To(ContainElement(
			HavePrefix("Warning " + netv1.SiteNoActiveGatewayReason + ": " + netv1.SiteGatewaysAvailableCondition + " is False: No active gateway carries the links to Site(s) a")))
		peering := &netv1.SitePeering{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "ab"}, peering)).To(Succeed())
		g.Expect(harness.Events(ctx, env.Client, peering)).To(ContainElements(
			HavePrefix("Warning "+netv1.SitePeeringLinkDownReason+": Ready is False: Link(s) a↔b have no active gateway"),
			"Normal "+netv1.ReadyCondition+": Ready is True again (was False)",
		))
	}).Should(Succeed())
}

// expectTwoSitePlan waits for twoSites' plan and slices and returns site b's nodes slice.
func expectTwoSitePlan(ctx context.Context, g Gomega) *netv1.PeerSlice {
	g.Eventually(func(g Gomega) {
		rp := routePlan(ctx, g)
		g.Expect(rp.Labels).To(HaveKeyWithValue(netv1.SiteLabel, "a"))
		g.Expect(rp.Spec.Links).To(HaveLen(1))
		l := rp.Spec.Links[0]
		g.Expect(l.Site).To(Equal("b"))
		g.Expect(l.Protocol).To(Equal(netv1.ProtocolWireGuard))
		g.Expect(l.Mode).To(Equal(netv1.LinkModeGateway))
		g.Expect(l.SelfGateway).To(BeTrue())
		g.Expect(l.RemoteGateways).To(Equal([]string{"b-gw1", "b-gw2"}))
		g.Expect(l.Prefixes).To(Equal([]string{"10.2.0.0/16", "10.102.0.0/16"}))
		g.Expect(l.Up).To(BeTrue())
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		s := &netv1.PeerSlice{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gateways-0"}, s)).To(Succeed())
		g.Expect(s.Labels).To(HaveKeyWithValue(netv1.SliceRoleLabel, "gateways"))
		g.Expect(s.Spec.Peers).To(HaveLen(2))
		g.Expect(s.Spec.Peers[0].PublicKey).To(Equal(key("b-gw1")))
		g.Expect(s.Spec.Peers[0].Ports.WireGuard).To(Equal(int32(443)))
		g.Expect(s.Spec.Peers[0].Endpoints).To(Equal([]netv1.Endpoint{{Address: "203.0.113.10", Type: netv1.EndpointExternal}}))
		g.Expect(s.Spec.Peers[0].PodCIDRs).To(HaveLen(1))
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "a-nodes-0"}, s)).To(Succeed())
		g.Expect(s.Spec.Peers).To(HaveLen(2))
	}).Should(Succeed())
	// b's ordinary nodes' slice is complete (b1 with its pod CIDR) before it is taken as the reference that
	// gateway health must leave alone: the controller may write it in a later pass than the slices above.
	nodesSlice := &netv1.PeerSlice{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-nodes-0"}, nodesSlice)).To(Succeed())
		g.Expect(nodesSlice.Spec.Peers).To(HaveLen(1))
		g.Expect(nodesSlice.Spec.Peers[0].Node).To(Equal("b1"))
		g.Expect(nodesSlice.Spec.Peers[0].PodCIDRs).To(HaveLen(1))
	}).Should(Succeed())
	return nodesSlice
}

// failGateways breaks b's gateways one after the other: b-gw1's daemon reports its gateway broken, then
// b-gw2's Node goes NotReady; the link goes down and every status says so.
func failGateways(ctx context.Context, g Gomega) {
	g.Expect(testenv.PublishNodeNetwork(ctx, env.Client, "b-gw1", key("b-gw1"), "203.0.113.10", ptr.To(false))).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(routePlan(ctx, g).Spec.Links[0].RemoteGateways).To(Equal([]string{"b-gw2"}))
	}).Should(Succeed())
	pool := &netv1.GatewayPool{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gateways"}, pool)).To(Succeed())
		g.Expect(pool.Status.Gateways).To(Equal([]netv1.GatewayStatus{
			{Node: "b-gw1", Active: false, Reason: netv1.GatewayDataplaneNotReady}, {Node: "b-gw2", Active: true},
		}))
		g.Expect(pool.Status.Active).To(Equal(int32(1)))
	}).Should(Succeed())

	n := &corev1.Node{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: "b-gw2"}, n)).To(Succeed())
	g.Expect(testenv.SetNodeStatus(ctx, env.Client, n, "10.2.0.11", false)).To(Succeed())
	g.Eventually(func(g Gomega) {
		l := routePlan(ctx, g).Spec.Links[0]
		g.Expect(l.RemoteGateways).To(BeEmpty())
		g.Expect(l.Up).To(BeFalse())
		site := &netv1.Site{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "b"}, site)).To(Succeed())
		c := meta.FindStatusCondition(site.Status.Conditions, netv1.SiteGatewaysAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring("Site(s) a"))
		g.Expect(site.Status.Gateways).To(Equal(int32(2)))
		g.Expect(site.Status.ActiveGateways).To(BeZero())
		peering := &netv1.SitePeering{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "ab"}, peering)).To(Succeed())
		g.Expect(meta.FindStatusCondition(peering.Status.Conditions, netv1.ReadyCondition).Reason).To(Equal(netv1.SitePeeringLinkDownReason))
	}).Should(Succeed())
}

// reportSmallMTU: a1's daemon reports a smaller underlay MTU than its Site's, and the Site says so.
func reportSmallMTU(ctx context.Context, g Gomega) {
	nn := &netv1.NodeNetwork{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: "a1"}, nn)).To(Succeed())
	nn.Spec.UnderlayMTU = 1400
	g.Expect(env.Update(ctx, nn)).To(Succeed())
	g.Eventually(func(g Gomega) {
		site := &netv1.Site{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "a"}, site)).To(Succeed())
		g.Expect(site.Status.MTUMismatches).To(Equal([]string{"a1"}))
		c := meta.FindStatusCondition(site.Status.Conditions, netv1.SiteMTUConsistentCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Message).To(ContainSubstring("below spec.mtu 1500"))
	}).Should(Succeed())
}

// converged waits until a pass that started after everything above found nothing to write: it pokes a
// NodeNetwork (an event that always starts a pass) and checks that pass's writes.
func converged(ctx context.Context, g Gomega, c *testenv.Controller) {
	g.Eventually(func(g Gomega) {
		p := c.RoutePlan.Passes()
		nn := &netv1.NodeNetwork{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "a1"}, nn)).To(Succeed())
		if nn.Annotations == nil {
			nn.Annotations = map[string]string{}
		}
		nn.Annotations["test.yonder.dev/poke"] = fmt.Sprint(p)
		g.Expect(env.Update(ctx, nn)).To(Succeed())
		g.Eventually(c.RoutePlan.Passes).Should(BeNumerically(">", p))
		g.Expect(c.RoutePlan.LastPassWrites()).To(BeZero())
	}).Should(Succeed())
}

// resourceVersions of everything the controller writes.
func resourceVersions(ctx context.Context, g Gomega) map[string]string {
	rvs := map[string]string{}
	for _, l := range []client.ObjectList{&netv1.RoutePlanList{}, &netv1.PeerSliceList{}, &corev1.NodeList{}, &netv1.SiteList{}, &netv1.GatewayPoolList{}, &netv1.SitePeeringList{}} {
		g.Expect(env.List(ctx, l)).To(Succeed())
		items, err := meta.ExtractList(l)
		g.Expect(err).NotTo(HaveOccurred())
		for _, o := range items {
			mo := o.(client.Object)
			rvs[fmt.Sprintf("%T/%s", o, mo.GetName())] = mo.GetResourceVersion()
		}
	}
	return rvs
}

// A restarted controller computes the identical plan from what is published and writes nothing.
func TestRestartWritesNothing(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	twoSites(ctx, g)
	first := testenv.Start(t, env, setup.Options{SliceSize: 1})
	g.Eventually(func(g Gomega) {
		g.Expect(routePlan(ctx, g).Spec.Links).To(HaveLen(1))
		nodes := &corev1.NodeList{}
		g.Expect(env.List(ctx, nodes)).To(Succeed())
		for _, n := range nodes.Items {
			g.Expect(n.Spec.PodCIDRs).NotTo(BeEmpty())
		}
		slices := &netv1.PeerSliceList{}
		g.Expect(env.List(ctx, slices)).To(Succeed())
		g.Expect(slices.Items).To(HaveLen(5)) // slice size 1: one per node
	}).Should(Succeed())
	converged(ctx, g, first)
	g.Expect(first.Client.Writes()).To(BeNumerically(">", 0))
	g.Expect(first.Stop()).To(Succeed())
	before := resourceVersions(ctx, g)

	second := testenv.Start(t, env, setup.Options{SliceSize: 1})
	g.Eventually(func(g Gomega) {
		g.Expect(second.RoutePlan.Passes()).To(BeNumerically(">=", 1))
		g.Expect(second.Node.Reconciles()).To(BeNumerically(">=", 5))
	}).Should(Succeed())
	g.Expect(second.Client.Writes()).To(BeZero())
	g.Expect(resourceVersions(ctx, g)).To(Equal(before))
}

// A deleted or hand-edited published object is repaired.
func TestPublishedObjectsAreRepaired(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	twoSites(ctx, g)
	testenv.Start(t, env, setup.Options{})
	g.Eventually(func(g Gomega) {
		g.Expect(routePlan(ctx, g).Spec.Links).To(HaveLen(1))
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "a-nodes-0"}, &netv1.PeerSlice{})).To(Succeed())
	}).Should(Succeed())

	g.Expect(env.Delete(ctx, &netv1.PeerSlice{ObjectMeta: metav1.ObjectMeta{Name: "a-nodes-0"}})).To(Succeed())
	// The controller repairs the deleted PeerSlice meanwhile and may write the RoutePlan: edit the latest.
	g.Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rp := routePlan(ctx, g)
		rp.Spec.Links = nil
		return env.Update(ctx, rp)
	})).To(Succeed())
	g.Eventually(func(g Gomega) {
		s := &netv1.PeerSlice{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "a-nodes-0"}, s)).To(Succeed())
		g.Expect(s.Spec.Peers).To(HaveLen(2))
		g.Expect(routePlan(ctx, g).Spec.Links).To(HaveLen(1))
	}).Should(Succeed())
}

// One node's change is one write: the slice that holds it. Nothing else is written (the controller plans
// it incrementally and compares only what it recomputed), and the incremental plan is the one a
// restarted controller computes from scratch.
func TestOneNodeChangeWritesItsSliceOnly(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	twoSites(ctx, g)
	c := testenv.Start(t, env, setup.Options{SliceSize: 1})
	g.Eventually(func(g Gomega) {
		slices := &netv1.PeerSliceList{}
		g.Expect(env.List(ctx, slices)).To(Succeed())
		g.Expect(slices.Items).To(HaveLen(5))
	}).Should(Succeed())
	converged(ctx, g, c)
	before, writes := resourceVersions(ctx, g), c.RoutePlan.Writes()

	g.Expect(testenv.PublishNodeNetwork(ctx, env.Client, "a2", key("a2"), "203.0.113.77", nil)).To(Succeed())
	var holder string
	g.Eventually(func(g Gomega) {
		slices := &netv1.PeerSliceList{}
		g.Expect(env.List(ctx, slices)).To(Succeed())
		holder = ""
		for _, s := range slices.Items {
			for _, p := range s.Spec.Peers {
				if p.Node == "a2" && len(p.Endpoints) == 1 && p.Endpoints[0].Address == "203.0.113.77" {
					holder = s.Name
				}
			}
		}
		g.Expect(holder).NotTo(BeEmpty())
	}).Should(Succeed())
	converged(ctx, g, c)
	g.Expect(c.RoutePlan.Writes() - writes).To(Equal(int64(1)))
	after := resourceVersions(ctx, g)
	var rewritten []string
	for k, rv := range after {
		if before[k] != rv {
			rewritten = append(rewritten, k)
		}
	}
	g.Expect(rewritten).To(ConsistOf("*v1alpha1.PeerSlice/" + holder))
	g.Expect(c.Stop()).To(Succeed())

	// From scratch, the same plan: a restarted controller writes nothing.
	second := testenv.Start(t, env, setup.Options{SliceSize: 1})
	g.Eventually(func(g Gomega) {
		g.Expect(second.RoutePlan.Passes()).To(BeNumerically(">=", 1))
		g.Expect(second.Node.Reconciles()).To(BeNumerically(">=", 5))
	}).Should(Succeed())
	g.Expect(second.RoutePlan.Writes()).To(BeZero())
}
