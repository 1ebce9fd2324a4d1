package node_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	netv1 "github.com/yonder-dev/yonder/network/api/v1alpha1"
	"github.com/yonder-dev/yonder/network/internal/testenv"
	"github.com/yonder-dev/yonder/network/setup"
	"github.com/yonder-dev/yonder/test/harness"
)

// locationLabel is a label only admins (and CAPI's Machine label sync) can set on a Node: Site selectors
// may select nothing else.
const locationLabel = "node-restriction.kubernetes.io/location"

func cleanup(t *testing.T) {
	t.Helper()
	t.Cleanup(func() { NewWithT(t).Expect(testenv.Cleanup(context.Background(), env.Client)).To(Succeed()) })
}

func getNode(ctx context.Context, g Gomega, name string) *corev1.Node {
	n := &corev1.Node{}
	g.Expect(env.Get(ctx, client.ObjectKey{Name: name}, n)).To(Succeed())
	return n
}

// Nodes created in the apiserver get their Site's label and distinct pod CIDRs from its pool; a Node
// that the cluster already gave a pod CIDR keeps it.
func TestNodesGetSiteLabelsAndPodCIDRs(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "cloud"}, Spec: netv1.SiteSpec{
		NodeCIDRs: []string{"10.0.0.0/16"}, PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.100.0.0/16"}, {CIDR: "fd00:100::/56"}},
	}})).To(Succeed())
	g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "edge"}, Spec: netv1.SiteSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{locationLabel: "edge"}},
		PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.200.0.0/16", BlockSize: 26}},
	}})).To(Succeed())
	testenv.Start(t, env, setup.Options{})

	for i := range 4 {
		_, err := testenv.CreateNode(ctx, env.Client, fmt.Sprintf("cloud-%d", i), nil, fmt.Sprintf("10.0.1.%d", i+1), true)
		g.Expect(err).NotTo(HaveOccurred())
	}
	_, err := testenv.CreateNode(ctx, env.Client, "edge-0", map[string]string{locationLabel: "edge"}, "192.168.7.2", true)
	g.Expect(err).NotTo(HaveOccurred())
	preset := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "edge-preset", Labels: map[string]string{locationLabel: "edge"}},
		Spec: corev1.NodeSpec{PodCIDR: "10.200.99.0/26", PodCIDRs: []string{"10.200.99.0/26"}}}
	g.Expect(env.Create(ctx, preset)).To(Succeed())
	_, err = testenv.CreateNode(ctx, env.Client, "elsewhere", nil, "172.16.0.1", true)
	g.Expect(err).NotTo(HaveOccurred())

	seen := map[string]string{}
	for i := range 4 {
		name := fmt.Sprintf("cloud-%d", i)
		g.Eventually(func(g Gomega) {
			n := getNode(ctx, g, name)
			g.Expect(n.Labels).To(HaveKeyWithValue(netv1.SiteLabel, "cloud"))
			g.Expect(n.Spec.PodCIDRs).To(HaveLen(2))
			g.Expect(n.Spec.PodCIDR).To(Equal(n.Spec.PodCIDRs[0]))
			g.Expect(netip.MustParsePrefix("10.100.0.0/16").Contains(netip.MustParsePrefix(n.Spec.PodCIDRs[0]).Addr())).To(BeTrue())
			g.Expect(netip.MustParsePrefix(n.Spec.PodCIDRs[1]).Bits()).To(Equal(64))
		}).Should(Succeed())
		n := getNode(ctx, g, name)
		g.Expect(seen).NotTo(HaveKey(n.Spec.PodCIDRs[0]), "pod CIDR handed out twice")
		seen[n.Spec.PodCIDRs[0]] = name
	}
	g.Eventually(func(g Gomega) {
		n := getNode(ctx, g, "edge-0")
		g.Expect(n.Labels).To(HaveKeyWithValue(netv1.SiteLabel, "edge"))
		g.Expect(n.Spec.PodCIDRs).To(Equal([]string{"10.200.0.0/26"}))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		n := getNode(ctx, g, "edge-preset")
		g.Expect(n.Labels).To(HaveKeyWithValue(netv1.SiteLabel, "edge"))
		g.Expect(n.Spec.PodCIDRs).To(Equal([]string{"10.200.99.0/26"}))
	}).Should(Succeed())
	// A Node of no Site gets neither label nor pod CIDR.
	g.Eventually(func(g Gomega) {
		n := getNode(ctx, g, "elsewhere")
		g.Expect(n.Labels).NotTo(HaveKey(netv1.SiteLabel))
		g.Expect(n.Spec.PodCIDRs).To(BeEmpty())
	}).Should(Succeed())
	// Each assignment is an Event on its Node (kubectl get events).
	g.Eventually(func(g Gomega) {
		g.Expect(harness.Events(ctx, env.Client, getNode(ctx, g, "edge-0"))).To(ConsistOf(
			"Normal "+netv1.SiteAssignedEvent+": Assigned to Site edge",
			"Normal "+netv1.PodCIDRsAllocatedEvent+": Allocated pod CIDRs 10.200.0.0/26 from Site edge"))
		g.Expect(harness.Events(ctx, env.Client, getNode(ctx, g, "edge-preset"))).To(ConsistOf(
			"Normal " + netv1.SiteAssignedEvent + ": Assigned to Site edge"))
	}).Should(Succeed())
	g.Expect(harness.Events(ctx, env.Client, getNode(ctx, g, "elsewhere"))).To(BeEmpty())
}

