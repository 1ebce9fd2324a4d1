package admission_test

import (
	"context"
	"testing"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/testenv"
)

// gwLabel is a label only admins (and CAPI's Machine label sync) can set on a Node.
const gwLabel = "node-restriction.kubernetes.io/gateway"

func site(name string, spec netv1.SiteSpec) *netv1.Site {
	return &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: spec}
}

// The apiserver rejects invalid objects through our webhooks, with the offending field's path.
func TestWebhooksRejectWithFieldPaths(t *testing.T) {
	ctx := context.Background()
	t.Cleanup(func() { _ = testenv.Cleanup(ctx, env.Client) })
	NewWithT(t).Expect(env.Create(ctx, site("cloud", netv1.SiteSpec{
		NodeCIDRs: []string{"10.0.0.0/16"}, PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.100.0.0/16"}, {CIDR: "fd00:100::/56"}},
	}))).To(Succeed())
	NewWithT(t).Expect(env.Create(ctx, &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "cloud-gw"}, Spec: netv1.GatewayPoolSpec{
		Site: "cloud", NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{gwLabel: "true"}}, RoutedCIDRs: []string{"172.16.0.0/16"},
	}})).To(Succeed())

	for _, tc := range rejections() {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			err := env.Create(ctx, tc.obj)
			g.Expect(err).To(HaveOccurred())
			for _, w := range tc.want {
				g.Expect(err.Error()).To(ContainSubstring(w))
			}
		})
	}

	t.Run("block size of an existing pool is immutable", func(t *testing.T) {
		g := NewWithT(t)
		s := &netv1.Site{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "cloud"}, s)).To(Succeed())
		s.Spec.PodCIDRPools[0].BlockSize = 25
		err := env.Update(ctx, s)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("spec.podCIDRPools[0].blockSize: Forbidden"))
		// Adding a pool is fine.
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "cloud"}, s)).To(Succeed())
		s.Spec.PodCIDRPools = append(s.Spec.PodCIDRPools, netv1.PodCIDRPool{CIDR: "10.101.0.0/16"})
		g.Expect(env.Update(ctx, s)).To(Succeed())
	})
	t.Run("a GatewayPool cannot move to another Site (schema rule)", func(t *testing.T) {
		g := NewWithT(t)
		p := &netv1.GatewayPool{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "cloud-gw"}, p)).To(Succeed())
		p.Spec.Site = "edge"
		err := env.Update(ctx, p)
		g.Expect(err).To(HaveOccurred())
		g.Expect(err.Error()).To(ContainSubstring("site is immutable"))
	})
	t.Run("a valid disjoint Site and peering are accepted", func(t *testing.T) {
		g := NewWithT(t)
		g.Expect(env.Create(ctx, site("edge", netv1.SiteSpec{NodeCIDRs: []string{"192.168.0.0/16"}, PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.200.0.0/16"}},
			NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"site.node-restriction.kubernetes.io/name": "edge"}}}))).To(Succeed())
		g.Expect(env.Create(ctx, &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "ok"}, Spec: netv1.SitePeeringSpec{Sites: []string{"cloud", "edge"}}})).To(Succeed())
	})
}

// rejection is an object the webhook or the schema must refuse, and what the error must say.
type rejection struct {
	name string
	obj  client.Object
	want []string
}