// When the pool is exhausted the Site says so with a clear condition; freeing a block (deleting a Node)
// lets the waiting Node continue. A Node moving to another Site keeps its pod CIDR (it is immutable).
func TestPoolExhaustionAndNodeChangingSite(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	sel := func(v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{locationLabel: v}}
	}
	g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "small"}, Spec: netv1.SiteSpec{
		NodeSelector: sel("small"), PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.50.0.0/23"}},
	}})).To(Succeed())
	g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "other"}, Spec: netv1.SiteSpec{
		NodeSelector: sel("other"), PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.60.0.0/16"}},
	}})).To(Succeed())
	testenv.Start(t, env, setup.Options{})

	for _, name := range []string{"s1", "s2", "s3"} {
		_, err := testenv.CreateNode(ctx, env.Client, name, map[string]string{locationLabel: "small"}, "", true)
		g.Expect(err).NotTo(HaveOccurred())
	}
	site := &netv1.Site{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "small"}, site)).To(Succeed())
		c := meta.FindStatusCondition(site.Status.Conditions, netv1.SitePodCIDRsAvailableCondition)
		g.Expect(c).NotTo(BeNil())
		g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
		g.Expect(c.Reason).To(Equal(netv1.SitePoolExhaustedReason))
		g.Expect(c.Message).To(ContainSubstring("1 Node(s) wait for a pod CIDR"))
		g.Expect(site.Status.PodCIDRs).To(Equal(netv1.PodCIDRUsage{Allocated: 2, Capacity: 2}))
		g.Expect(meta.IsStatusConditionFalse(site.Status.Conditions, netv1.ReadyCondition)).To(BeTrue())
	}).Should(Succeed())
	var waiting, holder string
	for _, name := range []string{"s1", "s2", "s3"} {
		if len(getNode(ctx, g, name).Spec.PodCIDRs) == 0 {
			waiting = name
		} else {
			holder = name
		}
	}
	g.Expect(waiting).NotTo(BeEmpty())
	g.Eventually(func(g Gomega) {
		g.Expect(harness.Events(ctx, env.Client, getNode(ctx, g, waiting))).To(ContainElement(
			HavePrefix("Warning " + netv1.PodCIDRPoolExhaustedEvent + ": Waiting for a pod CIDR: ")))
	}).Should(Succeed())
	freed := getNode(ctx, g, holder).Spec.PodCIDRs
	g.Expect(env.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: holder}})).To(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(getNode(ctx, g, waiting).Spec.PodCIDRs).To(Equal(freed))
	}).Should(Succeed())
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "small"}, site)).To(Succeed())
		g.Expect(meta.IsStatusConditionTrue(site.Status.Conditions, netv1.SitePodCIDRsAvailableCondition)).To(BeTrue())
	}).Should(Succeed())

	// The waiting Node moves to the other Site: new label, same pod CIDR.
	n := getNode(ctx, g, waiting)
	patch := client.MergeFrom(n.DeepCopy())
	n.Labels[locationLabel] = "other"
	g.Expect(env.Patch(ctx, n, patch)).To(Succeed())
	g.Eventually(func(g Gomega) {
		n := getNode(ctx, g, waiting)
		g.Expect(n.Labels).To(HaveKeyWithValue(netv1.SiteLabel, "other"))
		g.Expect(n.Spec.PodCIDRs).To(Equal(freed))
		g.Expect(harness.Events(ctx, env.Client, n)).To(ContainElement("Normal " + netv1.SiteAssignedEvent + ": Moved from Site small to Site other"))
	}).Should(Succeed())
	// Its CIDR is routed to its new Site.
	g.Eventually(func(g Gomega) {
		rp := &netv1.RoutePlan{}
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "small"}, rp)).To(Succeed())
		g.Expect(rp.Spec.Links).To(BeEmpty()) // not peered
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "other"}, rp)).To(Succeed())
		g.Expect(rp.Spec.NonMasqueradeCIDRs).To(ContainElement(freed[0]))
	}).Should(Succeed())
}

// Many Nodes arriving at once, reconciled by several workers, never share a pod CIDR (the cache lags our
// own writes; reservations cover the gap).
func TestConcurrentAllocationsAreDistinct(t *testing.T) {
	g := NewWithT(t)
	ctx := context.Background()
	cleanup(t)
	g.Expect(env.Create(ctx, &netv1.Site{ObjectMeta: metav1.ObjectMeta{Name: "burst"}, Spec: netv1.SiteSpec{
		NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{locationLabel: "burst"}},
		PodCIDRPools: []netv1.PodCIDRPool{{CIDR: "10.70.0.0/16"}},
	}})).To(Succeed())
	c := testenv.Start(t, env, setup.Options{NodeConcurrency: 8})
	// Allocation scans the informer's store in place (no List copies).
	g.Expect(c.Node.Nodes).NotTo(BeNil())
	const count = 60
	for i := range count {
		g.Expect(env.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("burst-%02d", i), Labels: map[string]string{locationLabel: "burst"}}})).To(Succeed())
	}
	g.Eventually(func(g Gomega) {
		nodes := &corev1.NodeList{}
		g.Expect(env.List(ctx, nodes)).To(Succeed())
		owners := map[string]string{}
		for _, n := range nodes.Items {
			g.Expect(n.Spec.PodCIDRs).To(HaveLen(1), n.Name)
			g.Expect(owners).NotTo(HaveKey(n.Spec.PodCIDRs[0]), "pod CIDR %s handed to %s and %s", n.Spec.PodCIDRs[0], owners[n.Spec.PodCIDRs[0]], n.Name)
			owners[n.Spec.PodCIDRs[0]] = n.Name
		}
		g.Expect(owners).To(HaveLen(count))
	}).Should(Succeed())
	site := &netv1.Site{}
	g.Eventually(func(g Gomega) {
		g.Expect(env.Get(ctx, client.ObjectKey{Name: "burst"}, site)).To(Succeed())
		g.Expect(site.Status.PodCIDRs).To(Equal(netv1.PodCIDRUsage{Allocated: count, Capacity: 256}))
		g.Expect(site.Status.Nodes).To(Equal(int32(count)))
	}).Should(Succeed())
}