// rejections are created next to Site cloud (node CIDR 10.0.0.0/16, pools 10.100.0.0/16 and fd00:100::/56)
// and its GatewayPool cloud-gw (routed 172.16.0.0/16).
func rejections() []rejection {
	return []rejection{
		{name: "pod pool overlapping another Site's pool", obj: site("edge", netv1.SiteSpec{PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.100.128.0/17"}}}),
			want: []string{"spec.podCIDRPools[0].cidr", "overlaps spec.podCIDRPools[0].cidr 10.100.0.0/16 of Site cloud"}},
		{name: "node CIDR overlapping another Site's node CIDR", obj: site("edge", netv1.SiteSpec{NodeCIDRs: []string{"10.0.5.0/24"}}),
			want: []string{"spec.nodeCIDRs[0]", "of Site cloud"}},
		{name: "pod pool overlapping a routed CIDR", obj: site("edge", netv1.SiteSpec{PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "172.16.0.0/12"}}}),
			want: []string{"spec.podCIDRPools[0].cidr", "GatewayPool cloud-gw"}},
		{name: "own pools overlap", obj: site("edge", netv1.SiteSpec{PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.8.0.0/16"}, {CIDR: "10.8.1.0/24"}}}),
			want: []string{"spec.podCIDRPools[1].cidr", "overlaps spec.podCIDRPools[0].cidr"}},
		{name: "block larger than its pool", obj: site("edge", netv1.SiteSpec{PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.9.0.0/24", BlockSize: 16}}}),
			want: []string{"spec.podCIDRPools[0]", "does not fit pool"}},
		{name: "block with no room for pods", obj: site("edge", netv1.SiteSpec{PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.9.0.0/24", BlockSize: 31}}}),
			want: []string{"spec.podCIDRPools[0]", "block size /31 of pool 10.9.0.0/24 leaves no room for pods", "use /29 or shorter"}},
		{name: "host bits", obj: site("edge", netv1.SiteSpec{NodeCIDRs: []string{"10.9.0.1/24"}}),
			want: []string{"spec.nodeCIDRs[0]", "use 10.9.0.0/24"}},
		{name: "IPv6 pods on an MTU too small for a tunnel", obj: site("edge", netv1.SiteSpec{MTU: 1300, PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "fd00:9::/56"}}}),
			want: []string{"spec.mtu", "below 1280", "at least 1410"}},
		{name: "Site name that cannot be a label value", obj: site("Edge_1", netv1.SiteSpec{}),
			want: []string{"metadata.name"}},
		{name: "Site selecting a label the Node's kubelet can set", obj: site("edge", netv1.SiteSpec{NodeSelector: &metav1.LabelSelector{
			MatchLabels:      map[string]string{"node-restriction.kubernetes.io/site": "edge", "yonder.dev/location": "edge"},
			MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "topology.kubernetes.io/zone", Operator: metav1.LabelSelectorOpExists}}}}),
			want: []string{`spec.nodeSelector.matchLabels[yonder.dev/location]: Invalid value: "yonder.dev/location": a Node's own kubelet can set this label`,
				`spec.nodeSelector.matchExpressions[0].key: Invalid value: "topology.kubernetes.io/zone"`}},
		{name: "gateway pool selecting a label the Node's kubelet can set", obj: &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "self"}, Spec: netv1.GatewayPoolSpec{
			Site: "cloud", NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{"gateway": "true"}}}},
			want: []string{`spec.nodeSelector.matchLabels[gateway]: Invalid value: "gateway"`, "node-restriction.kubernetes.io"}},
		{name: "gateway pool selecting everything", obj: &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "all"}, Spec: netv1.GatewayPoolSpec{Site: "cloud"}},
			want: []string{"spec.nodeSelector: Required"}},
		{name: "routed CIDR shadowing pods", obj: &netv1.GatewayPool{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: netv1.GatewayPoolSpec{
			Site: "cloud", NodeSelector: metav1.LabelSelector{MatchLabels: map[string]string{gwLabel: "true"}}, RoutedCIDRs: []string{"10.100.7.0/24"}}},
			want: []string{"spec.routedCIDRs[0]", "of Site cloud"}},
		{name: "peering of one Site", obj: &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: netv1.SitePeeringSpec{Sites: []string{"cloud", "cloud"}}},
			want: []string{"spec.sites"}},
		{name: "full mesh with gateway pools", obj: &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: netv1.SitePeeringSpec{
			Sites: []string{"cloud", "edge"}, Topology: netv1.TopologyFullMesh, GatewayPools: []string{"cloud-gw"}}},
			want: []string{"spec.gatewayPools: Forbidden"}},
		{name: "full mesh relayed always", obj: &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: netv1.SitePeeringSpec{
			Sites: []string{"cloud", "edge"}, Topology: netv1.TopologyFullMesh, Relay: netv1.RelayAlways}},
			want: []string{"spec.relay: Forbidden", "only Gateway topology links are relayed"}},
		{name: "reachability outside the enum (schema)", obj: site("edge", netv1.SiteSpec{Reachability: "Sometimes"}),
			want: []string{"spec.reachability", "Unsupported value"}},
		{name: "relay policy outside the enum (schema)", obj: &netv1.SitePeering{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: netv1.SitePeeringSpec{
			Sites: []string{"cloud", "edge"}, Relay: "Maybe"}},
			want: []string{"spec.relay", "Unsupported value"}},
		{name: "protocol outside the enum (schema)", obj: site("edge", netv1.SiteSpec{Tunnel: netv1.TunnelSpec{InterSite: "Carrier-Pigeon"}}),
			want: []string{"spec.tunnel.interSite", "Unsupported value"}},
	}
}
